"""The gate's one-time flow (spec 4.1) through a real ASGI app, with facilitator-signed proofs."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator

import httpx
import pytest
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from svcpay.gate import OneTime, payment_gate
from svcpay.gate.pricing import Terms
from svcpay.protocol.memo import Memos
from svcpay.protocol.models import PaymentRequired
from svcpay.protocol.replay import MemoryReplayStore
from tests.support.proofs import proof_header

pytestmark = pytest.mark.anyio
FACILITATOR = Keypair()
TERMS = Terms(pay_to=str(Pubkey.new_unique()), token=str(Pubkey.new_unique()))
PRICE = 500_000


def make_app() -> Starlette:
    calls = {"flaky": 0, "boom": 0}

    async def data(request: Request) -> JSONResponse:
        return JSONResponse({"data": 42})

    async def flaky(request: Request) -> JSONResponse:
        calls["flaky"] += 1
        return (
            JSONResponse({"error": "busy"}, status_code=503)
            if calls["flaky"] == 1
            else JSONResponse({"ok": True})
        )

    async def boom(request: Request) -> JSONResponse:
        calls["boom"] += 1
        if calls["boom"] == 1:
            raise RuntimeError("the handler crashed")
        return JSONResponse({"ok": True})

    async def free(request: Request) -> JSONResponse:
        return JSONResponse({"free": True})

    return Starlette(
        routes=[
            Route("/v1/data", data),
            Route("/v1/flaky", flaky),
            Route("/v1/boom", boom),
            Route("/free", free),
        ]
    )


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    gate = payment_gate(
        make_app(),
        pricing={p: [OneTime(PRICE)] for p in ("/v1/data", "/v1/flaky", "/v1/boom")},
        terms=TERMS,
        memos=Memos(b"gate-memo-secret-0123456789"),
        trusted_facilitators={str(FACILITATOR.pubkey())},
        replay=MemoryReplayStore(),
    )
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=gate, raise_app_exceptions=False),
        base_url="http://api",
    ) as client:
        yield client


async def terms_for(http: httpx.AsyncClient, path: str) -> PaymentRequired:
    reply = await http.get(path)
    assert reply.status_code == 402
    return PaymentRequired.parse(reply.content)


def proof(memo: str, amount: int = PRICE, signer: Keypair = FACILITATOR) -> str:
    return proof_header(TERMS, memo, amount, signer)


async def test_unpaid_requests_get_402_with_the_terms(http: httpx.AsyncClient) -> None:
    body = await terms_for(http, "/v1/data")
    (option,) = body.accepts
    assert (option.amount, option.pay_to, option.token, option.memo is not None) == (
        str(PRICE),
        TERMS.pay_to,
        TERMS.token,
        True,
    )
    assert body.version == "1"


async def test_a_valid_proof_is_served_once(http: httpx.AsyncClient) -> None:
    memo = (await terms_for(http, "/v1/data")).accepts[0].memo
    assert memo
    header = proof(memo)
    served = await http.get("/v1/data", headers={"X-PAYMENT": header})
    assert (served.status_code, served.json()) == (200, {"data": 42})
    again = await http.get("/v1/data", headers={"X-PAYMENT": header})
    assert again.status_code == 402
    assert (
        again.json()["error"] == "InvalidPaymentProof" and "already used" in again.json()["message"]
    )
    assert again.json()["accepts"][0]["memo"] != memo  # a fresh body


async def test_bad_proofs_get_a_fresh_402_with_the_reason(http: httpx.AsyncClient) -> None:
    memo = (await terms_for(http, "/v1/data")).accepts[0].memo
    assert memo
    cases = {
        proof(memo, amount=PRICE - 1): "the price is",
        proof(memo, signer=Keypair()): "does not trust",
        proof(
            (await terms_for(http, "/v1/flaky")).accepts[0].memo or ""
        ): "not issued for this resource",
        "!!not base64!!": "base64",
        base64.b64encode(b'{"hello": "world"}').decode(): "",
    }
    for header, reason in cases.items():
        reply = await http.get("/v1/data", headers={"X-PAYMENT": header})
        assert reply.status_code == 402, reply.text
        assert reply.json()["error"] == "InvalidPaymentProof" and reason in reply.json()["message"]


async def test_a_failed_response_does_not_use_up_the_payment(http: httpx.AsyncClient) -> None:
    memo = (await terms_for(http, "/v1/flaky")).accepts[0].memo
    assert memo
    header = proof(memo)
    assert (await http.get("/v1/flaky", headers={"X-PAYMENT": header})).status_code == 503
    assert (await http.get("/v1/flaky", headers={"X-PAYMENT": header})).status_code == 200
    assert (await http.get("/v1/flaky", headers={"X-PAYMENT": header})).status_code == 402


async def test_a_crashing_handler_does_not_use_up_the_payment(http: httpx.AsyncClient) -> None:
    memo = (await terms_for(http, "/v1/boom")).accepts[0].memo
    assert memo
    header = proof(memo)
    assert (await http.get("/v1/boom", headers={"X-PAYMENT": header})).status_code == 500
    assert (await http.get("/v1/boom", headers={"X-PAYMENT": header})).status_code == 200
    assert (await http.get("/v1/boom", headers={"X-PAYMENT": header})).status_code == 402


async def test_oversized_headers_get_400_and_free_paths_pass(http: httpx.AsyncClient) -> None:
    huge = await http.get("/v1/data", headers={"X-PAYMENT": "A" * 5000})
    assert huge.status_code == 400 and "exceeds" in huge.json()["message"]
    assert (await http.get("/free")).json() == {"free": True}


async def test_a_method_or_path_the_app_does_not_serve_is_never_priced(
    http: httpx.AsyncClient,
) -> None:
    """The app's own 405 or 404 comes before any payment: no terms, and a proof sent along
    is not taken (it still buys the GET it was made for)."""
    memo = (await terms_for(http, "/v1/data")).accepts[0].memo
    assert memo
    header = proof(memo)
    for method, path, status in (
        ("POST", "/v1/data", 405),
        ("DELETE", "/v1/data", 405),
        ("GET", "/v1/data/nothing-here", 404),
    ):
        for headers in ({}, {"X-PAYMENT": header}):
            reply = await http.request(method, path, headers=headers)
            assert reply.status_code == status, (method, path, reply.text)
    served = await http.get("/v1/data", headers={"X-PAYMENT": header})
    assert (served.status_code, served.json()) == (200, {"data": 42})


class Wrapped:
    """Middleware keeping the app it wraps as `.app`, as Starlette's do."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.app(scope, receive, send)


async def test_routes_are_read_through_middleware_or_told_by_serves() -> None:
    async def bare(scope: Scope, receive: Receive, send: Send) -> None:
        status = 200 if scope["method"] == "GET" else 405
        await JSONResponse({"bare": True}, status)(scope, receive, send)

    common = dict(
        pricing={"/v1/data": [OneTime(PRICE)]},
        terms=TERMS,
        memos=Memos(b"gate-memo-secret-0123456789"),
        trusted_facilitators={str(FACILITATOR.pubkey())},
        replay=MemoryReplayStore(),
    )
    added = make_app()  # as the README adds it: inside Starlette's own middleware stack
    added.add_middleware(payment_gate, **common)  # type: ignore[arg-type]
    gates = [
        added,
        payment_gate(Wrapped(Wrapped(make_app())), **common),  # type: ignore[arg-type]
        payment_gate(bare, serves=lambda scope: scope["method"] == "GET", **common),  # type: ignore[arg-type]
    ]
    for gate in gates:
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=gate), base_url="http://api"
        ) as api:
            assert (await api.get("/v1/data")).status_code == 402
            assert (await api.post("/v1/data")).status_code == 405
