"""Which cluster an RPC node is on, and whether a network named on the wire is that one
(issue 37; docs/adr/0038).

`getGenesisHash` names the cluster: mainnet-beta, devnet and testnet by their well-known
hashes, anything else is a local validator. A local validator is its own network,
`solana-localnet` in svcpay's terms (`solana:localnet` in x402's CAIP-2, `localnet` in MPP's
`methodDetails.network`), since its genesis hash changes with every ledger. Tools that know
only the public networks (the x402 SDKs) need it presented as one of them: the operator says
so with `SVCPAY_LOCALNET_AS=solana-mainnet` (or devnet, testnet), and the node then serves
that name as well. A public cluster never stands in for another.

`Cluster.serves(network)` is the one rule every client, gate and facilitator applies; it
takes a network in any of the names above.

A paying client asks with `remembered=True`: an endpoint's genesis hash is read once per
process, however many clients pay through it (one-shot payers made per task would otherwise
spend a call a payment on it). A client that finds a network not served asks again, fresh,
before it refuses, so a URL that now reaches another cluster is never refused on memory.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from solana.rpc.async_api import AsyncClient

MAINNET, DEVNET, TESTNET, LOCALNET = (
    "solana-mainnet",
    "solana-devnet",
    "solana-testnet",
    "solana-localnet",
)
PUBLIC_GENESIS = {
    "5eykt4UsFv8P8NJdTREpY1vzqKqZKvdpKuc147dw2N9d": MAINNET,
    "EtWTRABZaYq6iMfeYKouRu166VU2xqa1wcaWoxPkrZBG": DEVNET,
    "4uhcVJyU9pJkvQyS88uRDiswHXSCkY3zQawwpjk2NsNY": TESTNET,
}
STAND_IN_ENV = "SVCPAY_LOCALNET_AS"
# Every other name a network goes by on the wire -> svcpay's.
ALIASES = {
    **{f"solana:{g[:32]}": name for g, name in PUBLIC_GENESIS.items()},
    "solana:localnet": LOCALNET,
    # x402 v1
    "solana": MAINNET,
    # MPP's methodDetails.network, and the Solana CLI's -u names
    "mainnet": MAINNET,
    "mainnet-beta": MAINNET,
    "devnet": DEVNET,
    "testnet": TESTNET,
    "localnet": LOCALNET,
    "localhost": LOCALNET,
}
NAMES = (MAINNET, DEVNET, TESTNET, LOCALNET)


class WrongCluster(ValueError):
    """A network named in terms, a challenge or a setting is not the RPC node's cluster."""


def canonical(network: str) -> str | None:
    """svcpay's name for `network` (svcpay's, CAIP-2, x402 v1 or MPP naming); None when it is
    not a Solana network svcpay knows."""
    if network in NAMES:
        return network
    return ALIASES.get(network)


def stand_in(env: Mapping[str, str] | None = None) -> str | None:
    """The public network a local validator is presented as (`SVCPAY_LOCALNET_AS`), if any."""
    value = (os.environ if env is None else env).get(STAND_IN_ENV, "").strip()
    if not value:
        return None
    name = canonical(value)
    if name not in (MAINNET, DEVNET, TESTNET):
        raise WrongCluster(
            f"{STAND_IN_ENV}={value!r}: a local validator can stand in for solana-mainnet, "
            "solana-devnet or solana-testnet only"
        )
    return name


@dataclass(frozen=True)
class Cluster:
    """An RPC node's cluster: its genesis hash, and the network it is (`name`)."""

    genesis: str
    name: str
    presented_as: str | None = None  # a local validator's stand-in

    @classmethod
    def of(cls, genesis: str, env: Mapping[str, str] | None = None) -> Cluster:
        public = PUBLIC_GENESIS.get(genesis)
        if public is not None:
            return cls(genesis, public)
        return cls(genesis, LOCALNET, stand_in(env))

    @property
    def local(self) -> bool:
        return self.name == LOCALNET

    @property
    def network(self) -> str:
        """The name this node's terms carry by default: a local validator's stand-in, if
        set, so that tools knowing only public networks can pay on it."""
        return self.presented_as or self.name

    def serves(self, network: str) -> bool:
        """Whether a payment on `network` (any of its names) can be made on this node."""
        name = canonical(network)
        return name is not None and name in (self.name, self.presented_as)

    def describe(self) -> str:
        if not self.local:
            return f"{self.name} (genesis {self.genesis})"
        shown = f", presented as {self.presented_as}" if self.presented_as else ""
        return f"a local validator (solana-localnet, genesis {self.genesis[:8]}…{shown})"

    def require(self, network: str, what: str, where: str = "the RPC node") -> None:
        """Raises WrongCluster, one line naming both, unless this node serves `network`."""
        if not self.serves(network):
            raise WrongCluster(f"{what} is on {network}, but {where} is {self.describe()}")

    def hint(self, network: str) -> str:
        """How to make this node serve `network`, when a setting can."""
        wanted = canonical(network)
        if self.local and wanted in (MAINNET, DEVNET, TESTNET):
            return f"to present this local validator as {wanted}, set {STAND_IN_ENV}={wanted}"
        return "point --url (SVCPAY_RPC_URL) at a node of that cluster"


_GENESIS: dict[str, str] = {}  # endpoint URL -> its genesis hash, as last read


async def cluster_of(
    rpc: AsyncClient, env: Mapping[str, str] | None = None, *, remembered: bool = False
) -> Cluster:
    """The cluster of the node `rpc` reaches: one `getGenesisHash`, or none with
    `remembered` when this process has read it for that endpoint before."""
    endpoint = str(getattr(rpc._provider, "endpoint_uri", ""))
    genesis = _GENESIS.get(endpoint) if remembered and endpoint else None
    if genesis is None:
        genesis = str((await rpc.get_genesis_hash()).value)
        if endpoint:
            _GENESIS[endpoint] = genesis
    return Cluster.of(genesis, env)
