"""GET /health tells a load balancer whether the facilitator can reach its database."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from solders.keypair import Keypair

from svcpay.facilitator import db
from svcpay.facilitator.app import create_app
from svcpay.facilitator.config import FacilitatorConfig
from svcpay.facilitator.service import Facilitator
from svcpay.facilitator.store import Store

pytestmark = pytest.mark.anyio


async def health(store: Store) -> httpx.Response:
    config = FacilitatorConfig(keypair=Keypair(), rpc_url="http://127.0.0.1:1")
    service = Facilitator(config, store=store)
    app = create_app(service, background=False)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://f") as c:
        reply = await c.get("/health")
    await service.aclose()
    return reply


async def test_health_is_ok_with_a_reachable_database(tmp_path: Path) -> None:
    reply = await health(Store.open(f"sqlite:///{tmp_path / 'f.db'}"))
    assert (reply.status_code, reply.json()) == (200, {"status": "ok", "database": "ok"})


async def test_health_is_503_when_the_database_is_unreachable() -> None:
    unreachable = Store(db.create_engine("postgresql://svcpay@127.0.0.1:1/nowhere"))
    reply = await health(unreachable)
    assert reply.status_code == 503 and reply.json()["database"] == "unreachable"
