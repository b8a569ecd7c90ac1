"""Every route with the database down, and with the RPC node down: a JSON 503 with
Retry-After where the route needs what is down (never a 500, never plain text), one log
line per outage, and the same request answered once it is back (issue 28)."""

from __future__ import annotations

import base64
import logging
import re
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
import sqlalchemy.exc

from svcpay.client import build_payment
from svcpay.localnet.process import Localnet
from svcpay.protocol.headers import NETWORK_MAINNET, SCHEME_EXACT
from svcpay.protocol.models import PaymentOption
from svcpay.protocol.proof import PaymentProof
from tests.facilitator.test_x402 import PRICE, Market, open_market
from tests.support.chain import Chain
from tests.support.postgres import PostgresCluster
from tests.support.switch import Switch

pytestmark = pytest.mark.anyio
DB_DOWN, RPC_DOWN = "DatabaseUnavailable", "RpcUnavailable"


@pytest.fixture
def own_postgres() -> Iterator[PostgresCluster]:
    """A server of this test's own, to kill and restart."""
    with PostgresCluster(durable=True) as cluster:
        yield cluster


async def authorize_body(m: Market) -> dict[str, Any]:
    """A signed svcpay payment of PRICE to the market's payTo, ready for POST /authorize."""
    wallet = m.chain.funded_keypair()
    m.chain.token_account(wallet.pubkey(), m.mint, 2 * PRICE)
    option = PaymentOption(
        scheme=SCHEME_EXACT, network=NETWORK_MAINNET, token=str(m.mint), amount=str(PRICE),
        pay_to=str(m.ata), memo="degraded",
    )  # fmt: skip
    tx = await build_payment(m.fac.rpc, wallet, option, m.fac.fee_payer.pubkey())
    return {
        "signedPayment": base64.b64encode(tx).decode(),
        "paymentRequirements": option.to_json_dict(),
    }


async def every_route(m: Market, key: str) -> dict[str, httpx.Response]:
    """One request to each route, as a client or provider would send it."""
    http, auth = m.fac.http, {"Authorization": f"Bearer {key}"}
    sub = str(m.chain.funded_keypair().pubkey())
    proof = {"proof": {"version": "1", "network": NETWORK_MAINNET, "transaction": "1" * 64,
                       "payer": sub, "payTo": sub, "token": sub, "amount": "1", "memo": "",
                       "issuedAt": 0, "expiresAt": 1 << 40, "facilitator": m.fac.key,
                       "signature": "1" * 64}}  # fmt: skip
    usage = {"subscription": sub, "amount": 1, "idempotencyKey": "k1"}
    calls: dict[str, Any] = {
        "authorize": http.post("/authorize", json=await authorize_body(m)),
        "verify x402": http.post("/verify", json=m.v2(await m.payment())),
        "verify proof": http.post("/verify", json=proof),
        "settle": http.post("/settle", json=m.v2(await m.payment())),
        "supported": http.get("/supported"),
        "health": http.get("/health"),
        "openapi": http.get("/openapi.json"),
        "usage": http.post("/v1/usage", json=usage, headers=auth),
        "events": http.get("/v1/events", headers=auth),
        "webhooks": http.get("/v1/webhooks", headers=auth),
        "webhook add": http.post(
            "/v1/webhooks", json={"url": "https://example.com/hook"}, headers=auth
        ),
        "webhook delete": http.delete("/v1/webhooks/we_x", headers=auth),
        "deliveries": http.get("/v1/webhooks/we_x/deliveries", headers=auth),
        "analytics": http.get("/v1/analytics", headers=auth),
    }
    return {name: await call for name, call in calls.items()}


DASHBOARD_PAGES = ["/dashboard/", "/dashboard/subscriptions", "/dashboard/events",
                   "/dashboard/webhooks", "/dashboard/keys", "/dashboard/sessions"]  # fmt: skip


async def dashboard_session(m: Market, key: str) -> httpx.AsyncClient:
    """The facilitator's client, logged in to the dashboard with `key` (its cookie kept)."""
    login = await m.fac.http.get("/dashboard/login")
    csrf = re.search(r'name="csrf" value="([^"]+)"', login.text)
    assert csrf, login.text
    answer = await m.fac.http.post("/dashboard/login", data={"csrf": csrf.group(1), "api_key": key})
    assert answer.status_code == 303, answer.text
    return m.fac.http


def assert_unavailable(reply: httpx.Response, name: str) -> None:
    assert reply.status_code == 503, reply.text
    assert reply.headers["content-type"] == "application/json"
    assert reply.json()["error"] == name
    assert int(reply.headers["retry-after"]) > 0


def outage_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage().split(":")[0]
        for r in caplog.records
        if r.levelno >= logging.WARNING and r.name.startswith("svcpay")
    ]


@pytest.fixture
async def market(validator: Localnet, chain: Chain) -> AsyncIterator[Market]:
    async with open_market(validator, chain) as m:
        yield m


@pytest.fixture
async def pg_market(
    validator: Localnet, chain: Chain, own_postgres: PostgresCluster
) -> AsyncIterator[Market]:
    async with open_market(validator, chain, database_url=own_postgres.url) as m:
        yield m


