"""The billing crank: collect every due subscription, several per transaction.

`collect` never fails for reasons the subscriber controls (a failed renewal is recorded as
past due), so a packed transaction fails only when something else went wrong, most often
another crank instance renewing one of its subscriptions first (`NotDue`). Then each of its
subscriptions is retried alone, so one bad entry never blocks the rest. Running several
cranks at once is safe: the program refuses a second collection in a period, and leases
keep instances from doing the same work (short, renewed while a pass runs, given back when
it ends: docs/adr/0023).
"""

from __future__ import annotations

import asyncio
import contextlib
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

from svcpay.facilitator.config import MIN_LEASE_SECS, FacilitatorConfig
from svcpay.facilitator.lifecycle import record_receipt, transfer_refused
from svcpay.facilitator.store import Store
from svcpay.program.client import BillingClient, Receipt, TransactionError, status_name
from svcpay.program.errors import ProgramError
from svcpay.program.generated.accounts.subscription import Subscription
from svcpay.program.generated.program_id import PROGRAM_ID

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
    next_run_in: float | None = None  # seconds until work is known to come (None: unknown)

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
            "nextRunIn": None if self.next_run_in is None else round(self.next_run_in, 1),
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


# Leases (docs/adr/0023): short, renewed by a heartbeat while the pass runs, ended when it
# ends however it ends. Only an instance that dies holds one to its end, so another takes
# its subscriptions over within about `lease_secs`.
DEFAULT_LEASE_SECS = FacilitatorConfig.crank_lease_secs
# The soonest and latest the next pass is asked for (seconds from now), when the crank
# knows when work comes next: a lease that lapses, a retry time, a period that ends.
MIN_NEXT_RUN_SECS = 1.0
# A renewal whose transaction expired unlanded is tried again this soon (doubling, at most
# `retry_secs`): a bench through a lagging node's stale blockhashes saw renewals 78-85 s
# late behind the 60 s penalty of a failed transaction.
EXPIRED_RETRY_SECS = 5
NEXT_RUN_MARGIN_SECS = 0.5
# The chain's clock counts whole seconds and `now` was read a little before the follow-up
# began: what may have fallen due when a pass ends is judged this generously.
FOLLOW_UP_SLACK_SECS = 3.0


def is_due(sub: Subscription, now: int) -> bool:
    """Whether `collect` acts on `sub` at `now`: ACTIVE with its period over, or PAST DUE
    (retry or expire)."""
    status = status_name(sub)
    return status == "PastDue" or (status == "Active" and sub.current_period_end <= now)


def next_due_in(subs: Sequence[tuple[Pubkey, Subscription]], now: int) -> float | None:
    """Seconds until the first ACTIVE subscription of `subs` falls due: one not due yet, or
    one due now, which this pass renews into a period ending `period_secs` later (without
    it, a pass that renewed everything knew of no next work and the crank waited its whole
    interval: renewals drifted a pass late each period; issue 37)."""
    ends = []
    for _, s in subs:
        if status_name(s) != "Active":
            continue
        end = s.current_period_end
        if end <= now:
            end += s.terms.period_secs
        if end > now:
            ends.append(end)
    return float(min(ends) - now) if ends else None


def lease_for(configured: int, due: Sequence[tuple[Pubkey, Subscription]]) -> int:
    """The lease of a pass: the configured one, but no longer than the shortest period among
    `due` (a lease outliving a period would let a crashed instance's subscriptions miss a
    renewal), and never under MIN_LEASE_SECS."""
    shortest = min((s.terms.period_secs for _, s in due), default=configured)
    return max(MIN_LEASE_SECS, min(configured, shortest))


