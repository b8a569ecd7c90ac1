"""The x402 fast path (issue 27, docs/adr/0027) on the local validator: the gate checks a
payment itself and asks the facilitator once, to settle; a refused payment never reaches
the facilitator; a slow or failing facilitator gets 503s with Retry-After, not a queue; a
settle left without an answer after the handler ran is served, recorded as pending and
reconciled."""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest
from solders.keypair import Keypair
from solders.message import to_bytes_versioned
from solders.transaction import VersionedTransaction

from svcpay.gate import OneTime, payment_gate
from svcpay.protocol.memo import Memos
from svcpay.protocol.replay import MemoryReplayStore, SqliteReplayStore
from svcpay.schemes.x402_exact.facilitator_client import (
    FacilitatorUnavailable,
    X402FacilitatorClient,
)
from svcpay.schemes.x402_exact.server import X402Options
from svcpay.schemes.x402_exact.settling import (
    MemoryPendingSettlements,
    SettlementEvent,
    SqlitePendingSettlements,
)
from svcpay.schemes.x402_exact.wire import Reason, decode_json
from tests.gate.test_x402 import PRICE, World, api, required, transaction, v2_header, x402_terms
from tests.gate.test_x402 import world as world  # noqa: F401 (the fixture, by its name)

pytestmark = pytest.mark.anyio
ASGIApp = Callable[[Any, Any, Any], Awaitable[None]]


class Facilitator:
    """The world's facilitator behind a recorder of the paths it was asked, with hooks to
    hold a settle (`gate`) or answer it with an error after it ran (`fail_after`)."""

    def __init__(self, world: World) -> None:
        self.inner = world.facilitator.app()
        self.calls: list[str] = []
        self.gate: asyncio.Event | None = None
        self.fail_after: int | None = None  # answer this status after settling
        self.answer: dict[str, Any] | None = None  # answer this instead of settling

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            self.calls.append(scope["path"])
            if scope["path"] == "/settle":
                if self.gate is not None:
                    await self.gate.wait()
                if self.answer is not None:
                    await respond(send, 200, self.answer)
                    return
                if self.fail_after is not None:
                    await self.inner(scope, receive, drop(send))
                    await respond(send, self.fail_after, {"error": "upstream"})
                    return
        await self.inner(scope, receive, send)


def drop(send: Any) -> Any:
    async def nothing(message: Any) -> None:
        pass

    return nothing


async def respond(send: Any, status: int, body: dict[str, Any]) -> None:
    import json

    await send({"type": "http.response.start", "status": status, "headers": []})
    await send({"type": "http.response.body", "body": json.dumps(body).encode()})


def gate(
    world: World, fac: Facilitator | X402FacilitatorClient, options: X402Options, replay=None
) -> tuple[Any, X402FacilitatorClient]:  # type: ignore[no-untyped-def]
    client = (
        fac
        if isinstance(fac, X402FacilitatorClient)
        else X402FacilitatorClient(
            "http://fac", http=httpx.AsyncClient(transport=httpx.ASGITransport(app=fac))
        )
    )
    app = payment_gate(
        api(world.handled, world.facilitator),
        pricing={"/v1/data": [OneTime(PRICE)], "/v1/before": [OneTime(PRICE, settle="before")]},
        terms=x402_terms(world.mint, world.owner.pubkey(), world.facilitator.fee_payer.pubkey()),
        memos=Memos(b"x402-gate-memo-secret-0123"),
        trusted_facilitators=set(),
        replay=replay if replay is not None else MemoryReplayStore(),
        x402_facilitator=client,
        x402_options=options,
    )
    return app, client


async def serve(world: World, app: Any) -> None:
    world.http = httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app, raise_app_exceptions=False), base_url="http://api"
    )


async def payment(world: World, path: str = "/v1/data", **tx: Any) -> str:
    req = await required(world, path)
    return v2_header(req, transaction(world, req["accepts"][0], **tx))


async def test_a_paid_request_asks_the_facilitator_once_to_settle(world: World) -> None:
    fac = Facilitator(world)
    await serve(world, gate(world, fac, X402Options())[0])
    reply = await world.http.get("/v1/data", headers={"PAYMENT-SIGNATURE": await payment(world)})
    assert reply.status_code == 200 and decode_json(reply.headers["PAYMENT-RESPONSE"])["success"]
    assert fac.calls == ["/settle"] and world.balance() == PRICE
    again = await world.http.get(
        "/v1/data", headers={"PAYMENT-SIGNATURE": reply.request.headers["PAYMENT-SIGNATURE"]}
    )
    assert again.status_code == 402 and fac.calls == ["/settle"]  # a replay stops at the gate
    # A facilitator that wants /verify too gets it, before the handler runs.
    fac.calls.clear()
    await serve(world, gate(world, fac, X402Options(remote_verify=True))[0])
    reply = await world.http.get("/v1/data", headers={"PAYMENT-SIGNATURE": await payment(world)})
    assert reply.status_code == 200 and fac.calls == ["/verify", "/settle"]
    assert world.balance() == 2 * PRICE


