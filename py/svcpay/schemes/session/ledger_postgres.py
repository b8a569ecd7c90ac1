"""The voucher ledger on PostgreSQL: gate workers on several machines share one table, with
the SQLite ledger's semantics and statements (schemes/session/ledger.py)."""

from __future__ import annotations

from typing import Any

from svcpay._extras import missing_extra
from svcpay.protocol.voucher import SignedVoucher
from svcpay.schemes.session.ledger import (
    ADVANCE,
    COLUMNS,
    COMMIT,
    HIGHEST,
    MAX_CUMULATIVE,
    RELEASE,
    REPORTED,
    UNREPORTED,
    advance_args,
    commit_args,
    release_args,
    served_voucher,
)

try:
    from psycopg import sql

    from svcpay.protocol.pg import Connection, PgConnection, libpq_url
except ImportError as e:
    raise missing_extra("svcpay.schemes.session.ledger_postgres", ["postgres"], e.name) from None


class PostgresVoucherLedger:
    def __init__(
        self, url: str, *, table: str = "session_vouchers", connect_timeout: int = 10
    ) -> None:
        """`table` may be schema-qualified ("billing.session_vouchers")."""
        t = sql.Identifier(*table.split("."))

        def statement(text: str) -> sql.Composed:
            return sql.SQL(text).format(t=t, p=sql.SQL("%s"))

        self._advance, self._highest = statement(ADVANCE), statement(HIGHEST)
        self._commit, self._release = statement(COMMIT), statement(RELEASE)
        self._unreported, self._reported = statement(UNREPORTED), statement(REPORTED)
        self._ours = statement(
            "SELECT prev_cumulative FROM {t} WHERE channel = {p} AND cumulative = {p} "
            "AND signature = {p}"
        )
        self._pg = PgConnection(
            libpq_url(url),
            [sql.SQL("CREATE TABLE IF NOT EXISTS {t} (" + COLUMNS + ")").format(t=t)],
            lock_name=f"svcpay.vouchers:{table}",
            application_name="svcpay-vouchers",
            connect_timeout=connect_timeout,
        )

    async def _rows(self, statement: sql.Composed, args: tuple[object, ...]) -> list[Any]:
        async def op(conn: Connection) -> list[Any]:
            cur = await conn.execute(statement, args)
            return await cur.fetchall() if cur.description else []

        return await self._pg.run(op)

    async def advance(self, voucher: SignedVoucher, *, floor: int, step: int) -> int | None:
        if voucher.cumulative > MAX_CUMULATIVE:
            return None
        attempts = 0

        async def op(conn: Connection) -> int | None:
            nonlocal attempts
            attempts += 1
            row = await (
                await conn.execute(self._advance, advance_args(voucher, floor, step))
            ).fetchone()
            if row is None and attempts > 1:
                # The first attempt's connection died: it may have committed unheard. Only
                # then does finding this very voucher on top prove that it was taken here.
                found = await conn.execute(self._ours, release_args(voucher))
                row = await found.fetchone()
            return None if row is None else int(row[0])

        return await self._pg.run(op)

    async def highest(self, channel: str) -> int | None:
        rows = await self._rows(self._highest, (channel,))
        return int(rows[0][0]) if rows else None

    async def commit(self, voucher: SignedVoucher) -> None:
        await self._rows(self._commit, commit_args(voucher))

    async def release(self, voucher: SignedVoucher) -> None:
        await self._rows(self._release, release_args(voucher))

    async def unreported(self, limit: int = 500) -> list[SignedVoucher]:
        return [served_voucher(tuple(r)) for r in await self._rows(self._unreported, (limit,))]

    async def reported(self, channel: str, cumulative: int) -> None:
        await self._rows(self._reported, (cumulative, channel, cumulative))

    async def aclose(self) -> None:
        await self._pg.aclose()