class Leases:
    """The leases this pass holds: renewed every third of their length while it runs (an
    `async with` block), given back when it ends. One that ended in error is given back
    without a retry penalty: nothing the subscriber did went wrong."""

    def __init__(self, store: Store, owner: str, held: set[str], lease_secs: int) -> None:
        self.store, self.owner, self.held, self.lease_secs = store, owner, held, lease_secs
        self._beat: asyncio.Task[None] | None = None

    def done(self, keys: Sequence[str]) -> None:
        self.held.difference_update(keys)

    async def __aenter__(self) -> Leases:
        self._beat = asyncio.create_task(self._heartbeat())
        return self

    async def _heartbeat(self) -> None:
        while True:
            await asyncio.sleep(self.lease_secs / 3)
            if not self.held:
                continue
            try:
                await self.store.crank.extend(sorted(self.held), self.owner, self.lease_secs)
            except Exception as e:  # the pass notices the outage itself; the lease lapses
                log.debug("lease heartbeat failed: %s", e)

    async def __aexit__(self, *exc: object) -> None:
        if self._beat is not None:
            self._beat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._beat
        if self.held:
            try:
                await self.store.crank.give_back(sorted(self.held), self.owner)
            except Exception as e:  # they lapse within lease_secs all the same
                log.debug("giving back %d leases failed: %s", len(self.held), e)
            self.held.clear()


async def run_once(
    client: BillingClient,
    payer: Keypair,
    plan: Pubkey | Sequence[Pubkey] | None = None,
    now: int | None = None,
    progress: Callable[[CrankSummary], None] | None = None,
    *,
    store: Store | None = None,
    instance: str = "crank",
    lease_secs: int = DEFAULT_LEASE_SECS,
    retry_secs: int = 60,
    past_due_retry_secs: int = 3600,
    concurrency: int = 4,
) -> CrankSummary:
    """Collects every subscription due at `now` (of `plan`, or of each of several plans, or
    all) and returns a summary, with `next_run_in` (when the next work comes, if known);
    `progress` is called after each transaction. Up to `concurrency` transactions are in
    flight at once.

    With a `store`, instances share the work: each leases its subscriptions first (another
    instance skips them until the lease is given back or lapses), records the program's
    events (webhooks, analytics) and a run summary. A subscription whose collection failed
    waits before it is tried again: `retry_secs` (doubling) when the transaction failed,
    `past_due_retry_secs` (doubling, at most a day) when the subscriber could not pay, so a
    broke subscriber costs a few fees per grace period rather than one per run. Any other
    error (the RPC node or the database unreachable, a bug) ends the pass: its leases are
    given back at once, without a retry penalty, and the error is raised."""
    summary = CrankSummary()
    plans = [plan] if plan is None or isinstance(plan, Pubkey) else list(plan)
    clock = await client.chain_time() if now is None else now  # also the events' time
    known = [s for p in plans for s in await client.subscriptions(p)]
    due = [(k, s) for k, s in known if is_due(s, clock)]
    summary.due = len(due)
    summary.next_run_in = next_due_in(known, clock)
    if store is None:
        await _Pass(client, payer, summary, progress, concurrency).run(due)
        return summary

    run_id = await store.crank.start_run(instance)
    lease = lease_for(lease_secs, due)
    held = set(await store.crank.claim(instance, [str(k) for k, _ in due], lease_secs=lease))
    skipped = [str(k) for k, _ in due if str(k) not in held]
    summary.skipped += len(skipped)
    if skipped and (free_at := await store.crank.next_free(skipped)) is not None:
        summary.next_run_in = _sooner(summary.next_run_in, free_at - time.time())
    try:
        async with Leases(store, instance, held, lease) as leases:

            def work(events_at: int) -> _Pass:
                one = _Pass(client, payer, summary, progress, concurrency)
                one.store, one.leases, one.instance = store, leases, instance
                one.retry_secs, one.past_due_retry_secs = retry_secs, past_due_retry_secs
                one.events_at = events_at
                return one

            running = asyncio.create_task(
                work(clock).run([(k, s) for k, s in due if str(k) in held])
            )
            try:
                if now is None:  # the chain's clock, read again as the pass goes on
                    follow = _FollowUp(client, store, instance, lease, leases, summary, work)
                    taken = {k for k, _ in due}
                    await follow.run([(k, s) for k, s in known if k not in taken], running, clock)
            except BaseException:
                running.cancel()
                await asyncio.gather(running, return_exceptions=True)
                raise
            await running
    except Exception as e:
        summary.errors.append(f"pass ended: {type(e).__name__}: {e}"[:300])
        with contextlib.suppress(Exception):  # the database may be what failed
            await store.crank.finish_run(run_id, summary.to_json_dict())
        raise
    await store.crank.finish_run(run_id, summary.to_json_dict())
    return summary