async def test_a_payment_refused_by_the_local_check_never_reaches_the_facilitator(
    world: World,
) -> None:
    fac = Facilitator(world)
    await serve(world, gate(world, fac, X402Options(remote_verify=True))[0])
    req = await required(world, "/v1/data")
    terms = req["accepts"][0]

    def forged() -> str:  # signed by a key that is not the token account's owner
        tx = VersionedTransaction.from_bytes(base64.b64decode(transaction(world, terms)))
        sigs = list(tx.signatures)
        sigs[1] = Keypair().sign_message(to_bytes_versioned(tx.message))
        return base64.b64encode(bytes(VersionedTransaction.populate(tx.message, sigs))).decode()

    cases = {
        Reason.AMOUNT_INSUFFICIENT: transaction(world, terms, amount=PRICE - 1),
        Reason.INVALID_PAYLOAD: forged(),
        Reason.RECIPIENT_MISMATCH: transaction(world, {**terms, "payTo": str(Keypair().pubkey())}),
    }
    for reason, tx in cases.items():
        reply = await world.http.get("/v1/data", headers={"PAYMENT-SIGNATURE": v2_header(req, tx)})
        assert reply.status_code == 402, reply.text
        assert decode_json(reply.headers["PAYMENT-REQUIRED"])["error"] == reason
    assert fac.calls == [] and world.handled == [] and world.balance() == 0


async def test_past_the_cap_payments_get_503_at_once_not_a_queue(world: World) -> None:
    fac = Facilitator(world)
    fac.gate = asyncio.Event()  # the facilitator holds every settle
    await serve(world, gate(world, fac, X402Options(max_in_flight=2, retry_after=7))[0])
    headers = [await payment(world) for _ in range(6)]
    held = [
        asyncio.create_task(world.http.get("/v1/data", headers={"PAYMENT-SIGNATURE": h}))
        for h in headers[:2]
    ]
    while fac.calls.count("/settle") < 2:
        await asyncio.sleep(0.01)
    busy = await asyncio.gather(
        *(world.http.get("/v1/data", headers={"PAYMENT-SIGNATURE": h}) for h in headers[2:])
    )
    assert [r.status_code for r in busy] == [503] * 4
    assert all(r.headers["Retry-After"] == "7" for r in busy)
    assert busy[0].json()["error"] == "FacilitatorUnavailable"
    assert len(world.handled) == 2 and fac.calls == ["/settle"] * 2  # no handler, no call
    fac.gate.set()
    assert [r.status_code for r in await asyncio.gather(*held)] == [200, 200]
    # The refused ones were not claimed: paid again once there is room, they go through.
    reply = await world.http.get("/v1/data", headers={"PAYMENT-SIGNATURE": headers[2]})
    assert reply.status_code == 200 and world.balance() == 3 * PRICE


async def test_a_facilitator_that_keeps_failing_opens_the_breaker(world: World) -> None:
    down = X402FacilitatorClient("http://127.0.0.1:9", timeout=2)
    app, _ = gate(world, down, X402Options(trip_after=2, retry_after=30))
    await serve(world, app)
    replies = [
        await world.http.get("/v1/data", headers={"PAYMENT-SIGNATURE": await payment(world)})
        for _ in range(5)
    ]
    await down.aclose()
    assert [r.status_code for r in replies] == [503] * 5
    assert all(int(r.headers["Retry-After"]) > 0 for r in replies)
    # The first two ran their handler and could not settle (nothing was sent: no charge);
    # the breaker answered the other three before their handlers ran.
    assert len(world.handled) == 2 and world.balance() == 0
    assert "failed 2 times in a row" in replies[-1].json()["message"]


