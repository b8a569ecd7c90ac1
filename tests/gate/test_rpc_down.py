"""The gate with its RPC node down: a subscriber's request gets a JSON 503 with Retry-After
(never a 500, never served on a guess), and requests that need no chain read still get their
402 (issue 17). The same through the WSGI adapter."""

from __future__ import annotations

import socket
from typing import Any

import httpx
import pytest
from solders.keypair import Keypair
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from svcpay.gate import Subscription, payment_gate, payment_gate_wsgi
from svcpay.gate.chain import ChainSubscriptions
from svcpay.gate.pricing import Terms
from svcpay.program.client import BillingClient
from svcpay.protocol.memo import Memos
from svcpay.protocol.replay import MemoryReplayStore
from svcpay.schemes.subscription.server import RETRY_AFTER_SECS
from tests.gate.test_wsgi import call

pytestmark = pytest.mark.anyio


async def handler(request: Request) -> JSONResponse:
    return JSONResponse({"served": True})


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_a_subscriber_gets_a_json_503_with_retry_after_when_the_rpc_is_down() -> None:
    client = BillingClient.connect(f"http://127.0.0.1:{closed_port()}")
    plan = str(Keypair().pubkey())
    gate = payment_gate(
        Starlette(routes=[Route("/v1/resource", handler)]),
        pricing={"/v1/resource": [Subscription(plan, 1_000_000, 30 * 86_400)]},
        terms=Terms(pay_to=str(Keypair().pubkey()), token=str(Keypair().pubkey())),
        memos=Memos(b"gate-memo-secret-0123456789"),
        trusted_facilitators=set(),
        replay=MemoryReplayStore(),
        subscriptions=ChainSubscriptions(client, ttl=0),
    )
    transport = httpx.ASGITransport(app=gate, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://api") as http:
        reply = await http.get("/v1/resource", headers={"X-Svc-Sub": str(Keypair().pubkey())})
        assert reply.status_code == 503
        assert reply.headers["retry-after"] == str(RETRY_AFTER_SECS)
        assert reply.headers["content-type"] == "application/json"
        body = reply.json()
        assert body["error"] == "ChainUnavailable" and "unreachable" in body["message"]
        assert (await http.get("/v1/resource")).status_code == 402  # no chain read needed
    await client.close()


async def test_the_wsgi_adapter_answers_the_same_503() -> None:
    client = BillingClient.connect(f"http://127.0.0.1:{closed_port()}")
    served: list[str] = []

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        served.append(environ["PATH_INFO"])
        start_response("200 OK", [("Content-Type", "application/json")])
        return [b'{"served": true}']

    with payment_gate_wsgi(
        app,
        pricing={"/v1/resource": [Subscription(str(Keypair().pubkey()), 1_000_000, 86_400)]},
        terms=Terms(pay_to=str(Keypair().pubkey()), token=str(Keypair().pubkey())),
        memos=Memos(b"gate-memo-secret-0123456789"),
        trusted_facilitators=set(),
        replay=MemoryReplayStore(),
        subscriptions=ChainSubscriptions(client, ttl=0),
    ) as gate:
        reply = call(gate, "/v1/resource", headers={"X-Svc-Sub": str(Keypair().pubkey())})
        assert reply.status == "503 Service Unavailable"
        assert reply.header("Retry-After") == str(RETRY_AFTER_SECS)
        assert reply.header("Content-Type") == "application/json"
        assert reply.json()["error"] == "ChainUnavailable"
        assert call(gate, "/v1/resource").code == 402
        gate.run(client.close())
    assert served == []