async def test_with_the_database_down_every_route_is_a_json_503_then_works_again(
    pg_market: Market, own_postgres: PostgresCluster, caplog: pytest.LogCaptureFixture
) -> None:
    m = pg_market
    _, key = await m.fac.service.store.api_keys.create(m.provider_id)
    pages = await dashboard_session(m, key)
    caplog.set_level(logging.INFO)
    own_postgres.kill()
    replies = await every_route(m, key)
    for page in DASHBOARD_PAGES:  # the provider's pages: HTML for people, the same 503
        reply = await pages.get(page)
        assert reply.status_code == 503, (page, reply.text)
        assert reply.headers["content-type"].startswith("text/html")
        assert int(reply.headers["retry-after"]) > 0
        assert "database is unreachable" in reply.text and "Traceback" not in reply.text

    needs_no_database = {"supported", "openapi", "health", "verify proof"}
    for name, reply in replies.items():
        if name in needs_no_database:
            continue
        assert_unavailable(reply, DB_DOWN)
    assert replies["supported"].status_code == 200 and replies["openapi"].status_code == 200
    health = replies["health"]
    assert health.status_code == 503 and health.json()["database"] == "unreachable"
    assert health.headers["retry-after"]
    assert not any(r.exc_info for r in caplog.records if r.levelno >= logging.INFO)
    assert outage_lines(caplog) == ["database unreachable"]  # one line for all of them

    own_postgres.restart()
    body = await authorize_body(m)
    again = await m.fac.http.post("/authorize", json=body)
    assert again.status_code == 200, again.text
    assert PaymentProof.model_validate(again.json()).signature_valid()
    back = await pages.get("/dashboard/subscriptions")  # the same session, the page again
    assert back.status_code == 200, back.text


async def test_a_payment_that_landed_gets_its_proof_though_recording_it_failed(
    market: Market, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The database fails between the transfer landing and its record: the chain holds
    the money, so the client gets its proof; recovery records the payment once."""
    settlements = market.fac.service.store.settlements
    real_finish = settlements.finish

    async def database_gone(*args: object, **kwargs: object) -> Any:
        raise sqlalchemy.exc.OperationalError("UPDATE", {}, OSError("server closed"))

    monkeypatch.setattr(settlements, "finish", database_gone)
    body = await authorize_body(market)
    reply = await market.fac.http.post("/authorize", json=body)
    assert reply.status_code == 200, reply.text
    proof = PaymentProof.model_validate(reply.json())
    assert proof.signature_valid() and market.received() == PRICE
    assert (await settlements.get(proof.transaction))["status"] == "sending"  # type: ignore[index]

    monkeypatch.setattr(settlements, "finish", real_finish)
    assert await market.fac.service.settler.recover(older_than_secs=0) == 1
    assert len(await market.settled_events()) == 1
    again = await market.fac.http.post("/authorize", json=body)  # the client's retry
    assert again.status_code == 200 and again.json()["transaction"] == proof.transaction
    assert market.received() == PRICE  # paid once


@pytest.fixture
async def rpc_market(validator: Localnet, chain: Chain, switch: Switch) -> AsyncIterator[Market]:
    async with open_market(validator, chain, rpc_url=switch.url) as m:
        yield m


async def test_with_the_rpc_down_routes_that_need_it_are_a_json_503(
    rpc_market: Market, switch: Switch, caplog: pytest.LogCaptureFixture
) -> None:
    m = rpc_market
    _, key = await m.fac.service.store.api_keys.create(m.provider_id)
    bodies = [await authorize_body(m), m.v2(await m.payment()), m.v2(await m.payment())]
    caplog.set_level(logging.INFO)
    await switch.off()
    http = m.fac.http
    replies = {
        "authorize": await http.post("/authorize", json=bodies[0]),
        "verify x402": await http.post("/verify", json=bodies[1]),
        "settle": await http.post("/settle", json=bodies[2]),
    }
    for reply in replies.values():
        assert_unavailable(reply, RPC_DOWN)
    auth = {"Authorization": f"Bearer {key}"}
    usage = await http.post(
        "/v1/usage",
        json={"subscription": str(m.merchant), "amount": 1, "idempotencyKey": "k"},
        headers=auth,
    )
    assert_unavailable(usage, RPC_DOWN)
    health = await http.get("/health")
    assert health.status_code == 503 and health.json()["rpc"] == "unreachable"
    for path in ("/v1/events", "/v1/webhooks", "/v1/analytics"):  # the database suffices
        assert (await http.get(path, headers=auth)).status_code == 200
    assert outage_lines(caplog) == ["rpc unreachable"]
    assert not any(r.exc_info for r in caplog.records if r.levelno >= logging.INFO)

    await switch.on()  # the same requests, once it is back
    paid = await http.post("/authorize", json=bodies[0])
    assert paid.status_code == 200, paid.text
    settled = await http.post("/settle", json=bodies[2])
    assert settled.status_code == 200 and settled.json()["success"] is True, settled.text
    assert m.received() == 2 * PRICE
