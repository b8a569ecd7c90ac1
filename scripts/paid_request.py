"""One paid request with an installed svcpay and nothing but its base dependencies
(scripts/install-matrix runs it in each fresh virtualenv): the drop-in validator with the
program, a provider's plan, and a client that meets 402, subscribes within its limits and is
served through the gate with X-Svc-Sub. A subscription needs no facilitator, so no extra.

Usage: python scripts/paid_request.py target/deploy/svc_billing.so
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import httpx
from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Confirmed

import svcpay
from svcpay.client import PaymentAuth
from svcpay.gate import Subscription, payment_gate
from svcpay.gate.asgi import Receive, Scope, Send
from svcpay.gate.chain import ChainSubscriptions
from svcpay.gate.pricing import Terms
from svcpay.localnet.chain import Chain
from svcpay.localnet.process import DROP_IN, localnet
from svcpay.program.client import BillingClient
from svcpay.protocol.memo import Memos
from svcpay.protocol.replay import MemoryReplayStore

USDC = 10**6
DAY = 86_400


async def api(scope: Scope, receive: Receive, send: Send) -> None:
    """The provider's API: one JSON resource (plain ASGI, no framework)."""
    headers = [(b"content-type", b"application/json")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": json.dumps({"resource": True}).encode()})


async def paid_request(url: str) -> str:
    chain = Chain(url)
    billing = BillingClient.connect(url)
    rpc = AsyncClient(url, commitment=Confirmed)
    provider, facilitator, wallet = (chain.funded_keypair() for _ in range(3))
    mint = chain.create_mint()
    destination = chain.token_account(provider.pubkey(), mint)
    chain.token_account(wallet.pubkey(), mint, 25 * USDC)
    try:
        plan = await billing.create_plan(
            provider, plan_id=1, mint=mint, destination=destination,
            billing_authority=facilitator.pubkey(), amount=10 * USDC, period_secs=30 * DAY,
        )  # fmt: skip
        gate = payment_gate(
            api,
            pricing={"/v1/resource": [Subscription(str(plan), 10 * USDC, 30 * DAY)]},
            # The drop-in is its own network (docs/adr/0038): the client checks the terms.
            terms=Terms(pay_to=str(destination), token=str(mint), network="solana-localnet"),
            memos=Memos(os.urandom(32)),
            trusted_facilitators=set(),
            replay=MemoryReplayStore(),
            subscriptions=ChainSubscriptions(billing, ttl=0),
        )
        transport = httpx.ASGITransport(app=gate)
        async with (
            httpx.AsyncClient(transport=transport, base_url="http://api") as http,
            httpx.AsyncClient(base_url="http://facilitator.invalid") as unused,  # never called
        ):
            unpaid = await http.get("/v1/resource")
            assert unpaid.status_code == 402, unpaid.text
            auth = PaymentAuth(
                wallet, rpc=rpc, facilitator=unused, billing=billing, max_per_request=10 * USDC
            )
            paid = await http.get("/v1/resource", auth=auth)
            assert (paid.status_code, paid.json()) == (200, {"resource": True}), paid.text
            return auth.subscriptions[str(plan)]
    finally:
        await billing.close()
        await rpc.close()


def main() -> int:
    program = Path(sys.argv[1]).resolve()
    with localnet(program=program, validator=DROP_IN) as node:
        subscription = asyncio.run(paid_request(node.url))
    print(f"paid request served (subscription {subscription}) by svcpay from {svcpay.__file__}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
