"""`--mint` as an address or a stablecoin's symbol (USDC, USDT, PYUSD, USDG): the symbol is
looked up in svcpay.protocol.stablecoins for the cluster the RPC node is on (its genesis
hash), so `-u devnet --mint USDC` is devnet's USDC and `-u m --mint USDC` mainnet's."""

from __future__ import annotations

import argparse

from solana.rpc.async_api import AsyncClient
from solders.pubkey import Pubkey

from svcpay.cli._exits import CliError
from svcpay.protocol.stablecoins import SYMBOLS, mint_of
from svcpay.rpc.cluster import cluster_of

MINT_HELP = f"the token: its mint address, or {', '.join(SYMBOLS)} (on the cluster of --url)"


def mint_arg(text: str) -> Pubkey | str:
    """A mint address, or a known stablecoin's symbol (upper-cased; resolved later)."""
    value = text.strip()
    if value.upper() in SYMBOLS:
        return value.upper()
    try:
        return Pubkey.from_string(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a base58 Solana address, nor one of {', '.join(SYMBOLS)}: {text!r}"
        ) from None


async def resolve_mint(rpc: AsyncClient, value: Pubkey | str) -> Pubkey:
    """`value`'s mint on the RPC node's cluster; CliError when the symbol has none there."""
    if isinstance(value, Pubkey):
        return value
    cluster = await cluster_of(rpc)
    mint = mint_of(value, cluster.name)
    if mint is None:
        raise CliError(
            f"{value} has no mint known on {cluster.name}: pass the mint's address instead"
        )
    return Pubkey.from_string(mint)
