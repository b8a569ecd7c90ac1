"""The batching usage meter: one transaction per subscription per flush, nothing lost on a
crash, and never a double charge when a crash falls between sending and recording."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx
import pytest
from solders.keypair import Keypair
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import ASGIApp

from svcpay.gate import Subscription, payment_gate
from svcpay.gate import meter as meter_module
from svcpay.gate.chain import ChainSubscriptions
from svcpay.gate.meter import BatchingMeter
from svcpay.gate.pricing import Terms
from svcpay.program.client import BillingClient
from svcpay.protocol.memo import Memos
from svcpay.protocol.replay import MemoryReplayStore
from tests.support.billing import DAY, USDC
from tests.support.chain import Chain

pytestmark = pytest.mark.anyio


async def metered_subscription(
    chain: Chain, client: BillingClient, cap: int = 5 * USDC
) -> tuple[str, Keypair, str, str]:
    """(subscription id, billing authority, plan, destination) with a `cap` allowance."""
    provider, facilitator, subscriber = (
        chain.funded_keypair(),
        chain.funded_keypair(),
        chain.funded_keypair(),
    )
    mint = chain.create_mint()
    destination = chain.token_account(provider.pubkey(), mint)
    chain.token_account(subscriber.pubkey(), mint, 50 * USDC)
    plan = await client.create_plan(
        provider, plan_id=1, mint=mint, destination=destination,
        billing_authority=facilitator.pubkey(), amount=USDC, period_secs=30 * DAY,
    )  # fmt: skip
    sub_id = await client.subscribe(plan, subscriber, max_overage=cap)
    return str(sub_id), facilitator, str(plan), str(destination)


async def used(client: BillingClient, sub_id: str) -> int:
    allowance = await client.fetch_allowance(sub_id)
    assert allowance is not None
    return int(allowance.used)


async def test_usage_is_batched_into_one_deduction(
    chain: Chain, client: BillingClient, tmp_path: Path
) -> None:
    sub_id, authority, _, _ = await metered_subscription(chain, client)
    meter = BatchingMeter(client, authority, tmp_path / "meter.db", max_batch=10)
    for _ in range(3):
        await meter.record(sub_id, 200_000)
    assert (meter.pending(sub_id), await used(client, sub_id)) == (600_000, 0)
    await meter.flush()
    assert (meter.pending(sub_id), await used(client, sub_id)) == (0, 600_000)


async def test_a_use_counts_as_pending_from_the_moment_it_is_recorded(
    client: BillingClient, tmp_path: Path
) -> None:
    """The gate records a use once the response went out; the client's next request can
    arrive while the use is still being written, and must already count it (else a
    sequential client gets past the cap)."""
    meter = BatchingMeter(client, Keypair(), tmp_path / "meter.db")
    recording = asyncio.create_task(meter.record("sub", 100))
    await asyncio.sleep(0)  # record has run up to its write, which waits on a thread
    assert meter.pending("sub") == 100
    await recording
    assert meter.pending("sub") == 100


async def test_a_full_batch_flushes_by_itself(
    chain: Chain, client: BillingClient, tmp_path: Path
) -> None:
    sub_id, authority, _, _ = await metered_subscription(chain, client)
    meter = BatchingMeter(client, authority, tmp_path / "meter.db", max_batch=2)
    await meter.record(sub_id, 100)
    await meter.record(sub_id, 100)
    assert await used(client, sub_id) == 200


async def test_usage_survives_a_crash_before_flushing(
    chain: Chain, client: BillingClient, tmp_path: Path
) -> None:
    sub_id, authority, _, _ = await metered_subscription(chain, client)
    await BatchingMeter(client, authority, tmp_path / "meter.db").record(sub_id, 300)
    restarted = BatchingMeter(client, authority, tmp_path / "meter.db")
    await restarted.close()
    assert await used(client, sub_id) == 300


async def test_a_crash_between_sending_and_recording_charges_once(
    chain: Chain, client: BillingClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sub_id, authority, _, _ = await metered_subscription(chain, client)
    meter = BatchingMeter(client, authority, tmp_path / "meter.db")
    await meter.record(sub_id, 400)

    def crash(self: BatchingMeter, batch: int) -> None:
        raise RuntimeError("process died after the deduction landed")

    monkeypatch.setattr(BatchingMeter, "_finish", crash)
    with pytest.raises(RuntimeError):
        await meter.flush()
    monkeypatch.undo()
    assert await used(client, sub_id) == 400

    restarted = BatchingMeter(client, authority, tmp_path / "meter.db")
    await restarted.close()  # recover: the batch landed, so it is not sent again
    assert (await used(client, sub_id), restarted.pending(sub_id)) == (400, 0)


async def test_a_batch_signed_but_never_sent_is_retried_once_it_cannot_land(
    chain: Chain, client: BillingClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sub_id, authority, _, _ = await metered_subscription(chain, client)
    meter = BatchingMeter(client, authority, tmp_path / "meter.db")
    await meter.record(sub_id, 500)

    async def died(tx: object) -> None:
        raise RuntimeError("process died before sending")

    monkeypatch.setattr(client, "send_signed", died)
    with pytest.raises(RuntimeError):
        await meter.flush()
    monkeypatch.undo()
    restarted = BatchingMeter(client, authority, tmp_path / "meter.db")
    await restarted.flush()
    assert (await used(client, sub_id), restarted.pending(sub_id)) == (0, 500)  # too young to judge
    monkeypatch.setattr(meter_module, "BLOCKHASH_LIFETIME_SECS", 0)
    await restarted.flush()
    assert (await used(client, sub_id), restarted.pending(sub_id)) == (500, 0)


def metered_gate(
    handler: Callable[[Request], Awaitable[JSONResponse]],
    client: BillingClient,
    meter: BatchingMeter,
    plan: str,
    destination: str,
    per_use: int,
) -> ASGIApp:
    """POST /v1/process behind the gate, `per_use` drawn from the plan's allowance."""
    return payment_gate(
        Starlette(routes=[Route("/v1/process", handler, methods=["POST"])]),
        pricing={"/v1/process": [Subscription(plan, USDC, 30 * DAY, metered=per_use)]},
        terms=Terms(pay_to=destination, token=str(Keypair().pubkey())),
        memos=Memos(b"meter-memo-secret-0123456789"),
        trusted_facilitators=set(),
        replay=MemoryReplayStore(),
        subscriptions=ChainSubscriptions(client, ttl=60),
        meter=meter,
    )


