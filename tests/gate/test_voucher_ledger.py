"""The voucher ledger's semantics on each backend (memory, SQLite, PostgreSQL): a voucher is
taken once and only when it adds the price; a failed call puts the previous one back; only
served vouchers are reported; concurrent copies (two workers, one table) are taken once."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from solders.keypair import Keypair

from svcpay.protocol.voucher import SignedVoucher
from svcpay.schemes.session.ledger import (
    MAX_CUMULATIVE,
    MemoryVoucherLedger,
    SqliteVoucherLedger,
    VoucherLedger,
)

pytestmark = pytest.mark.anyio
PRICE = 100
KEY = Keypair()
CHANNEL = Keypair().pubkey()


def voucher(cumulative: int, channel=CHANNEL) -> SignedVoucher:  # type: ignore[no-untyped-def]
    return SignedVoucher.sign(KEY, channel, cumulative)


@pytest.fixture(params=["memory", "sqlite", "postgresql"])
async def make(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[Callable[[], VoucherLedger]]:
    """A factory of ledgers sharing one store (two calls: two workers)."""
    closers = []
    if request.param == "memory":
        shared = MemoryVoucherLedger()
        yield lambda: shared
        return
    if request.param == "sqlite":
        yield lambda: SqliteVoucherLedger(tmp_path / "vouchers.db")
        return
    from svcpay.schemes.session.ledger_postgres import PostgresVoucherLedger

    url = request.getfixturevalue("postgres_url")
    table = f"vouchers_{uuid.uuid4().hex[:10]}"

    def postgres() -> VoucherLedger:
        ledger = PostgresVoucherLedger(url, table=table)
        closers.append(ledger)
        return ledger

    yield postgres
    for ledger in closers:
        await ledger.aclose()


async def test_a_voucher_is_taken_only_when_it_adds_the_price(
    make: Callable[[], VoucherLedger],
) -> None:
    ledger = make()
    assert await ledger.highest(str(CHANNEL)) is None
    assert await ledger.advance(voucher(PRICE), floor=0, step=PRICE) == 0
    assert await ledger.advance(voucher(PRICE), floor=0, step=PRICE) is None  # a replay
    assert await ledger.advance(voucher(2 * PRICE - 1), floor=0, step=PRICE) is None  # short
    assert await ledger.advance(voucher(3 * PRICE), floor=0, step=PRICE) == PRICE  # more is fine
    assert await ledger.highest(str(CHANNEL)) == 3 * PRICE
    # A session's first voucher here counts from what the chain redeemed (the floor).
    other = Keypair().pubkey()
    assert await ledger.advance(voucher(5 * PRICE, other), floor=5 * PRICE, step=PRICE) is None
    assert await ledger.advance(voucher(6 * PRICE, other), floor=5 * PRICE, step=PRICE) == 5 * PRICE
    assert await ledger.advance(voucher(MAX_CUMULATIVE + 1), floor=0, step=PRICE) is None


async def test_a_failed_call_puts_the_previous_voucher_back(
    make: Callable[[], VoucherLedger],
) -> None:
    ledger = make()
    first, second = voucher(PRICE), voucher(2 * PRICE)
    await ledger.advance(first, floor=0, step=PRICE)
    await ledger.commit(first)
    await ledger.advance(second, floor=0, step=PRICE)
    await ledger.release(second)
    assert await ledger.highest(str(CHANNEL)) == PRICE
    # The same voucher may pay for the next call, which is then served.
    assert await ledger.advance(second, floor=0, step=PRICE) == PRICE
    await ledger.commit(second)
    # A release after a later voucher was taken changes nothing.
    third = voucher(3 * PRICE)
    await ledger.advance(third, floor=0, step=PRICE)
    await ledger.release(second)
    assert await ledger.highest(str(CHANNEL)) == 3 * PRICE
    # The first voucher of a session released: back to the floor.
    other = Keypair().pubkey()
    only = voucher(PRICE, other)
    await ledger.advance(only, floor=0, step=PRICE)
    await ledger.release(only)
    assert await ledger.highest(str(other)) == 0
    assert await ledger.advance(only, floor=0, step=PRICE) == 0


async def test_only_served_vouchers_are_reported_once(make: Callable[[], VoucherLedger]) -> None:
    ledger = make()
    first, second = voucher(PRICE), voucher(2 * PRICE)
    await ledger.advance(first, floor=0, step=PRICE)
    assert await ledger.unreported() == []  # taken, not served yet
    await ledger.commit(first)
    await ledger.advance(second, floor=0, step=PRICE)  # in flight
    assert [v.cumulative for v in await ledger.unreported()] == [PRICE]
    served = (await ledger.unreported())[0]
    assert served == first and served.verifies()
    await ledger.reported(str(CHANNEL), PRICE)
    assert await ledger.unreported() == []
    await ledger.commit(second)
    assert [v.cumulative for v in await ledger.unreported()] == [2 * PRICE]
    await ledger.reported(str(CHANNEL), 2 * PRICE)
    await ledger.reported(str(CHANNEL), PRICE)  # late news of an earlier report: no change
    assert await ledger.unreported() == []


async def test_concurrent_copies_on_two_workers_are_taken_once(
    make: Callable[[], VoucherLedger],
) -> None:
    a, b = make(), make()
    for n in range(1, 11):
        copy = voucher(n * PRICE)
        taken = await asyncio.gather(
            *(ledger.advance(copy, floor=0, step=PRICE) for ledger in (a, b, a, b))
        )
        assert sorted(taken, key=lambda t: t is None) == [(n - 1) * PRICE, None, None, None]
