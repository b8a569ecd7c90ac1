"""The PostgreSQL replay store: several server processes, on several machines, share one table.

`PostgresReplayStore("postgresql://user@host/db")` has the semantics of the SQLite store: a
claim is one atomic upsert (the first claimer of a key, or of one whose claim expired, gets the
row back; every other concurrent claimer waits on the row and gets nothing), and expired rows
are purged (at most every SWEEP_SECS per store). Each store holds one connection (psycopg 3,
async, autocommit) opened on first use and reopened when the server drops it or the event loop
changes; its claims take one round trip each. The table is created if missing.
"""

from __future__ import annotations

import asyncio
import time
import zlib
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import TypeVar

from svcpay._extras import missing_extra

try:
    import psycopg
    from psycopg import sql
    from psycopg.rows import TupleRow
except ImportError as e:
    raise missing_extra("svcpay.protocol.replay_postgres", ["postgres"], e.name) from None

Connection = psycopg.AsyncConnection[TupleRow]
T = TypeVar("T")


def libpq_url(url: str) -> str:
    """`url` without an SQLAlchemy driver suffix (postgresql+psycopg:// -> postgresql://)."""
    scheme, sep, rest = url.partition("://")
    if sep and scheme.split("+")[0] in ("postgresql", "postgres"):
        return f"postgresql://{rest}"
    return url


class PostgresReplayStore:
    SWEEP_SECS = 30  # expired claims are deleted at most this often (one indexed DELETE)

    def __init__(self, url: str, *, table: str = "used_proofs", connect_timeout: int = 10) -> None:
        """`table` may be schema-qualified ("billing.used_proofs")."""
        self.url = libpq_url(url)
        self.table = table
        self.connect_timeout = connect_timeout
        parts = table.split(".")
        t = sql.Identifier(*parts)
        self._schema = [
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {t} (key TEXT PRIMARY KEY, expires_at BIGINT NOT NULL)"
            ).format(t=t),
            sql.SQL("CREATE INDEX IF NOT EXISTS {i} ON {t} (expires_at)").format(
                i=sql.Identifier(f"{parts[-1]}_expires_at"), t=t
            ),
        ]
        # Inserted, or taken over from an expired claim: a row comes back. A live claim: none.
        self._claim_sql = sql.SQL(
            "INSERT INTO {t} AS u (key, expires_at) VALUES (%s, %s) "
            "ON CONFLICT (key) DO UPDATE SET expires_at = EXCLUDED.expires_at "
            "WHERE u.expires_at < %s RETURNING 1"
        ).format(t=t)
        self._release_sql = sql.SQL("DELETE FROM {t} WHERE key = %s").format(t=t)
        self._purge_sql = sql.SQL("DELETE FROM {t} WHERE expires_at < %s").format(t=t)
        self._schema_lock_id = zlib.crc32(f"svcpay.replay:{table}".encode())
        self._conn: Connection | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock: asyncio.Lock | None = None
        self._next_sweep = 0

    # -- the ReplayStore interface -------------------------------------------------------------

    async def claim(self, key: str, expires_at: int) -> bool:
        async def op(conn: Connection) -> bool:
            now = int(time.time())
            if now >= self._next_sweep:
                await conn.execute(self._purge_sql, (now,))
                self._next_sweep = now + self.SWEEP_SECS
            cur = await conn.execute(self._claim_sql, (key, expires_at, now))
            return await cur.fetchone() is not None

        return await self._run(op)

    async def release(self, key: str) -> None:
        async def op(conn: Connection) -> None:
            await conn.execute(self._release_sql, (key,))

        await self._run(op)

    # -- extras --------------------------------------------------------------------------------

    async def purge_expired(self) -> int:
        """Deletes the claims that have expired by now; returns how many."""

        async def op(conn: Connection) -> int:
            now = int(time.time())
            cur = await conn.execute(self._purge_sql, (now,))
            self._next_sweep = now + self.SWEEP_SECS
            return max(cur.rowcount, 0)

        return await self._run(op)

    async def aclose(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None and not conn.closed:
            if self._loop is asyncio.get_running_loop():
                await conn.close()
            else:
                conn.pgconn.finish()

    async def __aenter__(self) -> PostgresReplayStore:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    # -- the connection ------------------------------------------------------------------------

    async def _run(self, op: Callable[[Connection], Awaitable[T]]) -> T:
        """Runs `op` on the store's connection, one task at a time. A connection found dead
        (server restart, idle timeout) is replaced and `op` runs once more. (Should it die
        mid-claim after the claim committed, the second run finds the key taken and refuses
        it: a replay is never let through.)"""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # a connection and a lock serve one event loop
            if self._conn is not None and not self._conn.closed:
                self._conn.pgconn.finish()
            self._conn, self._loop, self._lock = None, loop, asyncio.Lock()
        assert self._lock is not None
        async with self._lock:
            for retry in (False, True):
                conn = await self._connection()
                try:
                    return await op(conn)
                except psycopg.OperationalError:
                    if retry or not conn.broken:
                        raise
            raise AssertionError("unreachable")

    async def _connection(self) -> Connection:
        if self._conn is None or self._conn.closed:
            conn = await psycopg.AsyncConnection.connect(
                self.url,
                autocommit=True,
                connect_timeout=self.connect_timeout,
                application_name="svcpay-replay",
            )
            try:
                # Concurrent CREATE TABLE IF NOT EXISTS can still collide: serialise them.
                async with conn.transaction():
                    await conn.execute("SELECT pg_advisory_xact_lock(%s)", (self._schema_lock_id,))
                    for statement in self._schema:
                        await conn.execute(statement)
            except BaseException:
                await conn.close()
                raise
            self._conn = conn
        return self._conn
