"""The right cluster or nothing, for the gate (issue 37, docs/adr/0038): at start, a gate
that reads the chain (subscriptions, metered use, sessions, a Token-2022 mint) asks its RPC
node's genesis hash and refuses to serve terms whose network names another cluster.

A gate that reads no chain (svcpay's proofs are checked offline) has nothing to ask: its
facilitator checks the network of what it settles. A node that cannot be read at start
leaves the terms unchecked, with a warning, as the facilitator does."""

from __future__ import annotations

import logging
from typing import Any

from solana.rpc.async_api import AsyncClient

from svcpay.rpc.cluster import STAND_IN_ENV, WrongCluster, canonical, cluster_of

log = logging.getLogger("svcpay.gate")

# Where a gate's parts keep what reaches the chain: a ChainSubscriptions' `client`
# (a BillingClient) and its `rpc`, a ChainMints' `rpc`, a SessionScheme's `sessions`...
_HOLDERS = ("rpc", "client", "billing", "sessions", "chain")


def rpc_of(*parts: object) -> AsyncClient | None:
    """The RPC client the first of `parts` that reads the chain reads it with, if any."""
    for part in parts:
        found = _find(part, depth=3)
        if found is not None:
            return found
    return None


def _find(obj: Any, depth: int) -> AsyncClient | None:
    if isinstance(obj, AsyncClient):
        return obj
    if obj is None or depth == 0:
        return None
    for name in _HOLDERS:
        found = _find(getattr(obj, name, None), depth - 1)
        if found is not None:
            return found
    return None


async def check_cluster(network: str, rpc: AsyncClient | None) -> None:
    """Raises WrongCluster, one line naming both and what to change, unless the node `rpc`
    reaches serves `network`. Nothing to check without `rpc`; a warning when it cannot be
    read."""
    if rpc is None:
        return
    try:
        cluster = await cluster_of(rpc)
    except Exception as e:  # unreachable at start: serve, unchecked, as the facilitator does
        log.warning(
            "gate: the RPC node's cluster could not be read (%s): terms on %s are unchecked",
            type(e).__name__, network,
        )  # fmt: skip
        return
    if cluster.serves(network):
        return
    wanted = canonical(network)
    if cluster.local and wanted is not None and wanted != cluster.name:
        fix = (
            f"give Terms(network={cluster.network!r}), or present this local validator as "
            f"{wanted} with {STAND_IN_ENV}={wanted}"
        )
    else:
        fix = f"give Terms(network={cluster.network!r}), or read a node of {network}"
    raise WrongCluster(
        f"the gate's terms are on {network}, but its RPC node is {cluster.describe()}: {fix}"
    )
