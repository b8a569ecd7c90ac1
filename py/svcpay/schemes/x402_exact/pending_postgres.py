"""Pending x402 settlements in PostgreSQL: gate processes on several machines share one table
(the semantics of svcpay.schemes.x402_exact.settling's stores). A take is one UPDATE ...
RETURNING over rows locked with SKIP LOCKED, so two reconcilers never take one entry.
"""

from __future__ import annotations

import json

from svcpay._extras import missing_extra
from svcpay.schemes.x402_exact.pending import LEASE_SECS, PendingSettlement

try:
    from psycopg import sql
    from psycopg.types.json import Jsonb

    from svcpay.protocol.pg import Connection, PgConnection, libpq_url
except ImportError as e:
    raise missing_extra(
        "svcpay.schemes.x402_exact.pending_postgres", ["postgres"], e.name
    ) from None


class PostgresPendingSettlements:
    def __init__(self, url: str, *, table: str = "x402_pending", connect_timeout: int = 10) -> None:
        """`table` may be schema-qualified ("billing.x402_pending")."""
        self.url, self.table = libpq_url(url), table
        t = sql.Identifier(*table.split("."))
        schema = [
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {t} (key TEXT PRIMARY KEY, version INTEGER NOT NULL, "
                "payload JSONB NOT NULL, requirements JSONB NOT NULL, resource TEXT NOT NULL, "
                "created_at DOUBLE PRECISION NOT NULL, attempts INTEGER NOT NULL, "
                "next_at DOUBLE PRECISION NOT NULL)"
            ).format(t=t)
        ]
        self._pg = PgConnection(
            self.url,
            schema,
            lock_name=f"svcpay.x402-pending:{table}",
            application_name="svcpay-x402-pending",
            connect_timeout=connect_timeout,
        )
        self._add = sql.SQL(
            "INSERT INTO {t} VALUES (%s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT (key) DO "
            "UPDATE SET next_at = EXCLUDED.next_at"
        ).format(t=t)
        self._take = sql.SQL(
            "UPDATE {t} SET next_at = %(lease)s WHERE key IN (SELECT key FROM {t} WHERE "
            "next_at <= %(now)s ORDER BY next_at LIMIT %(limit)s FOR UPDATE SKIP LOCKED) "
            "RETURNING key, version, payload, requirements, resource, created_at, attempts, "
            "next_at"
        ).format(t=t)
        self._postpone = sql.SQL(
            "UPDATE {t} SET next_at = %s, attempts = %s WHERE key = %s"
        ).format(t=t)
        self._remove = sql.SQL("DELETE FROM {t} WHERE key = %s").format(t=t)
        self._count = sql.SQL("SELECT count(*) FROM {t}").format(t=t)

    async def add(self, entry: PendingSettlement) -> None:
        row = (
            entry.key,
            entry.version,
            Jsonb(entry.payload),
            Jsonb(entry.requirements),
            entry.resource,
            entry.created_at,
            entry.attempts,
            entry.next_at,
        )

        async def op(conn: Connection) -> None:
            await conn.execute(self._add, row)

        await self._pg.run(op)

    async def take_due(self, now: float, limit: int) -> list[PendingSettlement]:
        async def op(conn: Connection) -> list[PendingSettlement]:
            values = {"lease": now + LEASE_SECS, "now": now, "limit": limit}
            rows = await (await conn.execute(self._take, values)).fetchall()
            return [
                PendingSettlement(
                    r[0],
                    r[1],
                    r[2] if isinstance(r[2], dict) else json.loads(r[2]),
                    r[3] if isinstance(r[3], dict) else json.loads(r[3]),
                    r[4],
                    r[5],
                    r[6],
                    now,
                )
                for r in rows
            ]

        return await self._pg.run(op)

    async def postpone(self, key: str, next_at: float, attempts: int) -> None:
        async def op(conn: Connection) -> None:
            await conn.execute(self._postpone, (next_at, attempts, key))

        await self._pg.run(op)

    async def remove(self, key: str) -> None:
        async def op(conn: Connection) -> None:
            await conn.execute(self._remove, (key,))

        await self._pg.run(op)

    async def count(self) -> int:
        async def op(conn: Connection) -> int:
            row = await (await conn.execute(self._count)).fetchone()
            return int(row[0]) if row else 0

        return await self._pg.run(op)

    async def aclose(self) -> None:
        await self._pg.aclose()
