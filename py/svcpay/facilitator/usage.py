"""Metered usage reported by providers: the facilitator signs `deduct_allowance` as the
plan's billing authority (the provider names it so when creating the plan).

A report carries an idempotency key. The report is stored before anything is sent and the
signed transaction before it is sent, so a retried report (a timeout, a crash of either
side) returns the first outcome and never deducts twice: a pending report whose
transaction landed is complete; one whose transaction can still land is re-sent as is
(the same signature); only one whose blockhash has expired unsent is signed anew.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import time
from typing import Any

import sqlalchemy.exc
from solana.exceptions import SolanaRpcException
from solana.rpc.core import RPCException
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from solders.transaction import VersionedTransaction

from svcpay.facilitator.lifecycle import record_receipt
from svcpay.facilitator.outage import DATABASE, outage
from svcpay.facilitator.store import Store
from svcpay.program.borsh import AccountInvalidDiscriminator
from svcpay.program.client import BLOCKHASH_LIFETIME_SECS, BillingClient, TransactionError
from svcpay.program.errors import ProgramError
from svcpay.program.generated.accounts.subscription import Subscription

# The largest amount a report may carry: what the store holds exactly on SQLite too (its
# INTEGER is an i64; larger ints overflow it). No allowance comes near it.
MAX_AMOUNT = 2**63 - 1

# Program errors a provider's report can meet, with the HTTP status that says who must act.
STATUS_BY_ERROR = {
    "AllowanceExhausted": 402,
    "SubscriptionNotActive": 402,
    "SubscriptionEnded": 402,
    "NoAllowance": 409,
    "Unauthorized": 409,
    "ZeroAmount": 400,
    "MathOverflow": 400,
}


# A transient failure (the RPC or the database unreachable) is a 503 with Retry-After; every
# other answer is final for that report: a 4xx with the reason, retried or not.
RETRY_AFTER_SECS = 5
TRANSIENT: tuple[type[BaseException], ...] = (
    SolanaRpcException,  # the RPC node unreachable or timing out
    RPCException,  # the RPC node answering with an error of its own (unhealthy, behind)
    OSError,
    sqlalchemy.exc.OperationalError,  # the database unreachable or locked
    sqlalchemy.exc.InterfaceError,
)


class UsageError(Exception):
    def __init__(self, name: str, message: str, status: int) -> None:
        super().__init__(message)
        self.name, self.message, self.status = name, message, status

    @property
    def retry_after(self) -> int | None:
        """Seconds to wait before reporting again (same key), for transient errors only."""
        return RETRY_AFTER_SECS if self.status == 503 else None


class UsageReporter:
    def __init__(self, store: Store, billing: BillingClient, authority: Keypair) -> None:
        self.store, self.billing, self.authority = store, billing, authority
        self._locks: dict[str, asyncio.Lock] = {}

    async def report(
        self, provider_id: str, subscription: str, amount: int, idempotency_key: str
    ) -> dict[str, Any]:
        """Deducts `amount` base units from `subscription`'s allowance, once per key."""
        try:
            Pubkey.from_string(subscription)
        except ValueError as e:
            raise UsageError("InvalidRequest", "subscription is not an address", 400) from e
        if not 0 < amount <= MAX_AMOUNT:
            raise UsageError("InvalidRequest", f"amount must be from 1 to {MAX_AMOUNT}", 400)
        try:
            return await self._report(provider_id, subscription, amount, idempotency_key)
        except TRANSIENT as e:
            found = outage(e)
            name = "Unavailable"  # the node answered with an error of its own
            if found is not None:
                name = "DatabaseUnavailable" if found.dependency == DATABASE else "RpcUnavailable"
            raise UsageError(
                name,
                f"the RPC node or the database is unreachable ({type(e).__name__}); "
                "report again with the same idempotency key",
                503,
            ) from e

    async def _report(
        self, provider_id: str, subscription: str, amount: int, idempotency_key: str
    ) -> dict[str, Any]:
        row, _ = await self.store.usage.begin(provider_id, idempotency_key, subscription, amount)
        if row["subscription"] != subscription or row["amount"] != amount:
            raise UsageError(
                "IdempotencyKeyReused",
                "this idempotency key was used for a different report",
                409,
            )
        lock = self._locks.setdefault(row["id"], asyncio.Lock())
        async with lock:
            try:
                return await self._settle(provider_id, row["id"])
            finally:
                self._locks.pop(row["id"], None)

    async def _settle(self, provider_id: str, report_id: str) -> dict[str, Any]:
        while True:
            row = await self._row(provider_id, report_id)
            if row["status"] != "pending":
                return self._outcome(row)
            if row["signature"]:
                landed = await self.billing.landed(row["signature"])
                if landed:
                    await self.store.usage.finish(row["id"], signature=row["signature"], error=None)
                    return self._outcome({**row, "status": "deducted"})
                young = time.time() - (row["sent_at"] or 0) < BLOCKHASH_LIFETIME_SECS
                if landed is None and young:  # it may still land: the same one, never a second
                    tx = VersionedTransaction.from_bytes(base64.b64decode(row["transaction"]))
                    return await self._send(row, tx)
            sub = await self._owned_subscription(provider_id, row["subscription"])
            tx = await self.billing.deduct_transaction(
                row["subscription"], row["amount"], self.authority, known=sub
            )
            encoded = base64.b64encode(bytes(tx)).decode()
            if await self.store.usage.sent(
                row["id"], row["signature"], str(tx.signatures[0]), encoded
            ):
                return await self._send(row, tx, plan=str(sub.plan))
            # another request or instance recorded its transaction first: go with that one

    async def recover(self, older_than_secs: int = 30) -> int:
        """Completes usage reports left pending (a crash, a timeout, a provider that never
        retried): landed ones are recorded, others sent; returns how many were handled."""
        handled = 0
        for row in await self.store.usage.pending():
            if time.time() - row["created_at"] < older_than_secs:
                continue  # probably in flight
            # A UsageError means recorded (failed) or still pending: either way not lost.
            with contextlib.suppress(UsageError):
                await self._settle(row["provider_id"], row["id"])
            handled += 1
        return handled

    async def _send(
        self, row: dict[str, Any], tx: VersionedTransaction, plan: str | None = None
    ) -> dict[str, Any]:
        """Sends `tx` and records the outcome; `plan` attributes its events (read from the
        chain when the caller does not know it)."""
        try:
            receipt = await self.billing.send_signed(tx)
        except ProgramError as e:
            error = f"{e.name}: {e.message or e}"
            await self.store.usage.finish(row["id"], signature=None, error=error)
            raise UsageError(e.name, e.message or str(e), STATUS_BY_ERROR.get(e.name, 409)) from e
        except TransactionError as e:
            if e.rejected:  # an instruction failed (in simulation or on chain): final
                error = f"DeductionFailed: {e}"
                await self.store.usage.finish(row["id"], signature=None, error=error)
                raise UsageError("DeductionFailed", str(e), 409) from e
            # Not the subscriber's doing (unsent, unconfirmed): the report stays pending.
            signature = str(tx.signatures[0])
            if await self.billing.landed(signature):  # e.g. already processed
                await self.store.usage.finish(row["id"], signature=signature, error=None)
                # `row` may predate this transaction (a first send): name the one that landed
                return self._outcome({**row, "status": "deducted", "signature": signature})
            raise UsageError("DeductionPending", f"{e}; report again with the same key", 503) from e
        if plan is None:
            sub = await self.billing.fetch_subscription(row["subscription"])
            plan = str(sub.plan) if sub else None
        await record_receipt(self.store, receipt, plan=plan, at=await self.billing.chain_time())
        await self.store.usage.finish(row["id"], signature=receipt.signature, error=None)
        deducted = receipt.event("AllowanceDeducted")
        fields = deducted.data if deducted else {}
        extra: dict[str, int] = {
            k: int(fields[k]) for k in ("used", "cap", "remaining") if k in fields
        }
        return self._outcome({**row, "status": "deducted", "signature": receipt.signature}, extra)

    async def _row(self, provider_id: str, report_id: str) -> dict[str, Any]:
        rows = await self.store.usage.get(report_id)
        if rows is None or rows["provider_id"] != provider_id:
            raise UsageError("NotFound", "no such usage report", 404)
        return rows

    async def _owned_subscription(self, provider_id: str, subscription: str) -> Subscription:
        """The subscription's account, if it exists and its plan is the provider's."""
        try:
            sub = await self.billing.fetch_subscription(subscription)
        except AccountInvalidDiscriminator:  # the program's, but a plan or an allowance
            sub = None
        if sub is None:
            raise UsageError("NotFound", f"subscription {subscription} does not exist", 404)
        if not sub.has_allowance:
            raise UsageError(
                "NoAllowance",
                f"subscription {subscription} was made without a metered allowance, so no "
                "usage can be charged to it (its subscriber adds one: set_allowance_cap, "
                "`svcpay subscription allowance SUB AMOUNT`)",
                409,
            )
        if await self.store.providers.resource_owner(str(sub.plan)) != provider_id:
            raise UsageError(
                "Forbidden", "the subscription's plan is not registered to this API key", 403
            )
        return sub

    @staticmethod
    def _outcome(row: dict[str, Any], extra: dict[str, int] | None = None) -> dict[str, Any]:
        if row["status"] == "failed":
            name, _, message = (row["error"] or "DeductionFailed: ").partition(": ")
            raise UsageError(name, message, STATUS_BY_ERROR.get(name, 409))
        return {
            "id": row["id"],
            "status": row["status"],
            "subscription": row["subscription"],
            "amount": str(row["amount"]),
            "transaction": row["signature"],
            **{k: str(v) for k, v in (extra or {}).items()},
        }
