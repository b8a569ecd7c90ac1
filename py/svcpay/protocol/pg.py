"""One psycopg connection shared by a store's calls: the gate's PostgreSQL stores (replay
claims, payment identifiers) each hold one.

The connection (async, autocommit) is opened on first use, creates the store's tables under an
advisory lock, serves one task at a time, and is reopened when the server drops it or when the
store is used from another event loop (a store made outside any loop may be used from
several `anyio.run`s in turn).
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Awaitable, Callable, Sequence
from types import TracebackType
from typing import Self, TypeVar

from svcpay._extras import missing_extra

try:
    import psycopg
    from psycopg import sql
    from psycopg.rows import TupleRow
except ImportError as e:
    raise missing_extra("svcpay.protocol.pg", ["postgres"], e.name) from None

Connection = psycopg.AsyncConnection[TupleRow]
T = TypeVar("T")


def libpq_url(url: str) -> str:
    """`url` without an SQLAlchemy driver suffix (postgresql+psycopg:// -> postgresql://)."""
    scheme, sep, rest = url.partition("://")
    if sep and scheme.split("+")[0] in ("postgresql", "postgres"):
        return f"postgresql://{rest}"
    return url


class PgConnection:
    def __init__(
        self,
        url: str,
        schema: Sequence[sql.Composed],
        *,
        lock_name: str,
        application_name: str,
        connect_timeout: int = 10,
    ) -> None:
        """`schema`: the statements that create the store's tables if missing; `lock_name`
        names the advisory lock that serialises them (concurrent CREATE TABLE IF NOT EXISTS
        can still collide)."""
        self.url = libpq_url(url)
        self.schema = list(schema)
        self.application_name = application_name
        self.connect_timeout = connect_timeout
        self._schema_lock_id = zlib.crc32(lock_name.encode())
        self.conn: Connection | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock: asyncio.Lock | None = None

    async def run(self, op: Callable[[Connection], Awaitable[T]]) -> T:
        """Runs `op` on the connection, one task at a time. A connection found dead (server
        restart, idle timeout) is replaced and `op` runs once more, so `op` must be safe to
        repeat after a commit it did not hear about."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # a connection and a lock serve one event loop
            if self.conn is not None and not self.conn.closed:
                self.conn.pgconn.finish()
            self.conn, self._loop, self._lock = None, loop, asyncio.Lock()
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

    async def aclose(self) -> None:
        conn, self.conn = self.conn, None
        if conn is not None and not conn.closed:
            if self._loop is asyncio.get_running_loop():
                await conn.close()
            else:
                conn.pgconn.finish()

    async def _connection(self) -> Connection:
        if self.conn is None or self.conn.closed:
            conn = await psycopg.AsyncConnection.connect(
                self.url,
                autocommit=True,
                connect_timeout=self.connect_timeout,
                application_name=self.application_name,
            )
            try:
                async with conn.transaction():
                    await conn.execute("SELECT pg_advisory_xact_lock(%s)", (self._schema_lock_id,))
                    for statement in self.schema:
                        await conn.execute(statement)
            except BaseException:
                await conn.close()
                raise
            self.conn = conn
        return self.conn


class ExpiringTable:
    """What the gate's PostgreSQL stores share: one table whose rows carry `expires_at`
    (indexed), purged at most every SWEEP_SECS per store, behind one `PgConnection`."""

    SWEEP_SECS = 30

    def __init__(
        self, url: str, table: str, columns: str, *, name: str, connect_timeout: int
    ) -> None:
        """`table` may be schema-qualified ("billing.used_proofs"); `columns` is its
        definition, `expires_at` among them; `name` names the store to the server."""
        self.url, self.table = libpq_url(url), table
        parts = table.split(".")
        self.t = sql.Identifier(*parts)
        schema = [
            sql.SQL("CREATE TABLE IF NOT EXISTS {t} (" + columns + ")").format(t=self.t),
            sql.SQL("CREATE INDEX IF NOT EXISTS {i} ON {t} (expires_at)").format(
                i=sql.Identifier(f"{parts[-1]}_expires_at"), t=self.t
            ),
        ]
        self._purge_sql = sql.SQL("DELETE FROM {t} WHERE expires_at < %s").format(t=self.t)
        self._pg = PgConnection(
            self.url,
            schema,
            lock_name=f"svcpay.{name}:{table}",
            application_name=f"svcpay-{name}",
            connect_timeout=connect_timeout,
        )
        self._next_sweep = 0.0

    async def _sweep(self, conn: Connection, now: float) -> int:
        """Purges expired rows if the last purge is SWEEP_SECS old; how many it deleted."""
        if now < self._next_sweep:
            return 0
        cur = await conn.execute(self._purge_sql, (now,))
        self._next_sweep = now + self.SWEEP_SECS
        return max(cur.rowcount, 0)

    async def aclose(self) -> None:
        await self._pg.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
