"""The demo's HTTP part: the spec's three flows through a real gate, facilitator and client.

The provider's API (GET /v1/data one-time 0.50 USDC, GET /v1/resource by subscription,
POST /v1/process metered), the facilitator (POST /authorize) and the paying client run in
this process as ASGI apps over httpx; payments settle on the local validator.
"""

from __future__ import annotations

import base64
import json
import os
import tempfile
from dataclasses import dataclass

import httpx
from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Confirmed
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from spl.token.instructions import get_associated_token_address
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from svcpay.amounts import format_amount
from svcpay.client import PaymentAuth
from svcpay.facilitator.app import create_app
from svcpay.facilitator.config import FacilitatorConfig
from svcpay.facilitator.service import Facilitator
from svcpay.gate import OneTime, Subscription, payment_gate
from svcpay.gate.chain import ChainMeter, ChainSubscriptions
from svcpay.gate.pricing import Terms
from svcpay.localnet.chain import Chain
from svcpay.program import pda
from svcpay.program.client import BillingClient
from svcpay.protocol.memo import Memos
from svcpay.protocol.replay import MemoryReplayStore

USDC = 10**6
DAY = 86_400


@dataclass
class Provider:
    keypair: Keypair
    facilitator: Keypair
    mint: Pubkey
    destination: Pubkey
    plan: Pubkey


def show_json(label: str, value: object) -> None:
    text = json.dumps(value, indent=2)
    print(f"   {label}:")
    print("\n".join("     " + line for line in text.splitlines()))


async def api_handler(request: Request) -> JSONResponse:
    return JSONResponse({"data": "the resource", "path": request.url.path})


async def run(chain: Chain, url: str, provider: Provider, client: Keypair) -> None:
    billing = BillingClient.connect(url)
    rpc = AsyncClient(url, commitment=Confirmed)
    tmp = tempfile.TemporaryDirectory(prefix="svcpay-demo-")
    service = Facilitator(
        FacilitatorConfig(
            keypair=provider.facilitator,
            rpc_url=url,
            database_url=f"sqlite:///{tmp.name}/facilitator.db",
        )
    )
    facilitator = httpx.AsyncClient(
        transport=httpx.ASGITransport(app=create_app(service, background=False)),
        base_url="http://facilitator",
    )
    plan = str(provider.plan)
    gate = payment_gate(
        Starlette(routes=[Route("/v1/data", api_handler), Route("/v1/resource", api_handler),
                          Route("/v1/process", api_handler, methods=["POST"])]),
        pricing={
            "/v1/data": [OneTime(USDC // 2)],
            "/v1/resource": [Subscription(plan, 10 * USDC, 30 * DAY)],
            "/v1/process": [Subscription(plan, 10 * USDC, 30 * DAY, metered=USDC // 2)],
        },
        terms=Terms(pay_to=str(provider.destination), token=str(provider.mint), facilitator="http://facilitator"),
        memos=Memos(os.urandom(32)),
        trusted_facilitators={str(provider.facilitator.pubkey())},
        replay=MemoryReplayStore(),
        subscriptions=ChainSubscriptions(billing, ttl=0),
        meter=ChainMeter(billing, provider.facilitator),
    )  # fmt: skip
    wallet = chain.token_state(chain_token(client, provider.mint))
    auth = PaymentAuth(client, rpc=rpc, facilitator=facilitator, max_per_request=USDC)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=gate), base_url="http://api"
    ) as api:
        print("\n── 4. One-time payment over HTTP 402: GET /v1/data (0.50 USDC)")
        unpaid = await api.get("/v1/data")
        print(f"   GET /v1/data -> {unpaid.status_code}")
        show_json("402 body", unpaid.json())
        paid = await api.get("/v1/data", auth=auth)
        proof = json.loads(base64.b64decode(paid.request.headers["X-PAYMENT"]))
        print("   the client signed a TransferChecked + memo; the facilitator paid the fee,")
        print("   settled it on chain and signed:")
        show_json("proof (sent base64 in X-PAYMENT)", proof)
        print(f"   GET /v1/data with X-PAYMENT -> {paid.status_code} {paid.json()}")
        replay = await api.get("/v1/data", headers={"X-PAYMENT": paid.request.headers["X-PAYMENT"]})
        refusal = replay.json()
        why = f"{refusal['error']}: {refusal['message']}"
        print(f"   the same proof again -> {replay.status_code} {why}")
        after = chain.token_state(chain_token(client, provider.mint))["amount"]
        print(f"   client paid {format_amount(wallet['amount'] - after)}")

        print("\n── 5. Subscription over HTTP: GET /v1/resource with X-Svc-Sub")
        sub_id = str(chain_subscription(provider.plan, client))
        unpaid = await api.get("/v1/resource")
        svc = unpaid.json()["accepts"][0]["svc"]
        print(f"   without X-Svc-Sub -> {unpaid.status_code}, svc: {svc}")
        served = await api.get("/v1/resource", headers={"X-Svc-Sub": sub_id})
        print(f"   X-Svc-Sub: {sub_id} -> {served.status_code} {served.json()}")

        print("\n── 6. Metered over HTTP: POST /v1/process (0.50 USDC per call from the allowance)")
        await billing.increase_allowance(sub_id, USDC, client)  # step 3 used the first 2 USDC
        print("   the client raised its cap from 2 to 3 USDC (1 USDC left in this cycle)")
        for call in range(1, 4):
            reply = await api.post("/v1/process", headers={"X-Svc-Sub": sub_id})
            note = (
                reply.json().get("message", "")
                if reply.status_code == 402
                else "served, usage deducted"
            )
            print(f"   call {call} -> {reply.status_code} {note}")
        await billing.increase_allowance(sub_id, USDC, client)
        reply = await api.post("/v1/process", headers={"X-Svc-Sub": sub_id})
        print(f"   after raising the cap by 1 USDC -> {reply.status_code}")
    await facilitator.aclose()
    await service.aclose()
    tmp.cleanup()
    await billing.close()
    await rpc.close()


def chain_token(owner: Keypair, mint: Pubkey) -> Pubkey:
    return get_associated_token_address(owner.pubkey(), mint)


def chain_subscription(plan: Pubkey, owner: Keypair) -> Pubkey:
    return pda.subscription_address(plan, owner.pubkey())
