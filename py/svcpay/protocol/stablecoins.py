"""The stablecoins svcpay knows by name, at their real addresses on each public cluster
(issue 37's cluster profiles): `svcpay plan create --mint USDC -u devnet` and MPP's
`currency: "USDC"` resolve through this table, and the paywall shows these mints by name.

On a local validator a symbol means the mainnet address: the demo and the tests create
their USDC there (`svcpay localnet` clones it as a local mint at that address). USDT has no
devnet mint of its issuer's, so it is named on mainnet only.
"""

from __future__ import annotations

from dataclasses import dataclass

MAINNET, DEVNET = "solana-mainnet", "solana-devnet"


@dataclass(frozen=True)
class Stablecoin:
    symbol: str
    network: str  # svcpay's network name: solana-mainnet or solana-devnet
    mint: str
    token_2022: bool  # minted by Token-2022 (else SPL Token)


STABLECOINS = (
    Stablecoin("USDC", MAINNET, "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v", False),
    Stablecoin("USDC", DEVNET, "4zMMC9srt5Ri5X14GAgXhaHii3GnPAEERYPJgZJDncDU", False),
    Stablecoin("USDT", MAINNET, "Es9vMFrzaCERmJfrF4H2FYD4KCoNkY11McCe8BenwNYB", False),
    Stablecoin("PYUSD", MAINNET, "2b1kV6DkPAnxd5ixfnxCpjxmKwqjjaYmCZfHsFu24GXo", True),
    Stablecoin("PYUSD", DEVNET, "CXk2AMBfi3TwaEL2468s6zP8xq9NxTXjp9gjMgzeUynM", True),
    Stablecoin("USDG", MAINNET, "2u1tszSeqZ3qBWF3uNGPFc8TzMk2tdiwknnRMWGWjGWH", True),
    Stablecoin("USDG", DEVNET, "4F6PM96JJxngmHnZLBh9n58RH4aTVNWvDs2nuwrT5BP7", True),
)
SYMBOLS = tuple(dict.fromkeys(coin.symbol for coin in STABLECOINS))


def mint_of(symbol: str, network: str) -> str | None:
    """The mint of `symbol` (any case) on `network` (svcpay's name; a local validator,
    `solana-localnet`, uses mainnet's addresses), or None when none is known there."""
    wanted = symbol.upper()
    net = MAINNET if network == "solana-localnet" else network
    for coin in STABLECOINS:
        if coin.symbol == wanted and coin.network == net:
            return coin.mint
    return None


def name_of(mint: str) -> str | None:
    """How a person recognises `mint`: "USDC", "PYUSD (devnet)"; None for any other mint."""
    for coin in STABLECOINS:
        if coin.mint == mint:
            return coin.symbol + (" (devnet)" if coin.network == DEVNET else "")
    return None
