"""What a sent transaction comes back as (`BillingClient.send` and the clients built on it): a
`Receipt` once it landed, or a `TransactionError` naming the program where it failed."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Confirmed
from solders.signature import Signature
from solders.transaction_status import UiTransactionStatusMeta

from svcpay.program.events import Event

# How long a landed transaction's metadata is waited for (`served_meta`).
RECEIPT_WAIT_SECS = 30.0


class TransactionError(RuntimeError):
    """A transaction failed for a reason other than a svc_billing error. `rejected`: one of
    its instructions failed (in simulation or on chain), so sending it again cannot help;
    otherwise it may not have been sent or confirmed (an expired blockhash, a timeout).
    `failed_in`: the program where the failure began (svc_billing itself, a token
    program, or a mint's transfer hook refusing the transfer). `expired`: its blockhash
    expired by block height before it landed, so nothing happened on chain and the same
    intent may be signed again at once."""

    def __init__(
        self,
        message: str,
        logs: list[str] | None = None,
        *,
        rejected: bool = False,
        expired: bool = False,
    ) -> None:
        super().__init__(message)
        self.logs = logs or []
        self.rejected, self.expired = rejected, expired
        self.failed_in = failing_program(self.logs)


def failing_program(logs: list[str]) -> str | None:
    """The program where a failed transaction's error began: the first `Program X failed`
    line of its logs (the innermost call fails first, its callers after it)."""
    for line in logs:
        if line.startswith("Program ") and " failed: " in line:
            return line.split(" ", 2)[1]
    return None


@dataclass(frozen=True)
class Receipt:
    """A confirmed transaction: its signature, compute units and decoded events."""

    signature: str
    compute_units: int
    logs: list[str] = field(repr=False)
    events: list[Event]

    def event(self, name: str) -> Event | None:
        return next((e for e in self.events if e.name == name), None)


async def served_meta(rpc: AsyncClient, sig: Signature) -> UiTransactionStatusMeta | None:
    """The metadata of a transaction the node reported confirmed, once the node serves it:
    a node may report the status first (agave writes the transaction to its ledger after
    the bank confirms it; behind a load balancer, another node may answer), so a `null` is
    asked again, with backoff, for up to RECEIPT_WAIT_SECS; None if it never came."""
    delay, deadline = 0.1, time.monotonic() + RECEIPT_WAIT_SECS
    while True:
        reply = await rpc.get_transaction(
            sig, "json", Confirmed, max_supported_transaction_version=0
        )
        meta = reply.value.transaction.meta if reply.value else None
        if meta is not None or time.monotonic() >= deadline:
            return meta
        await asyncio.sleep(delay)
        delay = min(delay * 2, 2.0)
