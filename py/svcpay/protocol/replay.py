"""Replay stores: a proof's settled transaction may be used once. `claim` is atomic.

In-memory for one process; SQLite (the embedded default) when processes share a machine.
Redis or PostgreSQL stores for several machines implement the same two methods.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from contextlib import closing
from pathlib import Path
from typing import Protocol


class ReplayStore(Protocol):
    async def claim(self, key: str, expires_at: int) -> bool:
        """True the first time `key` is claimed (until `expires_at`), False afterwards."""
        ...


class MemoryReplayStore:
    def __init__(self) -> None:
        self._seen: dict[str, int] = {}
        self._lock = threading.Lock()

    async def claim(self, key: str, expires_at: int) -> bool:
        now = int(time.time())
        with self._lock:
            if len(self._seen) > 10_000:
                self._seen = {k: e for k, e in self._seen.items() if e >= now}
            if key in self._seen and self._seen[key] >= now:
                return False
            self._seen[key] = expires_at
            return True


class SqliteReplayStore:
    SCHEMA = "CREATE TABLE IF NOT EXISTS used_proofs (key TEXT PRIMARY KEY, expires_at INTEGER)"

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        with closing(self._connect()) as db:
            db.execute(self.SCHEMA)

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        return db

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
