"""The PostgreSQL replay store: several server processes, on several machines, share one table.

`PostgresReplayStore("postgresql://user@host/db")` has the semantics of the SQLite store: a
claim is one atomic upsert (the first claimer of a key, or of one whose claim expired, gets the
row back; every other concurrent claimer waits on the row and gets nothing), and expired rows
are purged (at most every SWEEP_SECS per store). Each store holds one connection (psycopg 3,
async, autocommit) opened on first use and reopened when the server drops it or the event loop
changes; its claims take one round trip each. The table is created if missing.
"""

from __future__ import annotations

import time

from svcpay._extras import missing_extra

try:
    from psycopg import sql

    from svcpay.protocol.pg import Connection, ExpiringTable, libpq_url
except ImportError as e:
    raise missing_extra("svcpay.protocol.replay_postgres", ["postgres"], e.name) from None

__all__ = ["PostgresReplayStore", "libpq_url"]


class PostgresReplayStore(ExpiringTable):
    def __init__(self, url: str, *, table: str = "used_proofs", connect_timeout: int = 10) -> None:
        """`table` may be schema-qualified ("billing.used_proofs")."""
        columns = "key TEXT PRIMARY KEY, expires_at BIGINT NOT NULL"
        super().__init__(url, table, columns, name="replay", connect_timeout=connect_timeout)
        t = self.t
        # Inserted, or taken over from an expired claim: a row comes back. A live claim: none.
        self._claim_sql = sql.SQL(
            "INSERT INTO {t} AS u (key, expires_at) VALUES (%s, %s) "
            "ON CONFLICT (key) DO UPDATE SET expires_at = EXCLUDED.expires_at "
            "WHERE u.expires_at < %s RETURNING 1"
        ).format(t=t)
        self._release_sql = sql.SQL("DELETE FROM {t} WHERE key = %s").format(t=t)

    # -- the ReplayStore interface -------------------------------------------------------------

    async def claim(self, key: str, expires_at: int) -> bool:
        async def op(conn: Connection) -> bool:
            now = int(time.time())
            await self._sweep(conn, now)
            cur = await conn.execute(self._claim_sql, (key, expires_at, now))
            return await cur.fetchone() is not None

        return await self._pg.run(op)

    async def release(self, key: str) -> None:
        async def op(conn: Connection) -> None:
            await conn.execute(self._release_sql, (key,))

        await self._pg.run(op)

    # -- extras --------------------------------------------------------------------------------

    async def purge_expired(self) -> int:
        """Deletes the claims that have expired by now; returns how many."""

        async def op(conn: Connection) -> int:
            self._next_sweep = 0.0
            return await self._sweep(conn, int(time.time()))

        return await self._pg.run(op)
