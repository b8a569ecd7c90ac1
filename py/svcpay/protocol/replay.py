"""Replay stores: a proof's settled transaction may be used once. `claim` is atomic.

In-memory for one process; SQLite (the embedded default) when processes share a machine;
PostgreSQL (replay_postgres.PostgresReplayStore) when they share a database server. A Redis
store would implement the same two methods.
"""

from __future__ import annotations

import asyncio
import random
import sqlite3
import threading
import time
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any, Protocol

LOCK_WAIT = 30.0  # seconds a store waits for another process's lock on its SQLite file


def sqlite_connect(path: str) -> sqlite3.Connection:
    """A connection to a store's SQLite file as the gate's stores share it: autocommit, WAL
    (readers and one writer at a time across processes), waiting up to 30 s for a lock."""
    db = sqlite3.connect(path, timeout=LOCK_WAIT, isolation_level=None)
    try:
        use_wal(db.execute, LOCK_WAIT)
    except BaseException:
        db.close()
        raise
    return db


def use_wal(execute: Callable[[str], Any], wait: float) -> None:
    """Puts a SQLite file in WAL mode, which it then keeps. Switching needs the file to
    itself, and SQLite answers "database is locked" at once, without its busy handler, when
    another process is opening or switching it too (workers started together on a new
    file): so this retries, with jitter, for up to `wait` seconds."""
    deadline = time.monotonic() + wait
    delay = 0.005
    while True:
        try:
            execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) and "busy" not in str(e):
                raise
            if time.monotonic() + delay > deadline:
                raise
        time.sleep(delay * random.uniform(0.5, 1.5))
        delay = min(delay * 2, 0.25)


class ReplayStore(Protocol):
    async def claim(self, key: str, expires_at: int) -> bool:
        """True the first time `key` is claimed (until `expires_at`), False afterwards."""
        ...

    async def release(self, key: str) -> None:
        """Forgets a claim (the request it paid for failed, so the proof may be reused)."""
        ...


class MemoryReplayStore:
    SWEEP_SECS = 30  # expired claims are dropped at most this often (O(n) each time)

    def __init__(self) -> None:
        self._seen: dict[str, int] = {}
        self._lock = threading.Lock()
        self._next_sweep = 0

    async def claim(self, key: str, expires_at: int) -> bool:
        now = int(time.time())
        with self._lock:
            if now >= self._next_sweep:
                self._seen = {k: e for k, e in self._seen.items() if e >= now}
                self._next_sweep = now + self.SWEEP_SECS
            if key in self._seen and self._seen[key] >= now:
                return False
            self._seen[key] = expires_at
            return True

    async def release(self, key: str) -> None:
        with self._lock:
            self._seen.pop(key, None)


class SqliteReplayStore:
    SCHEMA = "CREATE TABLE IF NOT EXISTS used_proofs (key TEXT PRIMARY KEY, expires_at INTEGER)"

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        with closing(self._connect()) as db:
            db.execute(self.SCHEMA)

    def _connect(self) -> sqlite3.Connection:
        return sqlite_connect(self.path)

    def _claim(self, key: str, expires_at: int) -> bool:
        with closing(self._connect()) as db:
            db.execute("DELETE FROM used_proofs WHERE expires_at < ?", (int(time.time()),))
            cur = db.execute(
                "INSERT OR IGNORE INTO used_proofs (key, expires_at) VALUES (?, ?)",
                (key, expires_at),
            )
            return cur.rowcount == 1

    async def claim(self, key: str, expires_at: int) -> bool:
        return await asyncio.to_thread(self._claim, key, expires_at)

    def _release(self, key: str) -> None:
        with closing(self._connect()) as db:
            db.execute("DELETE FROM used_proofs WHERE key = ?", (key,))

    async def release(self, key: str) -> None:
        await asyncio.to_thread(self._release, key)
