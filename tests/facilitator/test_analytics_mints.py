"""Analytics in several mints (docs/adr/0044): an event knows its mint (its own, its plan's
or its session's), and amounts of different mints are never added: a report is of one mint
and lists the others beside it. Issue 38: "Analytics add base units across different
mints"."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from svcpay.facilitator.analytics import chart_title, report
from svcpay.facilitator.store import Store
from svcpay.protocol.stablecoins import mint_of
from tests.facilitator.test_analytics import (
    D0,
    DAY,
    HOUR,
    PA1,
    PAY_A,
    PAY_B,
    PB1,
    M,
    deducted,
    paid,
    plan_created,
    providers,
    renewed,
    session_event,
    sub_created,
    vol,
)
from tests.facilitator.test_dashboard import login
from tests.support.facilitator_app import ProviderApp, provider_app

pytestmark = pytest.mark.anyio

USDC = mint_of("USDC", "solana-mainnet")
PYUSD = mint_of("PYUSD", "solana-mainnet")
assert USDC is not None and PYUSD is not None


async def two_mints(store: Store) -> tuple[str, str]:
    """Provider A sells plan PA1 in USDC, provider B plan PB1, one-time calls and a session
    in PYUSD; A also takes one payment in PYUSD."""
    a, b = await providers(store)
    await store.events.add_many(  # one batch: a plan's later events find it in the batch
        [
            plan_created(PA1, D0 - DAY, 10 * M, 30 * DAY, mint=USDC),
            sub_created("S1", PA1, D0 + HOUR, 10 * M),
            plan_created(PB1, D0 - DAY, 5 * M, 30 * DAY, mint=PYUSD),
        ]
    )
    for e in [  # one at a time: the store finds each plan's and session's mint
        deducted("S1", D0 + 2 * HOUR, 100_000),  # names no plan: the store finds it
        sub_created("S2", PB1, D0 + 3 * HOUR, 5 * M),
        renewed("S2", PB1, D0 + DAY, 5 * M),
        paid(PAY_A, D0 + DAY, 1 * M, mint=USDC),
        paid(PAY_A, D0 + DAY, 7 * M, mint=PYUSD),
        paid(PAY_B, D0 + DAY, 2 * M, mint=PYUSD),
        paid(PAY_B, D0 + DAY + HOUR, 3 * M, mint=PYUSD),
        session_event("session.opened", "C1", D0 + DAY, {"recipient": PAY_B, "mint": PYUSD}),
        session_event("session.redeemed", "C1", D0 + DAY + HOUR, {"amount": 400_000}),
    ]:
        assert await store.events.add(e)
    return a, b


async def test_every_event_records_its_mint(store: Store) -> None:
    await two_mints(store)
    mints = {(e.type, e.subscription or e.session or e.data.get("payTo"), e.mint)
             for e in await store.events.read(None)}  # fmt: skip
    assert {m for t, _, m in mints if t == "subscription.created"} == {USDC, PYUSD}
    assert ("allowance.deducted", "S1", USDC) in mints
    assert ("subscription.renewed", "S2", PYUSD) in mints
    assert ("session.redeemed", "C1", PYUSD) in mints
    assert ("payment.settled", PAY_A, USDC) in mints and ("payment.settled", PAY_A, PYUSD) in mints


async def test_events_stored_before_their_plans_or_sessions_opening_get_its_mint(
    store: Store,
) -> None:
    """The facilitator records its own renewals and redeems at once; the indexer may reach
    the plan's plan.created or the session's session.opened later. Those give their mint
    to what came before (and a payment of another plan keeps its own)."""
    await providers(store)
    for e in [
        renewed("S1", PA1, D0, 10 * M),
        session_event("session.redeemed", "C1", D0 + HOUR, {"amount": 300_000}),
        renewed("S2", PB1, D0 + HOUR, 5 * M),  # PB1's opening never comes
    ]:
        assert await store.events.add(e)
    assert {e.mint for e in await store.events.read(None)} == {None}
    assert await store.events.add(plan_created(PA1, D0 - DAY, 10 * M, 30 * DAY, mint=USDC))
    opened = session_event("session.opened", "C1", D0, {"recipient": PAY_B, "mint": PYUSD})
    assert await store.events.add(opened)
    mints = {(e.type, e.plan or e.session): e.mint for e in await store.events.read(None)}
    assert mints[("subscription.renewed", PA1)] == USDC
    assert mints[("session.redeemed", "C1")] == PYUSD
    assert mints[("subscription.renewed", PB1)] is None
    got = await report(store, provider_id=None, start=D0, end=D0 + DAY)
    # one payment each: a known mint is the default (ties by address), never the unknown one
    assert got["mint"] == PYUSD
    assert {row["mint"] for row in got["mints"]} == {USDC, PYUSD, None}


async def test_amounts_of_different_mints_are_never_added(store: Store) -> None:
    a, b = await two_mints(store)
    end = D0 + 2 * DAY
    got = await report(store, provider_id=None, start=D0, end=end)
    assert json.loads(json.dumps(got)) == got
    # PYUSD had the most payments: the report is of PYUSD, and USDC is listed beside it
    assert got["mint"] == PYUSD
    assert got["mints"] == [
        {"mint": PYUSD, **vol(22_400_000, 6)},
        {"mint": USDC, **vol(11_100_000, 3)},
    ]
    assert {k: got["totals"][k] for k in ("volume", "payments")} == {
        "volume": "22400000", "payments": 6,
    }  # fmt: skip
    assert got["totals"]["byMode"]["session"] == vol(400_000, 1)
    assert got["totals"]["byMode"]["metered"] == vol(0, 0)  # S1's usage was in USDC
    assert [d["volume"] for d in got["days"]] == ["5000000", "17400000"]
    assert got["byPlan"] == [{"plan": PB1, **vol(10 * M, 2)}]
    assert [(p["provider"], p["volume"]) for p in got["byProvider"]] == [
        (b, "15400000"), (a, "7000000"),
    ]  # fmt: skip
    assert got["subscriptions"] == {"active": 1, "new": 1, "churned": 0}
    assert got["recurringRevenue"]["monthly"] == str(5 * M)
    assert sorted(got["recurringRevenue"]["byMint"], key=lambda r: r["monthly"]) == [
        {"mint": USDC, "monthly": str(10 * M)}, {"mint": PYUSD, "monthly": str(5 * M)},
    ]  # fmt: skip

    usdc = await report(store, provider_id=None, start=D0, end=end, mint=USDC)
    assert usdc["mint"] == USDC and usdc["mints"] == got["mints"]
    assert {k: usdc["totals"][k] for k in ("volume", "payments")} == {
        "volume": "11100000", "payments": 3,
    }  # fmt: skip
    assert usdc["totals"]["byMode"]["metered"] == vol(100_000, 1)
    assert usdc["byPlan"] == [{"plan": PA1, **vol(10_100_000, 2)}]
    assert [(p["provider"], p["volume"]) for p in usdc["byProvider"]] == [(a, "11100000")]
    assert usdc["subscriptions"] == {"active": 1, "new": 1, "churned": 0}
    assert usdc["recurringRevenue"]["monthly"] == str(10 * M)
    assert chart_title(usdc) == "svcpay: 2024-03-01 to 2024-03-02, USDC"

    # a provider's default is its own most-paid mint: A took 2 USDC payments and 1 PYUSD
    mine = await report(store, provider_id=a, start=D0, end=end)
    assert mine["mint"] == USDC
    assert mine["mints"] == [{"mint": USDC, **vol(11_100_000, 3)}, {"mint": PYUSD, **vol(7 * M, 1)}]
    none = await report(store, provider_id=a, start=D0, end=end, mint="Nowhere1111")
    assert none["totals"]["payments"] == 0 and none["recurringRevenue"]["monthly"] == "0"


@pytest.fixture
async def target(tmp_path: Path) -> AsyncIterator[ProviderApp]:
    app = await provider_app("http://127.0.0.1:9", tmp_path)  # analytics never call RPC
    try:
        yield app
    finally:
        await app.service.aclose()


async def test_the_api_reports_the_mint_asked_for_and_refuses_a_bad_one(
    target: ProviderApp,
) -> None:
    store = target.service.store
    await store.providers.add_resource(target.provider_id, "payTo", PAY_A)
    for mint, amount in ((USDC, 1 * M), (PYUSD, 2 * M), (PYUSD, 3 * M)):
        assert await store.events.add(paid(PAY_A, D0 + HOUR, amount, mint=mint))
    transport = httpx.ASGITransport(app=target.app)
    async with httpx.AsyncClient(transport=transport, base_url="http://f") as http:
        q = "/v1/analytics?from=2024-03-01&to=2024-03-01"
        default = (await http.get(q, headers=target.auth)).json()
        assert (default["mint"], default["totals"]["volume"]) == (PYUSD, "5000000")
        usdc = (await http.get(f"{q}&mint={USDC}", headers=target.auth)).json()
        assert (usdc["mint"], usdc["totals"]["volume"]) == (USDC, "1000000")
        bad = await http.get(f"{q}&mint=USDC%20please", headers=target.auth)
        assert bad.status_code == 400, bad.text
        assert "mint must be a base58 Solana address" in bad.text
        assert (await login(http, target.api_key)).status_code == 303
        page = await http.get(f"/dashboard/?from=2024-03-01&to=2024-03-01&mint={USDC}")
        assert page.status_code == 200, page.text
        assert "in USDC" in page.text and "also paid in PYUSD (5.00, 2 payments)" in page.text
        assert f'<option value="{USDC}" selected>USDC</option>' in page.text
        hostile = await http.get("/dashboard/?mint=%3Cscript%3E")
        assert hostile.status_code == 200 and "not a mint address" in hostile.text
        assert "<script>" not in hostile.text
