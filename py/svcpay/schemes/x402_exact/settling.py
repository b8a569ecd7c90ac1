"""Settling x402 payments when the facilitator is slow or away (docs/adr/0027).

- `Guard` keeps the gate from queueing without bound: at most `max_in_flight` payments
  admitted and not yet settled, and a breaker that opens after `trip_after` consecutive
  facilitator failures, for `retry_after` seconds. Past either, the gate answers 503 with
  Retry-After before the handler runs.
- A settle that may have reached the facilitator but got no answer (a read timeout, a
  dropped connection, a 5xx) after the handler ran is a *pending settlement*: the response
  is delivered (the work is done; the payment is probably landing), the replay claim is
  kept, and the payload is stored durably (`PendingSettlements`, beside the replay store;
  the record, `PendingSettlement`, is in `pending`).
- `Reconciler` settles pending payments again, with backoff, until the facilitator answers:
  `success` or `duplicate_settlement` (it landed by the first call) resolve it as settled,
  `settlement_pending` waits, any other refusal resolves it as unpaid (the claim is freed).
  Each outcome is logged and handed to the provider's `on_settlement` hook (to alert, or to
  feed its webhooks).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sqlite3
import threading
import time
from collections.abc import Awaitable, Callable
from contextlib import closing
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, Protocol

from svcpay.protocol.replay import ReplayStore, SqliteReplayStore, sqlite_connect

# Named here too, where they were before `pending` held them (gate, tests).
from svcpay.schemes.x402_exact.pending import LEASE_SECS as LEASE_SECS
from svcpay.schemes.x402_exact.pending import PendingSettlement as PendingSettlement
from svcpay.schemes.x402_exact.wire import Reason, SettleResponse

log = logging.getLogger("svcpay.gate.x402")

FIRST_RETRY_SECS = 2.0
MAX_RETRY_SECS = 300.0
GIVE_UP_SECS = 86_400.0  # a facilitator away for a day: the entry is given up, loudly

Outcome = Literal["pending", "settled", "unpaid", "abandoned"]


@dataclass(frozen=True)
class SettlementEvent:
    """What `on_settlement` hears: a payment became pending, or a pending one resolved.
    `transaction` is the settled signature when known; `reason` why it is unpaid."""

    outcome: Outcome
    key: str
    resource: str
    amount: str
    asset: str
    pay_to: str
    transaction: str = ""
    reason: str = ""


OnSettlement = Callable[[SettlementEvent], Awaitable[None]]


class PendingSettlements(Protocol):
    async def add(self, entry: PendingSettlement) -> None: ...

    async def take_due(self, now: float, limit: int) -> list[PendingSettlement]:
        """Entries due by `now`, each leased for LEASE_SECS to the caller."""
        ...

    async def postpone(self, key: str, next_at: float, attempts: int) -> None: ...

    async def remove(self, key: str) -> None: ...

    async def count(self) -> int: ...


class MemoryPendingSettlements:
    """For one process (and for tests); a restart loses what it holds, so a gate with
    a SQLite or PostgreSQL replay store keeps them there (`shared_with`)."""

    def __init__(self) -> None:
        self._entries: dict[str, PendingSettlement] = {}
        self._lock = threading.Lock()

    async def add(self, entry: PendingSettlement) -> None:
        with self._lock:
            self._entries[entry.key] = entry

    async def take_due(self, now: float, limit: int) -> list[PendingSettlement]:
        with self._lock:
            due = sorted(
                (e for e in self._entries.values() if e.next_at <= now), key=lambda e: e.next_at
            )[:limit]
            for e in due:
                self._entries[e.key] = replace(e, next_at=now + LEASE_SECS)
            return due

    async def postpone(self, key: str, next_at: float, attempts: int) -> None:
        with self._lock:
            if (e := self._entries.get(key)) is not None:
                self._entries[key] = replace(e, next_at=next_at, attempts=attempts)

    async def remove(self, key: str) -> None:
        with self._lock:
            self._entries.pop(key, None)

    async def count(self) -> int:
        with self._lock:
            return len(self._entries)


class SqlitePendingSettlements:
    """In an SQLite file (WAL), which may be the replay store's: survives a restart, and
    gate processes on one machine share it (a take is one write transaction)."""

    SCHEMA = (
        "CREATE TABLE IF NOT EXISTS x402_pending (key TEXT PRIMARY KEY, version INTEGER NOT "
        "NULL, payload TEXT NOT NULL, requirements TEXT NOT NULL, resource TEXT NOT NULL, "
        "created_at REAL NOT NULL, attempts INTEGER NOT NULL, next_at REAL NOT NULL)"
    )

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        with closing(sqlite_connect(self.path)) as db:
            db.execute(self.SCHEMA)

    def _run(self, fn: Callable[[sqlite3.Connection], Any]) -> Any:
        with closing(sqlite_connect(self.path)) as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                result = fn(db)
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
            return result

    async def add(self, entry: PendingSettlement) -> None:
        row = (
            entry.key,
            entry.version,
            json.dumps(entry.payload),
            json.dumps(entry.requirements),
            entry.resource,
            entry.created_at,
            entry.attempts,
            entry.next_at,
        )
        sql = "INSERT OR REPLACE INTO x402_pending VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
        await asyncio.to_thread(self._run, lambda db: db.execute(sql, row))

    async def take_due(self, now: float, limit: int) -> list[PendingSettlement]:
        def take(db: sqlite3.Connection) -> list[PendingSettlement]:
            rows = db.execute(
                "SELECT key, version, payload, requirements, resource, created_at, attempts, "
                "next_at FROM x402_pending WHERE next_at <= ? ORDER BY next_at LIMIT ?",
                (now, limit),
            ).fetchall()
            db.executemany(
                "UPDATE x402_pending SET next_at = ? WHERE key = ?",
                [(now + LEASE_SECS, r[0]) for r in rows],
            )
            return [
                PendingSettlement(r[0], r[1], json.loads(r[2]), json.loads(r[3]), *r[4:])
                for r in rows
            ]

        result: list[PendingSettlement] = await asyncio.to_thread(self._run, take)
        return result

    async def postpone(self, key: str, next_at: float, attempts: int) -> None:
        sql = "UPDATE x402_pending SET next_at = ?, attempts = ? WHERE key = ?"
        await asyncio.to_thread(self._run, lambda db: db.execute(sql, (next_at, attempts, key)))

    async def remove(self, key: str) -> None:
        sql = "DELETE FROM x402_pending WHERE key = ?"
        await asyncio.to_thread(self._run, lambda db: db.execute(sql, (key,)))

    async def count(self) -> int:
        def count(db: sqlite3.Connection) -> int:
            return int(db.execute("SELECT count(*) FROM x402_pending").fetchone()[0])

        result: int = await asyncio.to_thread(self._run, count)
        return result


def shared_with(replay: ReplayStore) -> PendingSettlements:
    """The pending store that lives where `replay` does: the same SQLite file, the same
    PostgreSQL database (and schema), or this process's memory."""
    if isinstance(replay, SqliteReplayStore):
        return SqlitePendingSettlements(replay.path)
    if type(replay).__module__ == "svcpay.protocol.replay_postgres":  # psycopg is installed
        from svcpay.protocol.replay_postgres import PostgresReplayStore
        from svcpay.schemes.x402_exact.pending_postgres import PostgresPendingSettlements

        if isinstance(replay, PostgresReplayStore):
            schema, dot, _ = replay.table.rpartition(".")
            return PostgresPendingSettlements(replay.url, table=f"{schema}{dot}x402_pending")
    return MemoryPendingSettlements()


