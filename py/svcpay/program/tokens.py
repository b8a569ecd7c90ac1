"""Which token program moves a mint's tokens, and what a transfer of it must carry.

svc_billing takes SPL Token and Token-2022 mints alike (docs/adr/0030). Every instruction
that moves tokens needs the mint's token program, and for a Token-2022 mint with a transfer
hook, the hook's extra accounts, its program and its validation account as remaining
accounts: the program forwards them to Token-2022, which calls the hook. `TokenRoutes`
reads a mint once (its program never changes) and resolves those accounts per transfer.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Confirmed
from solders.instruction import AccountMeta
from solders.pubkey import Pubkey

from svcpay.protocol.token2022 import (
    MintInfo,
    mint_info,
    transfer_hook_accounts,
    validation_address,
)

# A mint's hook program and extensions can change (the authority may update the hook):
# re-read after this long. Its token program never changes.
MINT_TTL_SECS = 60.0


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


@dataclass
class TokenRoutes:
    """Routes transfers over RPC, reading each mint at most once a minute."""

    rpc: AsyncClient
    _mints: dict[Pubkey, tuple[float, MintInfo]] = field(default_factory=dict)

    async def mint(self, mint: Pubkey) -> MintInfo:
        """The mint's parsed account (ValueError when it is not a mint of a token program)."""
        cached = self._mints.get(mint)
        if cached is not None and time.monotonic() - cached[0] < MINT_TTL_SECS:
            return cached[1]
        account = (await self.rpc.get_account_info(mint, Confirmed)).value
        if account is None:
            raise ValueError(f"no mint at {mint}")
        info = mint_info(account.owner, bytes(account.data))
        self._mints[mint] = (time.monotonic(), info)
        return info

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
        `authority`. A hooked mint's validation account and the transfer's accounts are read
        in one call, for hooks whose extra accounts derive from account data."""
        info = await self.mint(mint)
        hook = info.hook_program
        if hook is None:
            return TokenRoute(info.program, (), info)
        wanted: Sequence[Pubkey] = [validation_address(hook, mint), source, destination, mint]
        found = (await self.rpc.get_multiple_accounts(list(wanted), Confirmed)).value
        data = {key: bytes(acct.data) for key, acct in zip(wanted, found, strict=True) if acct}
        return route_with(
            mint,
            info,
            source=source,
            destination=destination,
            authority=authority,
            amount=amount,
            account_data=data.get,
        )
