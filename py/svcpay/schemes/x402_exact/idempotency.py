"""x402's `payment-identifier` on the gate (specs/extensions/payment_identifier.md): the same id
with the same payload gets the response it got the first time, without paying again; the
same id with another payload gets 409.

An id is kept for `ttl` seconds, with the response up to `max_body` bytes (a larger one is
served but not kept, so its resend is treated as a new payment: the facilitator refuses the
settled transaction). While its first request is being served, a resend gets 409 with
Retry-After; an id whose first request has not finished within `pending_ttl` seconds (its
process died) may be taken again by the same payload.

Three stores, as for replay claims (svcpay.protocol.replay): in memory for one process
(bounded to `max_entries` ids), SQLite for processes on one machine, PostgreSQL
(idempotency_postgres) for processes on several. The gate shares the store with its replay
store by default (`shared_with`), so a resend that reaches another worker is recognised.
What an id's entry is and answers, the same in every store, is `idempotency_entry`.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sqlite3
import threading
import time
from collections import OrderedDict
from contextlib import closing
from pathlib import Path
from typing import Any, Protocol

from svcpay.protocol.replay import ReplayStore, SqliteReplayStore, sqlite_connect
from svcpay.schemes.decision import RawHeaders, Reply

# Named here too, where they were before `idempotency_entry` held them.
from svcpay.schemes.x402_exact.idempotency_entry import MAX_BODY as MAX_BODY
from svcpay.schemes.x402_exact.idempotency_entry import PENDING_TTL as PENDING_TTL
from svcpay.schemes.x402_exact.idempotency_entry import TTL as TTL
from svcpay.schemes.x402_exact.idempotency_entry import Entry as Entry
from svcpay.schemes.x402_exact.idempotency_entry import answer as answer
from svcpay.schemes.x402_exact.idempotency_entry import decode_headers as decode_headers
from svcpay.schemes.x402_exact.idempotency_entry import encode_headers as encode_headers


class PaymentIdStore(Protocol):
    async def begin(self, scope: str, pid: str, fingerprint: bytes) -> Reply | None:
        """None: a new id, now held for this request (`finish` or `abandon` it). Else the
        answer: the stored response, or 409 (another payload; or the first request with
        this id is still being served)."""
        ...

    async def finish(
        self, scope: str, pid: str, status: int, headers: RawHeaders, body: bytes
    ) -> None:
        """Stores the response sent for the paid request (as it was sent)."""
        ...

    async def abandon(self, scope: str, pid: str) -> None:
        """Forgets an id whose request was not paid for (it may be tried again)."""
        ...


def fingerprint(payload: dict[str, Any]) -> bytes:
    """The exact payload (canonical JSON): a lookup happens before verification, so only the
    very same signed payload may see the stored response."""
    canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).digest()


def shared_with(replay: ReplayStore) -> PaymentIdStore:
    """The payment-id store that lives where `replay` does: the same SQLite file, the same
    PostgreSQL database (and schema), or this process's memory."""
    if isinstance(replay, SqliteReplayStore):
        return SqlitePaymentIds(replay.path)
    if type(replay).__module__ == "svcpay.protocol.replay_postgres":  # psycopg is installed
        from svcpay.protocol.replay_postgres import PostgresReplayStore
        from svcpay.schemes.x402_exact.idempotency_postgres import PostgresPaymentIds

        if isinstance(replay, PostgresReplayStore):
            schema, dot, _ = replay.table.rpartition(".")
            return PostgresPaymentIds(replay.url, table=f"{schema}{dot}payment_ids")
    return MemoryPaymentIds()


class MemoryPaymentIds:
    """For one process: at most `max_entries` ids (the oldest go first)."""

    def __init__(
        self,
        max_entries: int = 10_000,
        ttl: float = TTL,
        max_body: int = MAX_BODY,
        pending_ttl: float = PENDING_TTL,
    ) -> None:
        self.max_entries, self.ttl, self.max_body = max_entries, ttl, max_body
        self.pending_ttl = pending_ttl
        self._entries: OrderedDict[tuple[str, str], Entry] = OrderedDict()
        self._lock = threading.Lock()  # gates on different threads (and loops) may share it

    async def begin(self, scope: str, pid: str, fingerprint: bytes) -> Reply | None:
        now = time.time()
        with self._lock:
            entry = self._entries.get((scope, pid))
            if entry is not None and entry.live(now):
                return answer(entry, fingerprint)
            self._entries[(scope, pid)] = Entry(fingerprint, now + self.ttl, now + self.pending_ttl)
            self._entries.move_to_end((scope, pid))
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)
            return None

    async def finish(
        self, scope: str, pid: str, status: int, headers: RawHeaders, body: bytes
    ) -> None:
        with self._lock:
            entry = self._entries.get((scope, pid))
            if entry is None or entry.reply is not None:
                return
            if len(body) > self.max_body:
                del self._entries[(scope, pid)]
                return
            entry.reply = Reply(status, list(headers), body)

    async def abandon(self, scope: str, pid: str) -> None:
        with self._lock:
            entry = self._entries.get((scope, pid))
            if entry is not None and entry.reply is None:
                del self._entries[(scope, pid)]


