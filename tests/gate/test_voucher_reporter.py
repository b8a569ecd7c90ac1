"""The voucher reporter's shutdown: `aclose()` lets the report in flight finish (it never
cancels it: an in-process facilitator's database transaction would be cut in half), then
reports what is left, again after a transient failure, until its deadline. The facilitator
here is an ASGI app that only counts what it is handed; the real one's answers are tested in
tests/facilitator/test_sessions.py."""

from __future__ import annotations

import asyncio
import json
import logging

import httpx
import pytest
from solders.keypair import Keypair
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from svcpay.protocol.voucher import SignedVoucher
from svcpay.schemes.session.ledger import MemoryVoucherLedger
from svcpay.schemes.session.reporter import VoucherReporter

pytestmark = pytest.mark.anyio
PRICE = 100
KEY = Keypair()


class Receiver:
    """POST /v1/sessions/vouchers: answers `failures` 503s first, and holds each answer
    until `release` is set; records every voucher it kept."""

    def __init__(self, failures: int = 0) -> None:
        self.failures, self.started = failures, asyncio.Event()
        self.kept: list[int] = []
        self.release = asyncio.Event()
        self.finished = 0
        self.release.set()

    async def report(self, request: Request) -> JSONResponse:
        self.started.set()
        await self.release.wait()
        if self.failures:
            self.failures -= 1
            return JSONResponse({"error": "DatabaseUnavailable"}, 503)
        vouchers = json.loads(await request.body())["vouchers"]
        self.kept += [int(v["voucher"]["cumulativeAmount"]) for v in vouchers]
        self.finished += 1
        return JSONResponse({"vouchers": [{"status": "kept"} for _ in vouchers]})

    def client(self) -> httpx.AsyncClient:
        app = Starlette(routes=[Route("/v1/sessions/vouchers", self.report, methods=["POST"])])
        return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://f")


async def served(ledger: MemoryVoucherLedger, cumulative: int) -> None:
    voucher = SignedVoucher.sign(KEY, Keypair().pubkey(), cumulative)
    assert await ledger.advance(voucher, floor=0, step=PRICE) is not None
    await ledger.commit(voucher)


async def test_close_lets_the_report_in_flight_finish_then_reports_the_rest() -> None:
    ledger, receiver = MemoryVoucherLedger(), Receiver()
    async with receiver.client() as http:
        reporter = VoucherReporter(ledger, "http://f", "key", http=http, interval=0.01)
        await served(ledger, PRICE)
        receiver.release.clear()
        reporter.poke()
        await receiver.started.wait()  # the loop's report is in the facilitator's hands
        await served(ledger, 2 * PRICE)  # served while it is there
        closing = asyncio.create_task(reporter.aclose())
        await asyncio.sleep(0.05)
        assert not closing.done()  # it waits for the report in flight, it does not cancel it
        receiver.release.set()
        await closing
    # Two reports: the first ran to its end (cancelled, it would have been sent again with
    # the second voucher, in one report).
    assert receiver.finished == 2
    assert sorted(receiver.kept) == [PRICE, 2 * PRICE]
    assert await ledger.unreported() == []


async def test_close_reports_again_after_a_503_until_it_is_taken() -> None:
    ledger, receiver = MemoryVoucherLedger(), Receiver(failures=2)
    async with receiver.client() as http:
        reporter = VoucherReporter(ledger, "http://f", "key", http=http, interval=60)
        await served(ledger, PRICE)
        await reporter.aclose()
    assert receiver.kept == [PRICE] and await ledger.unreported() == []


async def test_close_gives_up_at_its_deadline_and_keeps_the_voucher(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ledger, receiver = MemoryVoucherLedger(), Receiver(failures=1_000)
    async with receiver.client() as http:
        reporter = VoucherReporter(
            ledger, "http://f", "key", http=http, interval=60, close_timeout=0.3
        )
        await served(ledger, PRICE)
        with caplog.at_level(logging.WARNING, logger="svcpay.gate"):
            await reporter.aclose()
    assert receiver.kept == [] and len(await ledger.unreported()) == 1  # reported next start
    assert "left unreported at close" in caplog.text
    assert receiver.failures < 1_000 - 1  # it tried more than once


async def test_a_refusal_that_no_retry_changes_is_not_retried() -> None:
    ledger = MemoryVoucherLedger()
    calls = 0

    async def unauthorized(request: Request) -> JSONResponse:
        nonlocal calls
        calls += 1
        return JSONResponse({"error": "Unauthorized"}, 401)

    app = Starlette(routes=[Route("/v1/sessions/vouchers", unauthorized, methods=["POST"])])
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://f") as http:
        reporter = VoucherReporter(ledger, "http://f", "bad key", http=http, interval=60)
        await served(ledger, PRICE)
        await reporter.aclose()
    assert calls == 1 and len(await ledger.unreported()) == 1
