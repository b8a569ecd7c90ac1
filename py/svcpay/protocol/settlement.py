"""What a scheme's facilitator side needs of the settlement engine, below both: the refusal
type, the scheme names a settlement row carries, and the engine's interface. The facilitator
(`svcpay.facilitator.settlement.Settler`) implements it; `svcpay.schemes.*.facilitator`
use it without importing the facilitator package."""

from __future__ import annotations

from typing import Any, Protocol

from solders.keypair import Keypair
from solders.transaction import VersionedTransaction

from svcpay.protocol.token2022 import MintAtEpoch

SCHEME_SVCPAY = "svcpay"  # settled by /authorize
SCHEME_X402 = "x402-exact"  # settled by x402's /settle
SCHEME_MPP = "mpp-charge"  # settled or recorded by /mpp/charge/settle or /verify


class SettlementError(Exception):
    """A payment cannot be settled. `name` is the spec's error (InsufficientFunds) or one of
    ours (InvalidTransaction, TermsMismatch, BlockhashExpired, SettlementFailed)."""

    def __init__(self, name: str, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.name, self.message, self.status = name, message, status


class SettlementEngine(Protocol):
    """The durable send-and-confirm path every scheme settles through (one transaction
    settles once, whichever scheme brings it)."""

    @property
    def fee_payer(self) -> Keypair: ...

    def cosign(self, tx: VersionedTransaction) -> VersionedTransaction: ...

    async def registered(self, pay_to: str) -> bool:
        """Whether `pay_to` (a token account) belongs to a registered provider."""
        ...

    async def known(self, signature: str) -> bool:
        """Whether a settlement of this transaction exists (being sent, or settled)."""
        ...

    async def admit(self, payer: str, pay_to: str) -> None:
        """Raises SettlementError when `payer` is over its rate or `pay_to` unknown."""
        ...

    async def simulate(self, signed: VersionedTransaction) -> None: ...

    async def mint_for(self, tx: VersionedTransaction, mint: str) -> MintAtEpoch | None:
        """`mint` as a payment in it is judged now (fee schedule in force, hook) when `tx`
        goes through Token-2022; None, without reading anything, otherwise. SettlementError
        503 when the RPC node cannot say, 400 when `mint` is no token mint."""
        ...

    async def landed_transaction(self, signature: str) -> VersionedTransaction | None:
        """The transaction `signature` names if it succeeded and is confirmed, else None;
        ValueError when `signature` is not one."""
        ...

    async def settle(
        self,
        signed: VersionedTransaction,
        record: dict[str, Any],
        *,
        scheme: str,
        exclusive: bool = False,
        simulate: bool = False,
    ) -> tuple[dict[str, Any], bool]: ...