class _FollowUp:
    """Renewals that fall due while a pass runs start then, beside it and under its leases,
    not a pass later: at the issue's sizes, with everything at once, subscriptions due a few
    seconds after a pass began waited for it to end, then for a pass of their own (16 s
    late). When the pass ends, those still to come are the next pass's."""

    def __init__(
        self,
        client: BillingClient,
        store: Store,
        instance: str,
        lease: int,
        leases: Leases,
        summary: CrankSummary,
        work: Callable[[int], _Pass],
    ) -> None:
        self.client, self.store, self.instance = client, store, instance
        self.lease, self.leases, self.summary, self.work = lease, leases, summary, work
        self.started: list[asyncio.Task[None]] = []

    async def run(
        self, waiting: list[tuple[Pubkey, Subscription]], running: asyncio.Task[None], now: int
    ) -> None:
        """Starts each of `waiting` once the chain's clock (`now` at first) says it is due,
        until `running` ends, and those due by then; then waits for what it started."""
        waiting = [(k, s) for k, s in waiting if status_name(s) == "Active"]
        read_at = time.monotonic()  # about when `now` was read (a little after)
        try:
            while waiting and not running.done():
                wake = min(s.current_period_end for _, s in waiting)
                if wake > now:
                    # `now` is as old as the last read: the wait may end after `running`,
                    # which the check below the loop makes up for.
                    await asyncio.wait({running}, timeout=wake - now + NEXT_RUN_MARGIN_SECS)
                    if not running.done():
                        now, read_at = await self.client.chain_time(), time.monotonic()
                    continue
                waiting = await self.start_due(waiting, now)
            # The pass ended: what fell due meanwhile starts now, not a pass later. The clock
            # is read again only if something may be due by now (one RPC call a pass).
            may_be_due = waiting and min(s.current_period_end for _, s in waiting) <= (
                now + time.monotonic() - read_at + FOLLOW_UP_SLACK_SECS
            )
            if may_be_due and not running.cancelled() and running.exception() is None:
                await self.start_due(waiting, await self.client.chain_time())
            await asyncio.gather(*self.started)
        except BaseException:
            for task in self.started:
                task.cancel()
            await asyncio.gather(*self.started, return_exceptions=True)
            raise

    async def start_due(
        self, waiting: list[tuple[Pubkey, Subscription]], now: int
    ) -> list[tuple[Pubkey, Subscription]]:
        """Starts those of `waiting` due at `now`; returns the rest."""
        ready = [(k, s) for k, s in waiting if s.current_period_end <= now]
        if ready:
            await self.start(ready, now)
        return [(k, s) for k, s in waiting if s.current_period_end > now]

    async def start(self, ready: list[tuple[Pubkey, Subscription]], now: int) -> None:
        keys = [str(k) for k, _ in ready]
        got = set(await self.store.crank.claim(self.instance, keys, lease_secs=self.lease))
        self.leases.held.update(got)
        self.summary.due += len(ready)
        self.summary.skipped += len(ready) - len(got)
        mine = [(k, s) for k, s in ready if str(k) in got]
        if mine:
            self.started.append(asyncio.create_task(self.work(now).run(mine)))


def _sooner(a: float | None, b: float) -> float:
    return b if a is None else min(a, b)


