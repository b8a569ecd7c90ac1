"""The paying client prefers a subscription when the 402 offers one: it subscribes once
(within its limits) and is then served with X-Svc-Sub, without paying per request."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Confirmed
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from svcpay.client import PaymentAuth, PaymentError, SpendingLimitExceeded
from svcpay.gate import OneTime, Subscription, payment_gate
from svcpay.gate.chain import ChainSubscriptions
from svcpay.gate.pricing import Terms
from svcpay.localnet.process import Localnet
from svcpay.program.client import BillingClient
from svcpay.protocol.memo import Memos
from svcpay.protocol.replay import MemoryReplayStore
from tests.support.billing import DAY, USDC
from tests.support.chain import Chain

pytestmark = pytest.mark.anyio


async def resource(request: Request) -> JSONResponse:
    return JSONResponse({"resource": True})


async def test_the_client_subscribes_once_then_uses_x_svc_sub(
    validator: Localnet, chain: Chain
) -> None:
    billing = BillingClient.connect(validator.url)
    rpc = AsyncClient(validator.url, commitment=Confirmed)
    provider, facilitator, wallet = (
        chain.funded_keypair(),
        chain.funded_keypair(),
        chain.funded_keypair(),
    )
    mint = chain.create_mint()
    destination = chain.token_account(provider.pubkey(), mint)
    wallet_token = chain.token_account(wallet.pubkey(), mint, 25 * USDC)
    plan = await billing.create_plan(
        provider, plan_id=1, mint=mint, destination=destination,
        billing_authority=facilitator.pubkey(), amount=10 * USDC, period_secs=30 * DAY,
    )  # fmt: skip
    gate = payment_gate(
        Starlette(routes=[Route("/v1/resource", resource)]),
        pricing={
            "/v1/resource": [Subscription(str(plan), 10 * USDC, 30 * DAY), OneTime(USDC // 2)]
        },
        terms=Terms(pay_to=str(destination), token=str(mint)),
        memos=Memos(b"e2e-memo-secret-0123456789"),
        trusted_facilitators=set(),
        replay=MemoryReplayStore(),
        subscriptions=ChainSubscriptions(billing, ttl=0),
    )
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=gate), base_url="http://api"
    ) as api:
        unused = httpx.AsyncClient(
            base_url="http://facilitator.invalid"
        )  # never called: no one-time payment
        stingy = PaymentAuth(
            wallet, rpc=rpc, facilitator=unused, billing=billing, max_per_request=5 * USDC
        )
        with pytest.raises(SpendingLimitExceeded):
            await api.get("/v1/resource", auth=stingy)

        auth = PaymentAuth(
            wallet, rpc=rpc, facilitator=unused, billing=billing, max_per_request=10 * USDC
        )
        for _ in range(3):
            reply = await api.get("/v1/resource", auth=auth)
            assert (reply.status_code, reply.json()) == (200, {"resource": True})
        assert list(auth.subscriptions) == [str(plan)]
        assert (
            chain.token_state(wallet_token)["amount"] == 15 * USDC
        )  # one period, not three payments
        await unused.aclose()
    await billing.close()
    await rpc.close()


async def test_the_client_will_not_subscribe_on_terms_that_differ_from_the_plan(
    validator: Localnet, chain: Chain
) -> None:
    """A server advertising a cheap price for an expensive plan gets no subscription: the
    client checks the plan on chain before it subscribes (and reserves what it charges)."""
    billing = BillingClient.connect(validator.url)
    rpc = AsyncClient(validator.url, commitment=Confirmed)
    provider, wallet = chain.funded_keypair(), chain.funded_keypair()
    mint = chain.create_mint()
    destination = chain.token_account(provider.pubkey(), mint)
    wallet_token = chain.token_account(wallet.pubkey(), mint, 2_000 * USDC)
    plan = await billing.create_plan(
        provider, plan_id=1, mint=mint, destination=destination,
        billing_authority=provider.pubkey(), amount=1_000 * USDC, period_secs=30 * DAY,
    )  # fmt: skip
    lying = payment_gate(
        Starlette(routes=[Route("/v1/resource", resource)]),
        pricing={"/v1/resource": [Subscription(str(plan), 1, 30 * DAY)]},  # "1 base unit"
        terms=Terms(pay_to=str(destination), token=str(mint)),
        memos=Memos(b"e2e-memo-secret-0123456789"),
        trusted_facilitators=set(),
        replay=MemoryReplayStore(),
        subscriptions=ChainSubscriptions(billing, ttl=0),
    )
    async with (
        httpx.AsyncClient(transport=httpx.ASGITransport(app=lying), base_url="http://api") as api,
        httpx.AsyncClient(base_url="http://facilitator.invalid") as unused,
    ):
        auth = PaymentAuth(
            wallet, rpc=rpc, facilitator=unused, billing=billing, max_per_request=USDC
        )
        with pytest.raises(PaymentError, match="differ from the plan on chain"):
            await api.get("/v1/resource", auth=auth)
    assert chain.token_state(wallet_token)["amount"] == 2_000 * USDC  # nothing was charged
    await billing.close()
    await rpc.close()


async def test_the_client_uses_a_subscription_the_wallet_already_holds(
    validator: Localnet, chain: Chain
) -> None:
    """A wallet that subscribed elsewhere (another process, the CLI) is served with that
    subscription: the client finds it on chain instead of failing to subscribe again."""
    billing = BillingClient.connect(validator.url)
    rpc = AsyncClient(validator.url, commitment=Confirmed)
    provider, wallet = chain.funded_keypair(), chain.funded_keypair()
    mint = chain.create_mint()
    destination = chain.token_account(provider.pubkey(), mint)
    wallet_token = chain.token_account(wallet.pubkey(), mint, 25 * USDC)
    plan = await billing.create_plan(
        provider, plan_id=1, mint=mint, destination=destination,
        billing_authority=provider.pubkey(), amount=10 * USDC, period_secs=30 * DAY,
    )  # fmt: skip
    held = await billing.subscribe(plan, wallet)
    gate = payment_gate(
        Starlette(routes=[Route("/v1/resource", resource)]),
        pricing={"/v1/resource": [Subscription(str(plan), 10 * USDC, 30 * DAY)]},
        terms=Terms(pay_to=str(destination), token=str(mint)),
        memos=Memos(b"e2e-memo-secret-0123456789"),
        trusted_facilitators=set(),
        replay=MemoryReplayStore(),
        subscriptions=ChainSubscriptions(billing, ttl=0),
    )
    async with (
        httpx.AsyncClient(transport=httpx.ASGITransport(app=gate), base_url="http://api") as api,
        httpx.AsyncClient(base_url="http://facilitator.invalid") as unused,
    ):
        auth = PaymentAuth(
            wallet, rpc=rpc, facilitator=unused, billing=billing, max_per_request=10 * USDC
        )
        reply = await api.get("/v1/resource", auth=auth)
        assert reply.status_code == 200, reply.text
        assert auth.subscriptions == {str(plan): str(held)}
        assert chain.token_state(wallet_token)["amount"] == 15 * USDC  # charged once, earlier

        await billing.pause(held, wallet)  # held but not active: a clear refusal, no charge
        paused = PaymentAuth(
            wallet, rpc=rpc, facilitator=unused, billing=billing, max_per_request=10 * USDC
        )
        with pytest.raises(PaymentError, match="is paused: resume or fund it"):
            await api.get("/v1/resource", auth=paused)
    assert chain.token_state(wallet_token)["amount"] == 15 * USDC
    await billing.close()
    await rpc.close()


def test_a_synchronous_httpx_client_subscribes_within_its_limits(
    validator: Localnet, chain: Chain
) -> None:
    """`PaymentAuth` on `httpx.Client`: the same limit refuses a dear plan, then the client
    subscribes once and is served with X-Svc-Sub."""
    from contextlib import asynccontextmanager

    from starlette.types import ASGIApp

    from svcpay.program import pda
    from tests.cli.conftest import serve
    from tests.support.billing import create_plan_ix

    provider, wallet = chain.funded_keypair(), chain.funded_keypair()
    mint = chain.create_mint()
    destination = chain.token_account(provider.pubkey(), mint)
    wallet_token = chain.token_account(wallet.pubkey(), mint, 25 * USDC)
    chain.send_ok(
        [create_plan_ix(provider.pubkey(), 1, mint, destination, provider.pubkey(),
                        10 * USDC, 30 * DAY)],
        [provider],
    )  # fmt: skip
    plan = str(pda.plan_address(provider.pubkey(), 1))

    @asynccontextmanager
    async def gate_app() -> AsyncIterator[ASGIApp]:
        gate_billing = BillingClient.connect(validator.url)
        yield payment_gate(
            Starlette(routes=[Route("/v1/resource", resource)]),
            pricing={"/v1/resource": [Subscription(plan, 10 * USDC, 30 * DAY)]},
            terms=Terms(pay_to=str(destination), token=str(mint)),
            memos=Memos(b"sync-memo-secret-0123456789"),
            trusted_facilitators=set(),
            replay=MemoryReplayStore(),
            subscriptions=ChainSubscriptions(gate_billing, ttl=0),
        )
        await gate_billing.close()

    def auth(limit: int) -> PaymentAuth:
        return PaymentAuth(
            wallet,
            rpc=AsyncClient(validator.url, commitment=Confirmed),
            facilitator=httpx.AsyncClient(base_url="http://facilitator.invalid"),
            billing=BillingClient.connect(validator.url),
            max_per_request=limit,
        )

    with serve(gate_app) as api_url, httpx.Client(base_url=api_url) as api:
        stingy, enough = auth(5 * USDC), auth(10 * USDC)
        with pytest.raises(SpendingLimitExceeded):
            api.get("/v1/resource", auth=stingy)
        for _ in range(2):
            reply = api.get("/v1/resource", auth=enough)
            assert (reply.status_code, reply.json()) == (200, {"resource": True})
        for a in (stingy, enough):
            assert a.billing is not None
            a.run(a.billing.close())
            a.run(a.rpc.close())
            a.run(a.facilitator.aclose())
            a.close()
    assert chain.token_state(wallet_token)["amount"] == 15 * USDC  # one period
