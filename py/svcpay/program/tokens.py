"""Which token program moves a mint's tokens, and what a transfer of it must carry.

svc_billing takes SPL Token and Token-2022 mints alike (docs/adr/0030). Every instruction
that moves tokens needs the mint's token program, and for a Token-2022 mint with a transfer
hook, the hook's extra accounts, its program and its validation account as remaining
accounts: the program forwards them to Token-2022, which calls the hook. `TokenRoutes`
reads a mint at most once a minute and resolves those accounts per transfer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from solana.rpc.async_api import AsyncClient
from solders.instruction import AccountMeta
from solders.pubkey import Pubkey

from svcpay.protocol.mints import ChainMints
from svcpay.protocol.token2022 import MintInfo, transfer_hook_accounts


@dataclass(frozen=True)
class TokenRoute:
    """The token program of a transfer's mint, and the remaining accounts it needs."""

    program: Pubkey
    extra: tuple[AccountMeta, ...] = ()
    mint: MintInfo | None = None


def route_with(
    mint: Pubkey,
    info: MintInfo,
    *,
    source: Pubkey,
    destination: Pubkey,
    authority: Pubkey,
    amount: int,
    account_data: Callable[[Pubkey], bytes | None],
) -> TokenRoute:
    """The route of one transfer of `mint` (`info`), resolving a hook's accounts from
    `account_data` (account address -> data)."""
    extra = transfer_hook_accounts(
        info,
        mint_address=mint,
        source=source,
        destination=destination,
        authority=authority,
        amount=amount,
        account_data=account_data,
    )
    return TokenRoute(info.program, tuple(extra), info)


class TokenRoutes:
    """Routes transfers over RPC: the mint through `svcpay.protocol.mints.ChainMints` (read
    at most once a minute), a hooked mint's accounts per transfer."""

    def __init__(self, rpc: AsyncClient) -> None:
        self.mints = ChainMints(rpc)

    async def mint(self, mint: Pubkey) -> MintInfo:
        """The mint's parsed account (ValueError when it is not a mint of a token program)."""
        return await self.mints.mint(mint)

    async def program(self, mint: Pubkey) -> Pubkey:
        return (await self.mint(mint)).program

    async def route(
        self,
        mint: Pubkey,
        *,
        source: Pubkey,
        destination: Pubkey,
        authority: Pubkey,
        amount: int,
    ) -> TokenRoute:
        """The route of a transfer of `amount` of `mint` from `source` to `destination` by
        `authority`: its token program, and a hooked mint's accounts."""
        info = await self.mint(mint)
        extra = await self.mints.hook_accounts(
            mint, source=source, destination=destination, authority=authority, amount=amount
        )
        return TokenRoute(info.program, tuple(extra), info)