async def test_the_gate_counts_pending_usage_against_the_cap(
    chain: Chain, client: BillingClient, tmp_path: Path
) -> None:
    sub_id, authority, plan, destination = await metered_subscription(chain, client, cap=USDC)
    meter = BatchingMeter(client, authority, tmp_path / "meter.db", max_batch=100)

    async def process(request: Request) -> JSONResponse:
        return JSONResponse({"ok": True})

    gate = metered_gate(process, client, meter, plan, destination, per_use=USDC // 2)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=gate), base_url="http://api"
    ) as api:
        codes = [
            (await api.post("/v1/process", headers={"X-Svc-Sub": sub_id})).status_code
            for _ in range(3)
        ]
    assert codes == [200, 200, 402]  # the cap holds before anything is deducted on chain
    await meter.close()
    assert await used(client, sub_id) == USDC


async def test_concurrent_requests_cannot_together_pass_the_cap(
    chain: Chain, client: BillingClient, tmp_path: Path
) -> None:
    sub_id, authority, plan, destination = await metered_subscription(chain, client, cap=USDC)
    meter = BatchingMeter(client, authority, tmp_path / "meter.db", max_batch=100)
    release = asyncio.Event()

    async def slow(request: Request) -> JSONResponse:
        await release.wait()  # every request is admitted before any is recorded
        return JSONResponse({"ok": True})

    gate = metered_gate(slow, client, meter, plan, destination, per_use=USDC // 4)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=gate), base_url="http://api"
    ) as api:
        calls = [
            asyncio.create_task(api.post("/v1/process", headers={"X-Svc-Sub": sub_id}))
            for _ in range(6)
        ]
        await asyncio.sleep(0.5)
        release.set()
        codes = sorted(r.status_code for r in await asyncio.gather(*calls))
    assert codes == [200] * 4 + [402] * 2  # four quarters fit the cap, two do not
    await meter.close()
    assert await used(client, sub_id) == USDC
