"""The billing crank: collect every due subscription, several per transaction.

`collect` never fails for reasons the subscriber controls (a failed renewal is recorded as
past due), so a packed transaction fails only when something else went wrong, most often
another crank instance renewing one of its subscriptions first (`NotDue`). Then each of its
subscriptions is retried alone, so one bad entry never blocks the rest. Running several
cranks at once is safe: the program refuses a second collection in a period.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from solders.hash import Hash
from solders.instruction import Instruction
from solders.keypair import Keypair
from solders.message import MessageV0
from solders.pubkey import Pubkey

from svcpay.facilitator.lifecycle import record_receipt
from svcpay.facilitator.store import Store
from svcpay.program import instructions
from svcpay.program.client import BillingClient, Receipt, TransactionError
from svcpay.program.errors import ProgramError

log = logging.getLogger("svcpay.crank")
MAX_TX_BYTES = 1232  # Solana's packet limit for a serialized transaction


@dataclass
class CrankSummary:
    due: int = 0
    renewed: int = 0
    renewal_failed: int = 0
    ended: int = 0
    skipped: int = 0  # refused (e.g. already collected by another instance)
    transactions: int = 0
    collected: int = 0  # base units
    errors: list[str] = field(default_factory=list)

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "due": self.due,
            "renewed": self.renewed,
            "renewalFailed": self.renewal_failed,
            "ended": self.ended,
            "skipped": self.skipped,
            "transactions": self.transactions,
            "collected": str(self.collected),
            "errors": self.errors[:20],
        }

    def absorb(self, receipt: Receipt) -> None:
        self.transactions += 1
        for event in receipt.events:
            if event.name == "SubscriptionRenewed":
                self.renewed += 1
                self.collected += int(event.data["amount"])
            elif event.name == "RenewalFailed":
                self.renewal_failed += 1
            elif event.name == "SubscriptionEnded":
                self.ended += 1


def pack(
    items: list[tuple[Pubkey, Instruction]], payer: Pubkey, limit: int = MAX_TX_BYTES
) -> list[list[tuple[Pubkey, Instruction]]]:
    """Greedy groups of (subscription, instruction) whose transaction fits in `limit` bytes."""
    groups: list[list[tuple[Pubkey, Instruction]]] = []
    for item in items:
        if groups and _size([ix for _, ix in [*groups[-1], item]], payer) <= limit:
            groups[-1].append(item)
        else:
            groups.append([item])
    return groups


def _size(ixs: list[Instruction], payer: Pubkey) -> int:
    message = MessageV0.try_compile(payer, ixs, [], Hash.default())
    return 1 + 64 * message.header.num_required_signatures + len(bytes(message))


async def run_once(
    client: BillingClient,
    payer: Keypair,
    plan: Pubkey | Sequence[Pubkey] | None = None,
    now: int | None = None,
    progress: Callable[[CrankSummary], None] | None = None,
    *,
    store: Store | None = None,
    instance: str = "crank",
    lease_secs: int = 300,
    retry_secs: int = 60,
    past_due_retry_secs: int = 3600,
    concurrency: int = 4,
) -> CrankSummary:
    """Collects every subscription due at `now` (of `plan`, or of each of several plans, or
    all) and returns a summary;
    `progress` is called after each transaction. Up to `concurrency` transactions are in
    flight at once.

    With a `store`, instances share the work: each leases its subscriptions first (another
    instance skips them until the lease lapses), records the program's events (webhooks,
    analytics) and a run summary. A subscription whose collection failed waits before it is
    tried again: `retry_secs` (doubling) when the transaction failed, `past_due_retry_secs`
    (doubling, at most a day) when the subscriber could not pay, so a broke subscriber
    costs a few fees per grace period rather than one per run."""
    summary = CrankSummary()
    if plan is None or isinstance(plan, Pubkey):
        due = await client.due_subscriptions(plan, now)
    else:
        now = await client.chain_time() if now is None else now
        due = [d for p in plan for d in await client.due_subscriptions(p, now)]
    summary.due = len(due)
    clock = now if now is not None else await client.chain_time()  # the events' time
    run_id = await store.crank.start_run(instance) if store else None
    if store is not None:
        held = set(
            await store.crank.claim(instance, [str(k) for k, _ in due], lease_secs=lease_secs)
        )
        summary.skipped += len(due) - len(held)
        due = [(k, sub) for k, sub in due if str(k) in held]

    async def sent(group: list[tuple[Pubkey, Instruction]]) -> None:
        receipt = await client.send([ix for _, ix in group], [payer])
        summary.absorb(receipt)
        if progress:
            progress(summary)
        if store is not None:
            await record_receipt(store, receipt, at=clock)
            unpaid = {
                str(e.data["subscription"]): e for e in receipt.events if e.name == "RenewalFailed"
            }
            for key, _ in group:
                if str(key) in unpaid:
                    reason = type(unpaid[str(key)].data.get("reason")).__name__
                    await backoff(key, f"RenewalFailed: {reason}", past_due_retry_secs, 86_400)
            await store.crank.release_many(
                [str(k) for k, _ in group if str(k) not in unpaid], instance
            )

    async def backoff(key: Pubkey, error: str, first: int, most: int) -> None:
        assert store is not None
        lease = await store.crank.lease(str(key))
        attempts = (lease or {}).get("attempts", 0) + 1
        delay = min(first * 2 ** (attempts - 1), most)
        await store.crank.release(
            str(key), error=error, retry_at=int(time.time()) + delay, owner=instance
        )

    async def failed(key: Pubkey, error: Exception) -> None:
        summary.skipped += 1
        summary.errors.append(f"{key}: {error}")
        if progress:
            progress(summary)
        if store is not None:
            await backoff(key, str(error), retry_secs, 6 * 3600)

    slots = asyncio.Semaphore(max(1, concurrency))

    async def handle(group: list[tuple[Pubkey, Instruction]]) -> None:
        async with slots:
            try:
                await sent(group)
            except (ProgramError, TransactionError) as e:
                if len(group) == 1:
                    await failed(group[0][0], e)
                    return
                log.info("a packed collect failed (%s); retrying %d one by one", e, len(group))
                for item in group:
                    try:
                        await sent([item])
                    except (ProgramError, TransactionError) as single:
                        await failed(item[0], single)

    groups = pack(
        [(key, instructions.collect_subscription(sub)) for key, sub in due], payer.pubkey()
    )
    await asyncio.gather(*(handle(g) for g in groups))
    if store is not None and run_id is not None:
        await store.crank.finish_run(run_id, summary.to_json_dict())
    return summary