async def test_a_settle_without_an_answer_is_served_pending_and_reconciled(
    world: World, tmp_path: Any
) -> None:
    fac = Facilitator(world)
    fac.fail_after = 502  # it settles, then the answer is lost
    heard: list[SettlementEvent] = []

    async def hook(event: SettlementEvent) -> None:
        heard.append(event)

    replay = SqliteReplayStore(tmp_path / "replay.db")
    app, _ = gate(world, fac, X402Options(on_settlement=hook), replay)
    await serve(world, app)
    header = await payment(world)
    reply = await world.http.get("/v1/data", headers={"PAYMENT-SIGNATURE": header})
    assert reply.status_code == 200 and reply.json() == {"data": 42}
    assert reply.headers["X-Svc-Settlement"] == "pending"
    assert "PAYMENT-RESPONSE" not in reply.headers and world.balance() == PRICE
    assert [e.outcome for e in heard] == ["pending"] and heard[0].amount == str(PRICE)
    # Durable: a new gate process on the same files finds it and reconciles it.
    pending = SqlitePendingSettlements(tmp_path / "replay.db")
    assert await pending.count() == 1
    await app.core.x402.reconciler.aclose()
    fac.fail_after = None
    app2, _ = gate(world, fac, X402Options(on_settlement=hook), SqliteReplayStore(replay.path))
    x402 = app2.core.x402
    assert await x402.reconciler.run_once(now=time.time() + 60) == {
        "pending": 0,
        "settled": 1,
        "unpaid": 0,
        "abandoned": 0,
    }
    assert [e.outcome for e in heard] == ["pending", "settled"] and await pending.count() == 0
    # Its claim is kept: the same payment again is a replay.
    await serve(world, app2)
    again = await world.http.get("/v1/data", headers={"PAYMENT-SIGNATURE": header})
    assert again.status_code == 402 and world.balance() == PRICE


async def test_a_pending_settlement_the_facilitator_refuses_is_unpaid_and_freed(
    world: World,
) -> None:
    fac = Facilitator(world)
    fac.answer = {"success": False, "errorReason": Reason.SETTLEMENT_PENDING, "network": "x"}
    heard: list[str] = []

    async def hook(event: SettlementEvent) -> None:
        heard.append(f"{event.outcome}:{event.reason}")

    store = MemoryPendingSettlements()
    app, _ = gate(world, fac, X402Options(on_settlement=hook, pending=store))
    await serve(world, app)
    reply = await world.http.get("/v1/data", headers={"PAYMENT-SIGNATURE": await payment(world)})
    assert reply.status_code == 200 and reply.headers["X-Svc-Settlement"] == "pending"
    x402 = app.core.x402
    await x402.reconciler.aclose()  # its background pass would race this test's passes
    # Still pending at the facilitator: it waits, with backoff.
    soon = time.time() + 60
    assert (await x402.reconciler.run_once(now=soon))["pending"] == 1
    assert await store.take_due(soon + 1, 10) == []  # not due again yet
    [entry] = await store.take_due(soon + 3600, 10)
    assert entry.attempts == 1
    await store.postpone(entry.key, 0, entry.attempts)
    fac.answer = {
        "success": False,
        "errorReason": "transaction_failed",
        "errorMessage": "no",
        "network": "x",
        "transaction": "",
    }
    assert (await x402.reconciler.run_once(now=soon))["unpaid"] == 1
    assert heard == ["pending:", "unpaid:no"] and await store.count() == 0
    assert await x402.replay.claim(entry.key, 2**40)  # freed: it was never paid


async def test_the_facilitator_client_says_whether_a_request_may_have_arrived() -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(1 << 16)
        await asyncio.sleep(5)

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        for url, maybe in ((f"http://127.0.0.1:{port}", True), ("http://127.0.0.1:9", False)):
            client = X402FacilitatorClient(url, timeout=0.3)
            with pytest.raises(FacilitatorUnavailable) as e:
                await client.settle(2, {}, {})
            await client.aclose()
            assert e.value.maybe_sent is maybe, url
    finally:
        server.close()


async def test_a_pending_settlement_is_served_even_when_its_store_is_down(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    """The pending store's database away while a settle got no answer: the answer still
    stands (the facilitator finishes the settlement), with one warning, not a 500."""

    class Down(MemoryPendingSettlements):
        async def add(self, entry: Any) -> None:
            raise OSError("the database is unreachable")

    fac = Facilitator(world)
    fac.fail_after = 502
    app, _ = gate(world, fac, X402Options(pending=Down()))
    await serve(world, app)
    reply = await world.http.get("/v1/data", headers={"PAYMENT-SIGNATURE": await payment(world)})
    assert reply.status_code == 200 and reply.headers["X-Svc-Settlement"] == "pending"
    assert "recording it failed (the database is unreachable)" in caplog.text
    assert world.balance() == PRICE  # it landed: the facilitator settled it
    await app.core.x402.reconciler.aclose()
