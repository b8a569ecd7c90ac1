"""Mints as one-time payments meet them, read over RPC (docs/adr/0031): a mint's account,
cached for a minute (its fee config and hook rarely change; a new fee schedule takes effect
two epochs after it is set), and the cluster's epoch, cached briefly (it picks the schedule
in force), combined into a `MintAtEpoch`; and the extra accounts a transfer through a
transfer hook needs. The facilitator and the gate read only Token-2022 mints through this
(an SPL Token mint has no fee and no hook: no call at all); the paying client reads the
mint it pays in.

`MintReader` is what the payment schemes take; `ChainMints` is it over a solana-py
`AsyncClient`. Paying clients make theirs `shared`: the mints read through one endpoint are
then one cache for the whole process, so a client made per payment reads a mint once a
minute, not once a payment. A reader raises `MintUnavailable` when the RPC node cannot say
(the caller answers 503) and ValueError when the address is no mint of a token program.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Confirmed
from solana.rpc.core import RPCException
from solders.instruction import AccountMeta
from solders.pubkey import Pubkey

from svcpay.protocol.token2022 import (
    MintAtEpoch,
    MintInfo,
    mint_info,
    transfer_hook_accounts,
    validation_address,
)
from svcpay.rpc_errors import rpc_unreachable

T = TypeVar("T")
MINT_TTL_SECS = 60.0
EPOCH_TTL_SECS = 30.0


class MintUnavailable(Exception):
    """The RPC node could not tell what the mint is (unreachable, or it refused)."""


class MintReader(Protocol):
    async def at_epoch(self, mint: Pubkey) -> MintAtEpoch:
        """The mint's token program, fee schedule in force and hook program, now."""
        ...


# Mints read by `shared` readers: (endpoint URL, mint) -> (when read, the mint).
_SHARED_MINTS: dict[tuple[str, Pubkey], tuple[float, MintInfo]] = {}


class ChainMints:
    """`MintReader` over RPC: mints re-read after `mint_ttl` seconds, the epoch after
    `epoch_ttl` (and not at all while every fee schedule known has started). `shared`:
    mints are kept with every other shared reader's of the same endpoint."""

    def __init__(
        self,
        rpc: AsyncClient,
        *,
        mint_ttl: float = MINT_TTL_SECS,
        epoch_ttl: float = EPOCH_TTL_SECS,
        clock: Callable[[], float] = time.monotonic,
        shared: bool = False,
    ) -> None:
        self.rpc, self.mint_ttl, self.epoch_ttl, self.clock = rpc, mint_ttl, epoch_ttl, clock
        self._mints: dict[Pubkey, tuple[float, MintInfo]] = {}
        self._endpoint = str(getattr(rpc._provider, "endpoint_uri", "")) if shared else ""
        # shared only with a known endpoint: two unknown ones must not mix their mints
        self._shared: dict[tuple[str, Pubkey], tuple[float, MintInfo]] | None = (
            _SHARED_MINTS if self._endpoint else None
        )
        self._terms: dict[Pubkey, tuple[MintInfo, int, MintAtEpoch]] = {}
        self._epoch: tuple[float, int] | None = None
        self._highest_epoch = -1  # epochs only grow: a schedule started by then still applies

    async def mint(self, address: Pubkey) -> MintInfo:
        """The mint's account, parsed; ValueError when there is none or it is no mint."""
        now = self.clock()
        cached = self._mints.get(address)
        if cached is None and self._shared is not None:
            cached = self._shared.get((self._endpoint, address))
        if cached is not None and now - cached[0] < self.mint_ttl:
            return cached[1]
        account = (await _asked(self.rpc.get_account_info(address, Confirmed))).value
        if account is None:
            raise ValueError(f"there is no mint at {address} on this cluster")
        info = mint_info(account.owner, bytes(account.data))
        self._mints[address] = (now, info)
        if self._shared is not None:
            if len(self._shared) > 4096:
                self._shared.clear()
            self._shared[(self._endpoint, address)] = (now, info)
        return info

    async def epoch(self) -> int:
        """The cluster's epoch at `confirmed`."""
        now = self.clock()
        if self._epoch is not None and now - self._epoch[0] < self.epoch_ttl:
            return self._epoch[1]
        epoch = (await _asked(self.rpc.get_epoch_info(Confirmed))).value.epoch
        self._epoch = (now, epoch)
        self._highest_epoch = max(self._highest_epoch, epoch)
        return epoch

    async def at_epoch(self, mint: Pubkey) -> MintAtEpoch:
        info = await self.mint(mint)
        config = info.fee_config
        if config is None or self._highest_epoch >= config.newer.epoch:
            epoch = self._highest_epoch  # no fee, or the newer schedule applies for good
        else:
            epoch = await self.epoch()
        cached = self._terms.get(mint)
        if cached is not None and cached[0] is info and cached[1] == epoch:
            return cached[2]
        terms = info.at(max(epoch, 0))
        self._terms[mint] = (info, epoch, terms)
        return terms

    async def hook_accounts(
        self,
        mint: Pubkey,
        *,
        source: Pubkey,
        destination: Pubkey,
        authority: Pubkey,
        amount: int,
    ) -> list[AccountMeta]:
        """What a TransferChecked of `amount` of `mint` appends for its transfer hook:
        nothing without one; else the hook's extra accounts, its program and validation
        account (the validation account and the transfer's accounts read in one call, for
        hooks whose extras derive from account data)."""
        info = await self.mint(mint)
        hook = info.hook_program
        if hook is None:
            return []
        wanted = [validation_address(hook, mint), source, destination, mint]
        found = (await _asked(self.rpc.get_multiple_accounts(wanted, Confirmed))).value
        data = {key: bytes(acct.data) for key, acct in zip(wanted, found, strict=True) if acct}
        return transfer_hook_accounts(
            info,
            mint_address=mint,
            source=source,
            destination=destination,
            authority=authority,
            amount=amount,
            account_data=data.get,
        )


async def _asked(call: Awaitable[T]) -> T:
    try:
        return await call
    except RPCException as e:  # the node answered with an error
        raise MintUnavailable(f"the RPC node refused: {e}") from e
    except Exception as e:
        reason = rpc_unreachable(e)
        if reason is None:
            raise
        raise MintUnavailable(f"the RPC node is unreachable ({reason})") from e