class _Pass:
    """One pass's collections: packed transactions, up to `concurrency` in flight."""

    def __init__(
        self,
        client: BillingClient,
        payer: Keypair,
        summary: CrankSummary,
        progress: Callable[[CrankSummary], None] | None,
        concurrency: int,
    ) -> None:
        self.client, self.payer, self.summary, self.progress = client, payer, summary, progress
        self.slots = asyncio.Semaphore(max(1, concurrency))
        self.store: Store | None = None
        self.leases: Leases | None = None
        self.instance = "crank"
        self.retry_secs, self.past_due_retry_secs = 60, 3600
        self.events_at = 0
        self.due: dict[Pubkey, Subscription] = {}

    async def run(self, due: Sequence[tuple[Pubkey, Subscription]]) -> None:
        """Every group, concurrently; the first error other than a refused transaction
        cancels the rest and is raised."""
        self.due = dict(due)
        items = [(key, await self.client.collect_instruction(sub)) for key, sub in due]
        limit = MAX_TX_BYTES - self.client.budget_bytes  # room for the compute budget
        groups = pack(items, self.payer.pubkey(), limit)
        tasks = [asyncio.create_task(self.handle(g)) for g in groups]
        if not tasks:
            return
        finished, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        # Every error is retrieved (several groups may fail at once), the first is raised.
        errors = [e for t in finished if not t.cancelled() and (e := t.exception()) is not None]
        if errors:
            raise errors[0]

    async def handle(self, group: list[tuple[Pubkey, Instruction]]) -> None:
        async with self.slots:
            try:
                await self.sent(group)
            except (ProgramError, TransactionError) as e:
                if len(group) == 1:
                    await self.failed(group[0][0], e)
                    return
                log.info("a packed collect failed (%s); retrying %d one by one", e, len(group))
                # At once, each on its own: one that is dropped or refused holds up no other.
                results = await asyncio.gather(
                    *(self.single(item) for item in group), return_exceptions=True
                )
                for result in results:
                    if isinstance(result, BaseException):  # an outage: the pass retries
                        raise result from e

    async def single(self, item: tuple[Pubkey, Instruction]) -> None:
        try:
            await self.sent([item])
        except (ProgramError, TransactionError) as e:
            await self.failed(item[0], e)

    async def sent(self, group: list[tuple[Pubkey, Instruction]]) -> None:
        receipt = await self.client.send([ix for _, ix in group], [self.payer])
        self.summary.absorb(receipt)
        if self.progress:
            self.progress(self.summary)
        if self.store is None or self.leases is None:
            return
        # What happened on chain is also found by the indexer, should recording fail here.
        await record_receipt(self.store, receipt, at=self.events_at)
        unpaid = {
            str(e.data["subscription"]): e for e in receipt.events if e.name == "RenewalFailed"
        }
        for key, _ in group:
            if str(key) in unpaid:
                reason = type(unpaid[str(key)].data.get("reason")).__name__
                await self.backoff(
                    key, f"RenewalFailed: {reason}", self.past_due_retry_secs, 86_400
                )
        paid = [str(k) for k, _ in group if str(k) not in unpaid]
        await self.store.crank.release_many(paid, self.instance)
        self.leases.done(paid)

    async def backoff(self, key: Pubkey, error: str, first: int, most: int) -> None:
        assert self.store is not None and self.leases is not None
        lease = await self.store.crank.lease(str(key))
        attempts = (lease or {}).get("attempts", 0) + 1
        delay = min(first * 2 ** (attempts - 1), most)
        await self.store.crank.release(
            str(key), error=error, retry_at=int(time.time()) + delay, owner=self.instance
        )
        self.leases.done([str(key)])

    async def failed(self, key: Pubkey, error: Exception) -> None:
        self.summary.skipped += 1
        self.summary.errors.append(f"{key}: {error}")
        if self.progress:
            self.progress(self.summary)
        refused_by = getattr(error, "failed_in", None)
        sub = self.due.get(key)
        if (
            self.store is not None
            and isinstance(error, TransactionError)
            and error.rejected
            and refused_by not in (None, str(PROGRAM_ID))
            and sub is not None
        ):
            # The token program (or the mint's transfer hook) refused the transfer: the
            # renewal failed, and webhooks say so; the crank goes on with the others.
            event = transfer_refused(
                str(key),
                str(sub.plan),
                sub.terms.amount,
                sub.current_period_end,
                str(refused_by),
                str(error),
                self.events_at or int(time.time()),
            )
            await self.store.events.add_many([event])
        if self.store is None:
            return
        if isinstance(error, TransactionError) and error.expired:
            # Nothing happened on chain (dropped copies, or a lagging node's stale
            # blockhash): signed again soon, not after the penalty for a failed transaction.
            await self.backoff(key, str(error), EXPIRED_RETRY_SECS, self.retry_secs)
            self.summary.next_run_in = _sooner(self.summary.next_run_in, EXPIRED_RETRY_SECS)
            return
        await self.backoff(key, str(error), self.retry_secs, 6 * 3600)