@dataclass
class Guard:
    """Back-pressure on the facilitator: see the module's docstring."""

    max_in_flight: int = 256
    trip_after: int = 3
    retry_after: int = 5
    in_flight: int = 0
    failures: int = 0
    _open_until: float = field(default=0.0, repr=False)

    def refuses(self) -> str | None:
        """Why a new payment must wait (then answer 503), or None."""
        if self.in_flight >= self.max_in_flight:
            return f"{self.in_flight} payments are already waiting for the facilitator"
        if self.failures >= self.trip_after and time.monotonic() < self._open_until:
            return f"the facilitator failed {self.failures} times in a row"
        return None

    def failed(self) -> None:
        self.failures += 1
        if self.failures >= self.trip_after:
            if self.failures == self.trip_after:
                log.warning(
                    "x402 facilitator failed %d times in a row: answering 503 for %d s",
                    self.failures,
                    self.retry_after,
                )
            self._open_until = time.monotonic() + self.retry_after

    def succeeded(self) -> None:
        if self.failures >= self.trip_after:
            log.info("x402 facilitator answers again")
        self.failures = 0


class Settle(Protocol):
    async def __call__(
        self, version: int, payload: dict[str, Any], requirements: dict[str, Any]
    ) -> SettleResponse: ...


class Reconciler:
    """Settles pending payments again until the facilitator answers about each (module
    docstring). Started by the gate when it records one, or by `poke()`; `run_once()` is one
    pass (tests, a cron)."""

    def __init__(
        self,
        store: PendingSettlements,
        settle: Settle,
        replay: ReplayStore,
        *,
        on_settlement: OnSettlement | None = None,
        interval: float = FIRST_RETRY_SECS,
    ) -> None:
        self.store, self.settle, self.replay = store, settle, replay
        self.on_settlement, self.interval = on_settlement, interval
        self._task: asyncio.Task[None] | None = None

    def poke(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._loop())

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                await self.run_once()
                if await self.store.count() == 0:
                    return  # the next pending settlement starts a new task
            except Exception as e:  # the store is away: try again later
                log.warning("reconciling pending x402 settlements failed (%s); retrying", e)

    async def run_once(self, now: float | None = None) -> dict[Outcome, int]:
        """Settles every due entry again; returns how many ended each way."""
        from svcpay.schemes.x402_exact.facilitator_client import FacilitatorUnavailable

        now = time.time() if now is None else now
        counts: dict[Outcome, int] = {"pending": 0, "settled": 0, "unpaid": 0, "abandoned": 0}
        for entry in await self.store.take_due(now, 100):
            try:
                receipt = await self.settle(entry.version, entry.payload, entry.requirements)
            except FacilitatorUnavailable as e:
                outcome = await self._retry(entry, now, str(e))
            else:
                outcome = await self._answered(entry, receipt, now)
            counts[outcome] += 1
        return counts

    async def _answered(
        self, entry: PendingSettlement, receipt: SettleResponse, now: float
    ) -> Outcome:
        reason = receipt.error_reason or ""
        if receipt.success or reason == Reason.DUPLICATE_SETTLEMENT:
            await self.store.remove(entry.key)
            log.info(
                "x402 payment for %s settled after its answer was delayed (%s)",
                entry.resource,
                receipt.transaction or "landed by the first request",
            )
            await self.notify("settled", entry, transaction=receipt.transaction)
            return "settled"
        if reason == Reason.SETTLEMENT_PENDING:
            return await self._retry(entry, now, "the facilitator is still confirming it")
        await self.store.remove(entry.key)
        await self.replay.release(entry.key)
        why = receipt.error_message or reason or "refused"
        log.warning(
            "x402 payment for %s was NOT settled (%s): its response was served unpaid",
            entry.resource,
            why,
        )
        await self.notify("unpaid", entry, reason=why)
        return "unpaid"

    async def _retry(self, entry: PendingSettlement, now: float, why: str) -> Outcome:
        if now - entry.created_at > GIVE_UP_SECS:
            await self.store.remove(entry.key)
            log.error(
                "x402 payment for %s still unsettled after %d s (%s): given up; look it up "
                "with the facilitator",
                entry.resource,
                GIVE_UP_SECS,
                why,
            )
            await self.notify("abandoned", entry, reason=why)
            return "abandoned"
        attempts = entry.attempts + 1
        delay = min(FIRST_RETRY_SECS * 2**attempts, MAX_RETRY_SECS)
        await self.store.postpone(entry.key, now + delay, attempts)
        return "pending"

    async def notify(self, outcome: Outcome, entry: PendingSettlement, **more: str) -> None:
        if self.on_settlement is None:
            return
        req = entry.requirements
        event = SettlementEvent(
            outcome,
            entry.key,
            entry.resource,
            entry.amount,
            str(req.get("asset", "")),
            str(req.get("payTo", "")),
            **more,
        )
        try:
            await self.on_settlement(event)
        except Exception:  # the provider's hook must not stop reconciling
            log.exception("on_settlement hook failed")

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
