"""A plan priced in another token than the gate's one-time payments (PYUSD plans beside
USDC payments, docs/adr/0030): its 402 option and its MPP `subscription` challenge name the
plan's mint and destination, the one-time option the gate's. Pure: no chain is read before
a subscription is presented."""

from __future__ import annotations

import httpx
import pytest
from solders.pubkey import Pubkey
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from svcpay.gate import OneTime, Subscription, payment_gate
from svcpay.gate.pricing import Terms
from svcpay.protocol import mpp
from svcpay.protocol.memo import Memos
from svcpay.protocol.replay import MemoryReplayStore

pytestmark = pytest.mark.anyio
USDC, PAY_TO, PYUSD, PLAN_DESTINATION, PLAN = (str(Pubkey.new_unique()) for _ in range(5))
DAY = 86_400


async def handler(request: Request) -> JSONResponse:
    return JSONResponse({"served": request.url.path})


class NoSubscriptions:
    """Never asked here: nobody presents a subscription."""

    async def lookup(self, subscription_id: str) -> None:
        raise AssertionError("no subscription is looked up before one is presented")

    def invalidate(self, subscription_id: str) -> None:
        pass


async def test_a_plan_in_its_own_token_names_it_and_its_destination() -> None:
    gate = payment_gate(
        Starlette(routes=[Route("/v1/resource", handler)]),
        pricing={
            "/v1/resource": [
                OneTime(500_000),
                Subscription(PLAN, 10_000_000, 30 * DAY, token=PYUSD, pay_to=PLAN_DESTINATION),
            ]
        },
        terms=Terms(pay_to=PAY_TO, token=USDC),
        memos=Memos(b"gate-memo-secret-0123456789"),
        trusted_facilitators=set(),
        replay=MemoryReplayStore(),
        subscriptions=NoSubscriptions(),
    )
    transport = httpx.ASGITransport(app=gate)
    async with httpx.AsyncClient(transport=transport, base_url="http://api") as http:
        unpaid = await http.get("/v1/resource")

    assert unpaid.status_code == 402
    one_time, plan = unpaid.json()["accepts"]
    assert (one_time["token"], one_time["payTo"]) == (USDC, PAY_TO)
    assert (plan["token"], plan["payTo"], plan["svc"]["planId"]) == (PYUSD, PLAN_DESTINATION, PLAN)
    [challenge] = [
        c
        for c in mpp.parse_challenges(unpaid.headers.get_list("www-authenticate"))
        if c.intent == "subscription"
    ]
    request = challenge.request_json
    assert (request["currency"], request["recipient"]) == (PYUSD, PLAN_DESTINATION)
