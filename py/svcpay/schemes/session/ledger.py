"""The gate's voucher ledger: the highest voucher taken per session, and the highest whose
call was served, stored before the response is sent (docs/adr/0025).

- `advance` is one atomic compare-and-set: a voucher is taken only when it adds at least
  the request's price to the highest one taken so far (or, for a session's first voucher
  here, to what the chain redeemed), so a replay, a concurrent copy sent to another worker,
  or a decreasing voucher is refused. The voucher it replaced is kept beside it.
- `commit` (the handler answered below 400, before the response goes out) makes it the
  session's highest *served* voucher: what the provider may redeem.
- `release` (the handler failed: the call is not charged) puts the replaced voucher back as
  the highest taken, unless a later voucher was taken meanwhile.
- `unreported` and `reported` hand the served vouchers to the facilitator, which redeems
  them (`VoucherReporter`).

In memory for one process; SQLite (the embedded default) for processes on one machine;
PostgreSQL (`ledger_postgres.PostgresVoucherLedger`) for processes on several. Cumulative
amounts here are at most 2**63 - 1 (what both databases' integers hold); larger ones are
refused.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from solders.pubkey import Pubkey
from solders.signature import Signature

from svcpay.protocol.replay import sqlite_connect
from svcpay.protocol.voucher import SignedVoucher

MAX_CUMULATIVE = 2**63 - 1


class VoucherLedger(Protocol):
    async def advance(self, voucher: SignedVoucher, *, floor: int, step: int) -> int | None:
        """Takes `voucher` when its cumulative is at least `step` above the highest taken
        (or above `floor` when there is none); returns the cumulative it replaced, or None
        when it was refused."""
        ...

    async def highest(self, channel: str) -> int | None:
        """The highest cumulative taken for `channel` (None before its first voucher)."""
        ...

    async def commit(self, voucher: SignedVoucher) -> None:
        """`voucher`'s call was served: the provider may redeem it."""
        ...

    async def release(self, voucher: SignedVoucher) -> None:
        """`voucher`'s call failed: puts back the voucher it replaced, if it is still the
        highest taken."""
        ...

    async def unreported(self, limit: int = 500) -> list[SignedVoucher]:
        """Served vouchers above what was reported, one per session, oldest first."""
        ...

    async def reported(self, channel: str, cumulative: int) -> None: ...


@dataclass
class _Row:
    taken: int  # the highest cumulative taken
    taken_voucher: SignedVoucher | None
    previous: int  # what `taken` replaced
    served: SignedVoucher | None = None
    reported: int = 0
    updated_at: float = 0.0


class MemoryVoucherLedger:
    def __init__(self) -> None:
        self._rows: dict[str, _Row] = {}
        self._lock = threading.Lock()

    async def advance(self, voucher: SignedVoucher, *, floor: int, step: int) -> int | None:
        key = str(voucher.channel)
        with self._lock:
            row = self._rows.get(key)
            current = floor if row is None else row.taken
            if voucher.cumulative < current + step or voucher.cumulative > MAX_CUMULATIVE:
                return None
            if row is None:
                row = self._rows[key] = _Row(current, None, current)
            row.previous, row.taken, row.taken_voucher = row.taken, voucher.cumulative, voucher
            row.updated_at = time.time()
            return current

    async def highest(self, channel: str) -> int | None:
        row = self._rows.get(channel)
        return None if row is None else row.taken

    async def commit(self, voucher: SignedVoucher) -> None:
        with self._lock:
            row = self._rows.get(str(voucher.channel))
            if row is not None and (
                row.served is None or row.served.cumulative < voucher.cumulative
            ):
                row.served, row.updated_at = voucher, time.time()

    async def release(self, voucher: SignedVoucher) -> None:
        with self._lock:
            row = self._rows.get(str(voucher.channel))
            if row is not None and row.taken_voucher == voucher:
                row.taken, row.taken_voucher = row.previous, None

    async def unreported(self, limit: int = 500) -> list[SignedVoucher]:
        with self._lock:
            rows = [r for r in self._rows.values() if r.served and r.served.cumulative > r.reported]
        rows.sort(key=lambda r: r.updated_at)
        return [r.served for r in rows[:limit] if r.served is not None]

    async def reported(self, channel: str, cumulative: int) -> None:
        with self._lock:
            row = self._rows.get(channel)
            if row is not None:
                row.reported = max(row.reported, cumulative)


# One statement each, so SQLite and PostgreSQL run the same compare-and-set. A new session's
# row is inserted when the voucher adds `step` to the floor; an existing one is updated only
# when it adds `step` to its highest; RETURNING names the replaced cumulative.
COLUMNS = """channel TEXT PRIMARY KEY, cumulative BIGINT NOT NULL, signature BYTEA,
    prev_cumulative BIGINT NOT NULL, served BIGINT NOT NULL DEFAULT 0, served_expiry BIGINT,
    served_signer TEXT, served_signature BYTEA, reported BIGINT NOT NULL DEFAULT 0,
    updated_at DOUBLE PRECISION NOT NULL"""