class SqlitePaymentIds:
    """For processes on one machine: a table in an SQLite file (WAL), which may be the replay
    store's. A `begin` is one write transaction, so two processes cannot both take an id."""

    SWEEP_SECS = 30
    SCHEMA = (
        "CREATE TABLE IF NOT EXISTS payment_ids (scope TEXT NOT NULL, pid TEXT NOT NULL, "
        "fingerprint BLOB NOT NULL, expires_at REAL NOT NULL, pending_until REAL NOT NULL, "
        "status INTEGER, headers TEXT, body BLOB, PRIMARY KEY (scope, pid))"
    )

    def __init__(
        self,
        path: str | Path,
        ttl: float = TTL,
        max_body: int = MAX_BODY,
        pending_ttl: float = PENDING_TTL,
    ) -> None:
        self.path = str(path)
        self.ttl, self.max_body, self.pending_ttl = ttl, max_body, pending_ttl
        self._next_sweep = 0.0
        with closing(self._connect()) as db:
            db.execute(self.SCHEMA)

    def _connect(self) -> sqlite3.Connection:
        return sqlite_connect(self.path)

    def _begin(self, scope: str, pid: str, fingerprint: bytes) -> Reply | None:
        now = time.time()
        with closing(self._connect()) as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                result = self._take(db, now, scope, pid, fingerprint)
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
            return result

    def _take(
        self, db: sqlite3.Connection, now: float, scope: str, pid: str, fingerprint: bytes
    ) -> Reply | None:
        if now >= self._next_sweep:
            db.execute("DELETE FROM payment_ids WHERE expires_at < ?", (now,))
            self._next_sweep = now + self.SWEEP_SECS
        row = db.execute(
            "SELECT fingerprint, expires_at, pending_until, status, headers, body "
            "FROM payment_ids WHERE scope = ? AND pid = ?",
            (scope, pid),
        ).fetchone()
        if row is not None:
            reply = None if row[3] is None else Reply(row[3], decode_headers(row[4]), row[5])
            entry = Entry(row[0], row[1], row[2], reply)
            if entry.live(now):
                return answer(entry, fingerprint)
        db.execute(
            "INSERT OR REPLACE INTO payment_ids (scope, pid, fingerprint, expires_at, "
            "pending_until) VALUES (?, ?, ?, ?, ?)",
            (scope, pid, fingerprint, now + self.ttl, now + self.pending_ttl),
        )
        return None

    async def begin(self, scope: str, pid: str, fingerprint: bytes) -> Reply | None:
        return await asyncio.to_thread(self._begin, scope, pid, fingerprint)

    def _finish(self, scope: str, pid: str, status: int, headers: RawHeaders, body: bytes) -> None:
        with closing(self._connect()) as db:
            if len(body) > self.max_body:
                db.execute(
                    "DELETE FROM payment_ids WHERE scope = ? AND pid = ? AND status IS NULL",
                    (scope, pid),
                )
                return
            db.execute(
                "UPDATE payment_ids SET status = ?, headers = ?, body = ? "
                "WHERE scope = ? AND pid = ? AND status IS NULL",
                (status, encode_headers(headers), body, scope, pid),
            )

    async def finish(
        self, scope: str, pid: str, status: int, headers: RawHeaders, body: bytes
    ) -> None:
        await asyncio.to_thread(self._finish, scope, pid, status, headers, body)

    def _abandon(self, scope: str, pid: str) -> None:
        with closing(self._connect()) as db:
            db.execute(
                "DELETE FROM payment_ids WHERE scope = ? AND pid = ? AND status IS NULL",
                (scope, pid),
            )

    async def abandon(self, scope: str, pid: str) -> None:
        await asyncio.to_thread(self._abandon, scope, pid)
