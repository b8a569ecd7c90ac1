"""An x402 payment refused after its blockhash expired unsent (issue 37; docs/adr/0036):
PaymentAuth signs a new one only when the first can never land (the chain is past its
blockhash's last valid height) and did not (no transaction with its message on the payer's
token account). The gate and a small x402 facilitator (tests/support/x402_facilitator.py)
run on the local validator; a front before the facilitator decides the first settle."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Awaitable, Callable

import httpx
import pytest
from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Confirmed
from solders.transaction import VersionedTransaction
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import Receive, Scope, Send

from svcpay.client import PaymentAuth, PaymentRefused
from svcpay.program.client import BillingClient
from svcpay.protocol.replay import MemoryReplayStore
from tests.gate.test_x402 import PRICE, World, gate_for
from tests.gate.test_x402 import world as world  # noqa: F401 (the fixture)
from tests.support.billing import USDC
from tests.support.chain import Chain

pytestmark = pytest.mark.anyio
FirstSettle = Callable[[VersionedTransaction, bytes], Awaitable[Response]]


async def past_its_lifetime(chain: Chain, tx: VersionedTransaction) -> None:
    """Returns once the chain's block height is past the last valid height of `tx`'s
    blockhash: by travelling where the validator can, else by waiting (100 ms slots)."""
    rpc = AsyncClient(chain.url)
    try:
        valid = chain.rpc("isBlockhashValid", str(tx.message.recent_blockhash),
                          {"commitment": "confirmed"})["value"]  # fmt: skip
        assert valid, "the blockhash should still be valid when the settle arrives"
        height = (await rpc.get_block_height(Confirmed)).value
        target = height + 152  # a blockhash lives 150 blocks
        if chain.can_time_travel:
            slot = (await rpc.get_slot(Confirmed)).value
            chain.rpc("surfnet_timeTravel", {"absoluteSlot": slot + 160})
        while (await rpc.get_block_height(Confirmed)).value <= target:
            await asyncio.sleep(0.2)
    finally:
        await rpc.close()


async def pay_through_a_front(
    world: World, client: BillingClient, first: FirstSettle
) -> tuple[httpx.Response | PaymentRefused, list[bytes]]:
    """GET /v1/data paid by PaymentAuth with x402, the gate's first /settle answered by
    `first(tx, body)`, every other call forwarded; (the answer or the refusal, the bodies
    /settle received)."""
    bodies: list[bytes] = []
    real = world.facilitator_http

    async def front(scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        body = await request.body()
        if request.url.path == "/settle":
            bodies.append(body)
            if len(bodies) == 1:
                encoded = json.loads(body)["paymentPayload"]["payload"]["transaction"]
                tx = VersionedTransaction.from_bytes(base64.b64decode(encoded))
                await (await first(tx, body))(scope, receive, send)
                return
        reply = await real.post(f"http://x402-facilitator{request.url.path}", content=body,
                                headers={"content-type": "application/json"})  # fmt: skip
        await Response(reply.content, reply.status_code, media_type="application/json")(
            scope, receive, send
        )

    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=front), base_url="http://x402-facilitator"
    ) as fronted:
        world.facilitator_http = fronted
        gate = gate_for(world, client, MemoryReplayStore())
        transport = httpx.ASGITransport(app=gate)
        async with (
            AsyncClient(world.chain.url) as rpc,
            httpx.AsyncClient(transport=transport, base_url="http://api") as http,
        ):
            auth = PaymentAuth(world.payer, rpc=rpc, max_per_request=USDC, protocols=("x402",))
            try:
                return await http.get("/v1/data", auth=auth), bodies
            except PaymentRefused as e:
                return e, bodies


def refused(body: bytes) -> JSONResponse:
    network = json.loads(body)["paymentRequirements"]["network"]
    return JSONResponse(
        {"success": False, "errorReason": "transaction_simulation_failed", "network": network}
    )


async def test_a_payment_whose_blockhash_expired_unsent_is_signed_again(
    world: World, client: BillingClient
) -> None:
    """Every send of the first payment was dropped: refused once its blockhash expired. The
    client finds it can never land and did not, signs a new one, and pays once."""

    async def expired(tx: VersionedTransaction, body: bytes) -> Response:
        await past_its_lifetime(world.chain, tx)
        return refused(body)

    answer, bodies = await pay_through_a_front(world, client, expired)
    assert isinstance(answer, httpx.Response) and answer.status_code == 200, answer
    assert len(bodies) == 2 and bodies[0] != bodies[1]  # a new payment, signed again
    assert world.balance() == PRICE  # paid once


async def test_a_refusal_while_the_payment_may_still_land_is_final(
    world: World, client: BillingClient
) -> None:
    """Refused while its blockhash is still valid: the payment may yet land (the server may
    send it), so the client does not sign again; it raises PaymentRefused."""

    async def at_once(tx: VersionedTransaction, body: bytes) -> Response:
        return refused(body)

    answer, bodies = await pay_through_a_front(world, client, at_once)
    assert isinstance(answer, PaymentRefused), answer
    assert "transaction_simulation_failed" in str(answer)
    assert len(bodies) == 1 and world.balance() == 0


async def test_a_payment_that_landed_and_was_refused_is_not_signed_again(
    world: World, client: BillingClient
) -> None:
    """A server that settles the payment, waits out its blockhash and answers that it
    failed: the client finds its transfer on chain and does not pay again."""

    async def landed_then_refused(tx: VersionedTransaction, body: bytes) -> Response:
        reply = await world.facilitator_http.post(
            "/settle", content=body, headers={"content-type": "application/json"}
        )  # through the front: this is not the first settle any more
        assert reply.json()["success"] is True, reply.text
        await past_its_lifetime(world.chain, tx)
        return refused(body)

    answer, bodies = await pay_through_a_front(world, client, landed_then_refused)
    assert isinstance(answer, PaymentRefused), answer
    assert world.balance() == PRICE  # the one that landed, nothing more
    assert len(bodies) == 2 and bodies[0] == bodies[1]  # the front's own forward, no new one