ADVANCE = """INSERT INTO {t} AS v (channel, cumulative, signature, prev_cumulative, updated_at)
    SELECT {p}, {p}, {p}, {p}, {p}
    WHERE {p} >= {p} + {p} OR EXISTS (SELECT 1 FROM {t} WHERE channel = {p})
    ON CONFLICT (channel) DO UPDATE SET cumulative = excluded.cumulative,
    signature = excluded.signature, prev_cumulative = v.cumulative,
    updated_at = excluded.updated_at
    WHERE excluded.cumulative >= v.cumulative + {p}
    RETURNING prev_cumulative"""
HIGHEST = "SELECT cumulative FROM {t} WHERE channel = {p}"
COMMIT = """UPDATE {t} SET served = {p}, served_expiry = {p}, served_signer = {p},
    served_signature = {p}, updated_at = {p} WHERE channel = {p} AND served < {p}"""
RELEASE = """UPDATE {t} SET cumulative = prev_cumulative, signature = NULL
    WHERE channel = {p} AND cumulative = {p} AND signature = {p}"""
UNREPORTED = """SELECT channel, served, served_expiry, served_signer, served_signature
    FROM {t} WHERE served > reported ORDER BY updated_at LIMIT {p}"""
REPORTED = "UPDATE {t} SET reported = {p} WHERE channel = {p} AND reported < {p}"


def advance_args(voucher: SignedVoucher, floor: int, step: int) -> tuple[object, ...]:
    channel, cumulative = str(voucher.channel), voucher.cumulative
    return (
        channel,
        cumulative,
        bytes(voucher.signature),
        floor,
        time.time(),
        cumulative,
        floor,
        step,
        channel,
        step,
    )


def commit_args(voucher: SignedVoucher) -> tuple[object, ...]:
    return (
        voucher.cumulative,
        voucher.expiry,
        str(voucher.signer),
        bytes(voucher.signature),
        time.time(),
        str(voucher.channel),
        voucher.cumulative,
    )


def release_args(voucher: SignedVoucher) -> tuple[object, ...]:
    return (str(voucher.channel), voucher.cumulative, bytes(voucher.signature))


def served_voucher(row: tuple[object, ...]) -> SignedVoucher:
    channel, cumulative, expiry, signer, signature = row
    return SignedVoucher(
        Pubkey.from_string(str(channel)),
        int(str(cumulative)),
        int(str(expiry or 0)),
        Pubkey.from_string(str(signer)),
        Signature.from_bytes(
            bytes(signature) if isinstance(signature, bytes | memoryview) else b""
        ),
    )


class SqliteVoucherLedger:
    def __init__(self, path: str | Path, table: str = "session_vouchers") -> None:
        self.path = str(path)
        self._local = threading.local()
        q = {"t": table, "p": "?"}
        self._advance, self._highest = ADVANCE.format(**q), HIGHEST.format(**q)
        self._commit, self._release = COMMIT.format(**q), RELEASE.format(**q)
        self._unreported, self._reported = UNREPORTED.format(**q), REPORTED.format(**q)
        columns = COLUMNS.replace("BYTEA", "BLOB")
        self._db().execute(f"CREATE TABLE IF NOT EXISTS {table} ({columns})")

    def _db(self) -> sqlite3.Connection:
        """This thread's connection (the executor's threads each keep one)."""
        db: sqlite3.Connection | None = getattr(self._local, "db", None)
        if db is None:
            db = self._local.db = sqlite_connect(self.path)
            # WAL with NORMAL: a commit survives the process being killed (the WAL is
            # written before the call returns); only a power loss may lose the last ones.
            db.execute("PRAGMA synchronous=NORMAL")
        return db

    def _run(self, sql: str, args: tuple[object, ...]) -> list[tuple[object, ...]]:
        return self._db().execute(sql, args).fetchall()

    async def _do(self, sql: str, args: tuple[object, ...]) -> list[tuple[object, ...]]:
        return await asyncio.to_thread(self._run, sql, args)

    async def advance(self, voucher: SignedVoucher, *, floor: int, step: int) -> int | None:
        if voucher.cumulative > MAX_CUMULATIVE:
            return None
        rows = await self._do(self._advance, advance_args(voucher, floor, step))
        return int(str(rows[0][0])) if rows else None

    async def highest(self, channel: str) -> int | None:
        rows = await self._do(self._highest, (channel,))
        return int(str(rows[0][0])) if rows else None

    async def commit(self, voucher: SignedVoucher) -> None:
        await self._do(self._commit, commit_args(voucher))

    async def release(self, voucher: SignedVoucher) -> None:
        await self._do(self._release, release_args(voucher))

    async def unreported(self, limit: int = 500) -> list[SignedVoucher]:
        return [served_voucher(r) for r in await self._do(self._unreported, (limit,))]

    async def reported(self, channel: str, cumulative: int) -> None:
        await self._do(self._reported, (cumulative, channel, cumulative))
