"""GET /health tells a load balancer whether the facilitator can work: its database and its
RPC node answer, and its fee payer has lamports to pay fees (503 naming what is down)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from solders.keypair import Keypair

from svcpay.facilitator import db
from svcpay.facilitator.api.operations import MIN_FEE_PAYER_LAMPORTS
from svcpay.facilitator.app import create_app
from svcpay.facilitator.config import FacilitatorConfig
from svcpay.facilitator.service import Facilitator
from svcpay.facilitator.store import Store
from svcpay.localnet.process import Localnet
from tests.support.chain import Chain

pytestmark = pytest.mark.anyio

UNREACHABLE_RPC = "http://127.0.0.1:1"


async def health(store: Store, rpc_url: str, keypair: Keypair | None = None) -> httpx.Response:
    config = FacilitatorConfig(keypair=keypair or Keypair(), rpc_url=rpc_url)
    service = Facilitator(config, store=store)
    app = create_app(service, background=False)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://f") as c:
        reply = await c.get("/health")
    await service.aclose()
    return reply


async def test_health_is_ok_with_database_rpc_and_a_funded_fee_payer(
    tmp_path: Path, validator: Localnet, chain: Chain
) -> None:
    payer = chain.funded_keypair()
    reply = await health(Store.open(f"sqlite:///{tmp_path / 'f.db'}"), validator.url, payer)
    body = reply.json()
    assert reply.status_code == 200, body
    assert (body["status"], body["database"], body["rpc"]) == ("ok", "ok", "ok")
    assert body["feePayer"]["address"] == str(payer.pubkey())
    assert body["feePayer"]["lamports"] == chain.balance(payer.pubkey())
    assert body["feePayer"]["status"] == "ok"


async def test_health_is_503_when_the_fee_payer_cannot_pay_fees(
    tmp_path: Path, validator: Localnet
) -> None:
    broke = Keypair()  # never funded: 0 lamports
    reply = await health(Store.open(f"sqlite:///{tmp_path / 'f.db'}"), validator.url, broke)
    body = reply.json()
    assert reply.status_code == 503 and body["status"] == "degraded"
    assert (body["database"], body["rpc"]) == ("ok", "ok")
    assert body["feePayer"]["lamports"] == 0 < MIN_FEE_PAYER_LAMPORTS
    assert body["feePayer"]["status"] == "low"


async def test_health_is_503_when_the_rpc_node_is_unreachable(tmp_path: Path) -> None:
    reply = await health(Store.open(f"sqlite:///{tmp_path / 'f.db'}"), UNREACHABLE_RPC)
    body = reply.json()
    assert reply.status_code == 503 and body["status"] == "degraded"
    assert (body["database"], body["rpc"]) == ("ok", "unreachable")
    assert body["feePayer"]["status"] == "unknown" and body["feePayer"]["lamports"] is None


async def test_health_is_503_when_the_database_is_unreachable(validator: Localnet) -> None:
    unreachable = Store(db.create_engine("postgresql://svcpay@127.0.0.1:1/nowhere"))
    reply = await health(unreachable, validator.url)
    assert reply.status_code == 503 and reply.json()["database"] == "unreachable"
