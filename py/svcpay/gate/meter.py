"""A usage meter that batches metered deductions, loses nothing, and never charges twice.

Each use is written to SQLite before `record` returns. `flush` (on size, every `interval`
seconds while running, and on `close`) sums each subscription's pending usage into one
`deduct_allowance` transaction. The batch's transaction signature is stored before the
transaction is sent, so after a crash `recover` asks the chain: a batch that landed is
deleted without resending; one that failed, or can no longer land (older than a blockhash
lives), goes back to pending. The gate subtracts `pending()` from the on-chain allowance,
so batching never lets usage pass the cap.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
from contextlib import closing
from pathlib import Path
from typing import Any

from solders.keypair import Keypair

from svcpay.program.client import BLOCKHASH_LIFETIME_SECS, BillingClient
from svcpay.program.errors import ProgramError
from svcpay.protocol.replay import sqlite_connect

log = logging.getLogger("svcpay.meter")
SCHEMA = """
CREATE TABLE IF NOT EXISTS usage (id INTEGER PRIMARY KEY, subscription TEXT NOT NULL,
    amount INTEGER NOT NULL, batch INTEGER);
CREATE TABLE IF NOT EXISTS batches (id INTEGER PRIMARY KEY, subscription TEXT NOT NULL,
    total INTEGER NOT NULL, signature TEXT, created_at REAL NOT NULL);
"""


class BatchingMeter:
    def __init__(
        self,
        client: BillingClient,
        authority: Keypair,
        path: str | Path,
        *,
        max_batch: int = 50,
        interval: float = 5.0,
    ) -> None:
        self.client, self.authority, self.path = client, authority, str(path)
        self.max_batch, self.interval = max_batch, interval
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        with closing(self._db()) as db:
            db.executescript(SCHEMA)
        # In memory (one meter per database file), so the gate's per-request check and
        # `record` do no extra reads: usage not yet settled per subscription, and uses not
        # yet in a batch.
        self._pending: dict[str, int] = {
            str(sub): int(total)
            for sub, total in self._query(
                "SELECT subscription, SUM(amount) FROM usage GROUP BY subscription"
            )
        }
        self._unbatched = int(self._query("SELECT COUNT(*) FROM usage WHERE batch IS NULL")[0][0])

    def _db(self) -> sqlite3.Connection:
        return sqlite_connect(self.path)

    def _query(self, sql: str, args: tuple[Any, ...] = ()) -> list[Any]:
        with closing(self._db()) as db:
            return db.execute(sql, args).fetchall()

    async def record(self, subscription_id: str, amount: int) -> None:
        """Durably records a use; flushes when `max_batch` uses are pending."""
        # Counted as pending before the first await: the gate calls this right after the
        # response went out, and the client's next request must already see this use.
        self._pending[subscription_id] = self._pending.get(subscription_id, 0) + amount
        try:
            await asyncio.to_thread(
                self._query,
                "INSERT INTO usage (subscription, amount) VALUES (?, ?)",
                (subscription_id, amount),
            )
        except BaseException:
            self._pending[subscription_id] -= amount
            raise
        self._unbatched += 1
        if self._unbatched >= self.max_batch:
            await self.flush()

    def pending(self, subscription_id: str) -> int:
        """Usage recorded but not yet confirmed on chain, base units."""
        return self._pending.get(subscription_id, 0)

    async def recover(self) -> None:
        """Settles batches a previous run sent (or tried to) before it stopped."""
        for batch, signature, created in self._query(
            "SELECT id, signature, created_at FROM batches"
        ):
            landed = await self.client.landed(str(signature)) if signature else None
            if landed:
                self._finish(int(batch))
            elif landed is False or time.time() - float(created) > BLOCKHASH_LIFETIME_SECS:
                self._release(int(batch))

    async def flush(self) -> None:
        """Deducts all pending usage, one transaction per subscription."""
        async with self._lock:
            await self.recover()
            for (sub,) in self._query(
                "SELECT DISTINCT subscription FROM usage WHERE batch IS NULL"
            ):
                await self._flush_one(str(sub))
            rows = self._query("SELECT COUNT(*) FROM usage WHERE batch IS NULL")
            self._unbatched = int(rows[0][0])

    async def _flush_one(self, subscription_id: str) -> None:
        with closing(self._db()) as db:
            db.execute("BEGIN IMMEDIATE")
            (total,) = db.execute(
                "SELECT SUM(amount) FROM usage WHERE subscription = ? AND batch IS NULL",
                (subscription_id,),
            ).fetchone()
            cur = db.execute(
                "INSERT INTO batches (subscription, total, created_at) VALUES (?, ?, ?)",
                (subscription_id, total, time.time()),
            )
            batch = cur.lastrowid
            db.execute(
                "UPDATE usage SET batch = ? WHERE subscription = ? AND batch IS NULL",
                (batch, subscription_id),
            )
            db.execute("COMMIT")
        assert batch is not None
        try:
            tx = await self.client.deduct_transaction(subscription_id, int(total), self.authority)
        except Exception:
            self._release(batch)
            raise
        self._query("UPDATE batches SET signature = ? WHERE id = ?", (str(tx.signatures[0]), batch))
        try:
            await self.client.send_signed(tx)
        except ProgramError as e:  # refused on chain (e.g. the cap was lowered): keep the usage
            log.error("deducting %s from %s was refused: %s", total, subscription_id, e)
            self._release(batch)
            return
        self._finish(batch)

    def _finish(self, batch: int) -> None:
        with closing(self._db()) as db:
            db.execute("BEGIN IMMEDIATE")
            row = db.execute(
                "SELECT subscription, total FROM batches WHERE id = ?", (batch,)
            ).fetchone()
            if row is not None:
                sub, total = str(row[0]), int(row[1])
                self._pending[sub] = self._pending.get(sub, 0) - total
            db.execute("DELETE FROM usage WHERE batch = ?", (batch,))
            db.execute("DELETE FROM batches WHERE id = ?", (batch,))
            db.execute("COMMIT")

    def _release(self, batch: int) -> None:
        with closing(self._db()) as db:
            db.execute("BEGIN IMMEDIATE")
            db.execute("UPDATE usage SET batch = NULL WHERE batch = ?", (batch,))
            db.execute("DELETE FROM batches WHERE id = ?", (batch,))
            db.execute("COMMIT")

    async def start(self) -> None:
        """Recovers, then flushes every `interval` seconds until `close`."""
        await self.recover()

        async def loop() -> None:
            while True:
                await asyncio.sleep(self.interval)
                try:
                    await self.flush()
                except Exception:
                    log.exception("metered usage flush failed; retrying next interval")

        self._task = asyncio.create_task(loop())

    async def close(self) -> None:
        """Stops the timer and flushes what is pending."""
        if self._task is not None:
            self._task.cancel()
            self._task = None
        await self.flush()
