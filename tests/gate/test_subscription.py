"""The gate's subscription and metered flows, against the local validator (real chain state)."""

from __future__ import annotations

import httpx
import pytest
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from svcpay.gate import Subscription, payment_gate
from svcpay.gate.chain import ChainMeter, ChainSubscriptions
from svcpay.gate.pricing import Terms
from svcpay.program.client import BillingClient
from svcpay.protocol.memo import Memos
from svcpay.protocol.replay import MemoryReplayStore
from tests.support.billing import DAY, USDC, subscribed
from tests.support.chain import Chain

pytestmark = pytest.mark.anyio
PERIOD = 30 * DAY


async def handler(request: Request) -> JSONResponse:
    return JSONResponse({"served": request.url.path})


async def broken(request: Request) -> JSONResponse:
    return JSONResponse({"error": "upstream failed"}, status_code=500)


async def raises(request: Request) -> JSONResponse:
    raise RuntimeError("the handler crashed")


async def setup(chain: Chain, client: BillingClient) -> tuple[httpx.AsyncClient, str, Keypair, str]:
    """A provider with a plan, a gate for it (ttl 0: every request reads the chain), and a
    subscriber with a 1 USDC metered allowance. Returns (http, plan, subscriber, sub_id)."""
    world = await subscribed(chain, client, amount=10 * USDC, period=PERIOD, overage=USDC)
    plan, destination, mint, facilitator = world.plan, world.destination, world.mint, world.biller
    subscriber, sub_id = world.subscriber, world.subscription
    gate = payment_gate(
        Starlette(
            routes=[
                Route("/v1/resource", handler),
                Route("/v1/process", handler, methods=["POST"]),
                Route("/v1/broken", broken, methods=["POST"]),
                Route("/v1/raises", raises, methods=["POST"]),
            ]
        ),
        pricing={
            "/v1/resource": [Subscription(str(plan), 10 * USDC, PERIOD)],
            "/v1/process": [Subscription(str(plan), 10 * USDC, PERIOD, metered=USDC // 2)],
            "/v1/broken": [Subscription(str(plan), 10 * USDC, PERIOD, metered=USDC // 2)],
            "/v1/raises": [Subscription(str(plan), 10 * USDC, PERIOD, metered=USDC // 2)],
        },
        terms=Terms(pay_to=str(destination), token=str(mint)),
        memos=Memos(b"gate-memo-secret-0123456789"),
        trusted_facilitators=set(),
        replay=MemoryReplayStore(),
        subscriptions=ChainSubscriptions(client, ttl=0),
        meter=ChainMeter(client, facilitator),
    )
    transport = httpx.ASGITransport(app=gate, raise_app_exceptions=False)  # a crash is a 500
    http = httpx.AsyncClient(transport=transport, base_url="http://api")
    return http, str(plan), subscriber, str(sub_id)


async def test_an_active_subscriber_is_served_and_others_get_402(
    chain: Chain, client: BillingClient
) -> None:
    http, plan, subscriber, sub_id = await setup(chain, client)
    async with http:
        unpaid = await http.get("/v1/resource")
        assert unpaid.status_code == 402
        svc = unpaid.json()["accepts"][0]["svc"]
        assert (svc["planId"], svc["subscriptionScheme"], svc["interval"]) == (plan, True, PERIOD)
        assert (await http.get("/v1/resource", headers={"X-Svc-Sub": sub_id})).json() == {
            "served": "/v1/resource"
        }

        await client.pause(sub_id, subscriber)
        paused = await http.get("/v1/resource", headers={"X-Svc-Sub": sub_id})
        assert paused.status_code == 402 and paused.json()["error"] == "SubscriptionNotActive"
        assert "Paused" in paused.json()["message"]

        stranger = await http.get("/v1/resource", headers={"X-Svc-Sub": str(Keypair().pubkey())})
        assert stranger.status_code == 402 and stranger.json()["error"] == "SubscriptionNotActive"
        malformed = await http.get("/v1/resource", headers={"X-Svc-Sub": "not-an-id"})
        assert malformed.status_code == 400


async def test_another_plans_subscription_does_not_pass(
    chain: Chain, client: BillingClient
) -> None:
    http, _, _, _ = await setup(chain, client)
    _, _, _, other_sub = await setup(chain, client)  # active, but for another provider's plan
    async with http:
        reply = await http.get("/v1/resource", headers={"X-Svc-Sub": other_sub})
        assert reply.status_code == 402 and reply.json()["error"] == "SubscriptionNotActive"


async def test_metered_use_is_deducted_until_the_cap_then_402(
    chain: Chain, client: BillingClient
) -> None:
    http, _, subscriber, sub_id = await setup(chain, client)
    async with http:
        for _ in range(2):
            assert (
                await http.post("/v1/process", headers={"X-Svc-Sub": sub_id})
            ).status_code == 200
        allowance = await client.fetch_allowance(sub_id)
        assert allowance is not None and allowance.used == USDC  # deducted on chain

        exhausted = await http.post("/v1/process", headers={"X-Svc-Sub": sub_id})
        assert exhausted.status_code == 402 and exhausted.json()["error"] == "AllowanceExhausted"
        assert "raise the overage limit or upgrade the plan" in exhausted.json()["message"]

        await client.increase_allowance(sub_id, USDC, subscriber)
        assert (await http.post("/v1/process", headers={"X-Svc-Sub": sub_id})).status_code == 200


async def test_a_subscription_without_an_allowance_is_metered_once_its_subscriber_adds_one(
    chain: Chain, client: BillingClient
) -> None:
    """As after `svcpay pay --yes` subscribed with no allowance (issue 38): the metered
    route says how to add one, and serves (and deducts) once the subscriber has."""
    http, plan, _, _ = await setup(chain, client)
    payer = chain.funded_keypair()
    state = await client.fetch_plan(Pubkey.from_string(plan))
    assert state is not None
    mint = state.mint
    chain.token_account(payer.pubkey(), mint, 20 * USDC)
    sub_id = await client.subscribe(plan, payer)
    async with http:
        refused = await http.post("/v1/process", headers={"X-Svc-Sub": str(sub_id)})
        assert refused.status_code == 402 and refused.json()["error"] == "AllowanceExhausted"
        assert "has no metered allowance" in refused.json()["message"]
        assert "svcpay subscription allowance" in refused.json()["message"]

        await client.set_allowance(sub_id, USDC, payer)
        served = await http.post("/v1/process", headers={"X-Svc-Sub": str(sub_id)})
        assert served.status_code == 200, served.text
    allowance = await client.fetch_allowance(sub_id)
    assert allowance is not None and (allowance.cap, allowance.used) == (USDC, USDC // 2)


async def test_a_failed_metered_request_is_not_deducted(
    chain: Chain, client: BillingClient
) -> None:
    """A handler that answers 500 or raises costs the subscriber nothing; the next good
    request is deducted as usual (so the meter did run)."""
    http, _, _, sub_id = await setup(chain, client)
    async with http:
        for path in ("/v1/broken", "/v1/raises"):
            failed = await http.post(path, headers={"X-Svc-Sub": sub_id})
            assert failed.status_code == 500
        allowance = await client.fetch_allowance(sub_id)
        assert allowance is not None and allowance.used == 0
        assert (await http.post("/v1/process", headers={"X-Svc-Sub": sub_id})).status_code == 200
        allowance = await client.fetch_allowance(sub_id)
        assert allowance is not None and allowance.used == USDC // 2
