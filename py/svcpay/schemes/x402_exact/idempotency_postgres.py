"""Payment identifiers in PostgreSQL: the gate's processes on several machines share one table
(the semantics of svcpay.schemes.x402_exact.idempotency's stores).

`begin` is one upsert that takes a free, expired or abandoned id and returns a row only to the
request that took it; any other request reads the row it lost to. Expired rows are purged at
most every SWEEP_SECS per store.
"""

from __future__ import annotations

import time

from svcpay._extras import missing_extra
from svcpay.schemes.decision import RawHeaders, Reply
from svcpay.schemes.x402_exact.idempotency_entry import (
    MAX_BODY,
    PENDING_TTL,
    TTL,
    Entry,
    answer,
    decode_headers,
    encode_headers,
)

try:
    from psycopg import sql

    from svcpay.protocol.pg import Connection, ExpiringTable
except ImportError as e:
    raise missing_extra(
        "svcpay.schemes.x402_exact.idempotency_postgres", ["postgres"], e.name
    ) from None


class PostgresPaymentIds(ExpiringTable):
    def __init__(
        self,
        url: str,
        *,
        table: str = "payment_ids",
        ttl: float = TTL,
        max_body: int = MAX_BODY,
        pending_ttl: float = PENDING_TTL,
        connect_timeout: int = 10,
    ) -> None:
        """`table` may be schema-qualified ("billing.payment_ids")."""
        columns = (
            "scope TEXT NOT NULL, pid TEXT NOT NULL, fingerprint BYTEA NOT NULL, "
            "expires_at DOUBLE PRECISION NOT NULL, pending_until DOUBLE PRECISION NOT NULL, "
            "status INTEGER, headers TEXT, body BYTEA, PRIMARY KEY (scope, pid)"
        )
        super().__init__(url, table, columns, name="payment-ids", connect_timeout=connect_timeout)
        self.ttl, self.max_body, self.pending_ttl = ttl, max_body, pending_ttl
        t = self.t
        # Inserted, or taken over from an expired or abandoned request: a row comes back.
        self._take_sql = sql.SQL(
            "INSERT INTO {t} AS p (scope, pid, fingerprint, expires_at, pending_until) "
            "VALUES (%(scope)s, %(pid)s, %(fp)s, %(expires)s, %(pending)s) "
            "ON CONFLICT (scope, pid) DO UPDATE SET fingerprint = EXCLUDED.fingerprint, "
            "expires_at = EXCLUDED.expires_at, pending_until = EXCLUDED.pending_until, "
            "status = NULL, headers = NULL, body = NULL "
            "WHERE p.expires_at < %(now)s OR (p.status IS NULL AND p.pending_until < %(now)s) "
            "RETURNING 1"
        ).format(t=t)
        self._read_sql = sql.SQL(
            "SELECT fingerprint, expires_at, pending_until, status, headers, body FROM {t} "
            "WHERE scope = %s AND pid = %s"
        ).format(t=t)
        self._finish_sql = sql.SQL(
            "UPDATE {t} SET status = %s, headers = %s, body = %s "
            "WHERE scope = %s AND pid = %s AND status IS NULL"
        ).format(t=t)
        self._abandon_sql = sql.SQL(
            "DELETE FROM {t} WHERE scope = %s AND pid = %s AND status IS NULL"
        ).format(t=t)

    async def begin(self, scope: str, pid: str, fingerprint: bytes) -> Reply | None:
        async def op(conn: Connection) -> Reply | None:
            now = time.time()
            await self._sweep(conn, now)
            values = {
                "scope": scope,
                "pid": pid,
                "fp": fingerprint,
                "expires": now + self.ttl,
                "pending": now + self.pending_ttl,
                "now": now,
            }
            if await (await conn.execute(self._take_sql, values)).fetchone() is not None:
                return None
            row = await (await conn.execute(self._read_sql, (scope, pid))).fetchone()
            if row is None:  # abandoned between the two statements: its request is retried
                return answer(Entry(fingerprint, now, now), fingerprint)
            reply = None if row[3] is None else Reply(row[3], decode_headers(row[4]), row[5])
            return answer(Entry(bytes(row[0]), row[1], row[2], reply), fingerprint)

        return await self._pg.run(op)

    async def finish(
        self, scope: str, pid: str, status: int, headers: RawHeaders, body: bytes
    ) -> None:
        async def op(conn: Connection) -> None:
            if len(body) > self.max_body:
                await conn.execute(self._abandon_sql, (scope, pid))
            else:
                values = (status, encode_headers(headers), body, scope, pid)
                await conn.execute(self._finish_sql, values)

        await self._pg.run(op)

    async def abandon(self, scope: str, pid: str) -> None:
        async def op(conn: Connection) -> None:
            await conn.execute(self._abandon_sql, (scope, pid))

        await self._pg.run(op)
