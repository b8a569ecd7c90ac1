"""Analytics: volume by provider, plan, mode and day; subscriptions; recurring revenue; the PNG.

Every store test runs on SQLite and on PostgreSQL (a schema of its own per test)."""

from __future__ import annotations

import json
import struct
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from svcpay.facilitator.analytics import DAY, chart_png, parse_range, report
from svcpay.facilitator.lifecycle import from_program_event, withdrawal_fees_of
from svcpay.facilitator.store import Event, Store, new_id

pytestmark = pytest.mark.anyio

D0 = int(datetime(2024, 3, 1, tzinfo=UTC).timestamp())  # the range: 2024-03-01 .. 03-07
END = D0 + 7 * DAY
HOUR = 3600
M = 1_000_000  # one token (6 decimals)

PA1, PA2, PX, PB1 = "PlanA1", "PlanA2", "PlanAX", "PlanB1"  # PX: no plan.created event
PAY_A, PAY_B, PAY_NOBODY = "PayToA", "PayToB", "PayToNobody"


def ev(
    kind: str,
    at: int,
    data: dict[str, Any] | None = None,
    *,
    plan: str | None = None,
    sub: str | None = None,
    mode: str | None = None,
    amount: int | None = None,
) -> Event:
    data = dict(data or {})  # the program's events name their plan and subscription
    if plan is not None:
        data["plan"] = plan
    if sub is not None:
        data["subscription"] = sub
    return Event(
        id=new_id("evt"),
        type=kind,
        created_at=at,
        data=data,
        plan=plan,
        subscription=sub,
        mode=mode,
        amount=amount,
    )


def vol(volume: int | str, payments: int, fees: int = 0) -> dict[str, Any]:
    """A report's volume entry: gross, fees withheld, net, payments."""
    return {
        "volume": str(volume),
        "fees": str(fees),
        "net": str(int(volume) - fees),
        "payments": payments,
    }


def plan_created(plan: str, at: int, amount: int, period: int, mint: str = "Mint") -> Event:
    data = {"amount": amount, "periodSecs": period, "mint": mint}
    return ev("plan.created", at, data, plan=plan)


def sub_created(sub: str, plan: str, at: int, amount: int) -> Event:
    data = {"subscriber": "Subscriber" + sub, "amount": amount, "periodStart": at,
            "periodEnd": at + 30 * DAY, "maxOverage": 0, "status": "Active"}  # fmt: skip
    return ev("subscription.created", at, data, plan=plan, sub=sub, mode="subscription",
              amount=amount)  # fmt: skip


def renewed(sub: str, plan: str, at: int, amount: int) -> Event:
    return ev("subscription.renewed", at, {"amount": amount}, plan=plan, sub=sub,
              mode="subscription", amount=amount)  # fmt: skip


def deducted(sub: str, at: int, amount: int) -> Event:  # the store finds the plan
    return ev("allowance.deducted", at, {"amount": amount}, sub=sub, mode="metered",
              amount=amount)  # fmt: skip


def paid(pay_to: str, at: int, amount: int, mint: str = "Mint") -> Event:  # as settled
    data = {"payTo": pay_to, "amount": str(amount), "payer": "Payer", "token": mint}
    return ev("payment.settled", at, data, mode="one-time", amount=amount)


def session_event(kind: str, session: str, at: int, data: dict[str, Any]) -> Event:
    """As the indexer records them: only the opening names the recipient (the provider's
    token account); later events find their provider through the session."""
    amount = data.get("amount") if kind == "session.redeemed" else None
    e = ev(kind, at, {"session": session, **data}, mode="session" if amount else None,
           amount=amount)  # fmt: skip
    return replace(e, session=session)


def cancelled(sub: str, plan: str, at: int, *, at_period_end: bool) -> Event:
    data = {"status": "Active" if at_period_end else "Cancelled",
            "cancelAtPeriodEnd": at_period_end}  # fmt: skip
    return ev("subscription.cancelled", at, data, plan=plan, sub=sub)


def ended(kind: str, sub: str, plan: str, at: int, status: str) -> Event:
    return ev(f"subscription.{kind}", at, {"status": status}, plan=plan, sub=sub)


async def providers(store: Store) -> tuple[str, str]:
    a, b = await store.providers.create("Provider A"), await store.providers.create("Provider B")
    for address in (PA1, PA2, PX):
        await store.providers.add_resource(a, "plan", address)
    await store.providers.add_resource(a, "payTo", PAY_A)
    await store.providers.add_resource(b, "plan", PB1)
    await store.providers.add_resource(b, "payTo", PAY_B)
    return a, b


async def scenario(store: Store) -> tuple[str, str]:
    """Two providers, a week of payments in every mode (see the expectations below)."""
    a, b = await providers(store)
    for e in [
        plan_created(PA1, D0 - 10 * DAY, 10 * M, 30 * DAY),
        plan_created(PA2, D0 - 10 * DAY, 1 * M, 7 * DAY),
        plan_created(PB1, D0 - 10 * DAY, 12 * M, 365 * DAY),
        # before the range: S1 stays, S5 comes and goes; a payment in the last second
        sub_created("S1", PA1, D0 - 5 * DAY, 10 * M),
        sub_created("S5", PA1, D0 - 3 * DAY, 10 * M),
        ended("ended", "S5", PA1, D0 - DAY, "Expired"),
        paid(PAY_A, D0 - 1, 7 * M),
        # day 0
        sub_created("S2", PA1, D0, 10 * M),  # at the very start: in
        paid(PAY_A, D0 + HOUR, 1 * M),
        # day 1
        sub_created("S3", PA2, D0 + DAY + HOUR, 1 * M),
        sub_created("S4", PB1, D0 + DAY + 2 * HOUR, 5 * M),  # a promotional first charge
        # day 2: a renewal, usage, and a cancel at period end (not churn yet)
        renewed("S1", PA1, D0 + 2 * DAY, 10 * M),
        deducted("S2", D0 + 2 * DAY + HOUR, 250_000),
        deducted("S2", D0 + 2 * DAY + 2 * HOUR, 150_000),
        cancelled("S3", PA2, D0 + 2 * DAY + 3 * HOUR, at_period_end=True),
        # day 3: one-time payments to B and to nobody registered; S4 cancelled now
        paid(PAY_B, D0 + 3 * DAY, 2 * M),
        paid(PAY_NOBODY, D0 + 3 * DAY + HOUR, 500_000),
        cancelled("S4", PB1, D0 + 3 * DAY + 2 * HOUR, at_period_end=False),
        # day 4: S4's account closed (churned once, on day 3)
        ended("closed", "S4", PB1, D0 + 4 * DAY, "Cancelled"),
        # day 4: a session paying B, redeemed twice
        session_event("session.opened", "C1", D0 + 4 * DAY, {"recipient": PAY_B, "mint": "Mint"}),
        session_event("session.redeemed", "C1", D0 + 4 * DAY + HOUR, {"amount": 300_000}),
        session_event("session.redeemed", "C1", D0 + 4 * DAY + 2 * HOUR, {"amount": 200_000}),
        # day 5, 6
        sub_created("S6", PX, D0 + 5 * DAY, 3 * M),
        sub_created("S7", PB1, D0 + 6 * DAY + 23 * HOUR, 12 * M),
        # after the range: at the very end, S3's period ends
        paid(PAY_A, END, 9 * M),
        ended("ended", "S3", PA2, END + DAY, "Cancelled"),
    ]:
        assert await store.events.add(e)
    return a, b


def day(
    date: str,
    one_time: int = 0,
    subscription: int = 0,
    metered: int = 0,
    session: int = 0,
    payments: int = 0,
    new: int = 0,
    churned: int = 0,
    active: int = 0,
    fees: int = 0,
) -> dict[str, Any]:
    return {
        "date": date,
        "volume": str(one_time + subscription + metered + session),
        "fees": str(fees),
        "oneTime": str(one_time),
        "subscription": str(subscription),
        "metered": str(metered),
        "session": str(session),
        "payments": payments,
        "newSubscriptions": new,
        "churned": churned,
        "activeSubscriptions": active,
    }


async def test_the_report_for_all_providers(store: Store) -> None:
    a, b = await scenario(store)
    got = await report(store, provider_id=None, start=D0, end=END)
    assert json.loads(json.dumps(got)) == got  # JSON as it is
    assert (got["from"], got["to"], got["start"], got["end"]) == (
        "2024-03-01", "2024-03-07", D0, END,
    )  # fmt: skip
    assert got["provider"] is None
    # S6's plan PX has no plan.created: its mint is unknown, and it is counted apart
    assert got["mint"] == "Mint"
    assert got["mints"] == [
        {"mint": "Mint", **vol(42_400_000, 12)},
        {"mint": None, **vol(3 * M, 1)},
    ]
    assert got["totals"] == {
        **vol(42_400_000, 12),
        "byMode": {
            "oneTime": vol(str(3_500_000), 3),
            "subscription": vol(str(38 * M), 5),
            "metered": vol(str(400_000), 2),
            "session": vol(str(500_000), 2),
        },
    }
    assert got["days"] == [
        day("2024-03-01", one_time=1 * M, subscription=10 * M, payments=2, new=1, active=2),
        day("2024-03-02", subscription=6 * M, payments=2, new=2, active=4),
        day("2024-03-03", subscription=10 * M, metered=400_000, payments=3, active=4),
        day("2024-03-04", one_time=2_500_000, payments=2, churned=1, active=3),
        day("2024-03-05", session=500_000, payments=2, active=3),
        day("2024-03-06", active=3),
        day("2024-03-07", subscription=12 * M, payments=1, new=1, active=4),
    ]
    assert got["byPlan"] == [
        {"plan": PA1, **vol(str(20_400_000), 4)},
        {"plan": PB1, **vol(str(17 * M), 2)},
        {"plan": PA2, **vol(str(1 * M), 1)},
    ]
    assert got["byProvider"] == [
        {"provider": a, "name": "Provider A", **vol(str(22_400_000), 6)},
        {"provider": b, "name": "Provider B", **vol(str(19_500_000), 5)},
        {"provider": None, "name": None, **vol(str(500_000), 1)},
    ]
    # S1, S2, S3 (cancelled at period end, not ended yet), S7; S4 churned, S5 before
    assert got["subscriptions"] == {"active": 4, "new": 4, "churned": 1}
    # 10 + 10 (PA1) + 1 * 30/7 (PA2) + 12 * 30/365; apart: 3 (PX, no plan event: its
    # first charge, in an unknown mint)
    assert got["recurringRevenue"] == {
        "monthly": "25272016",
        "basis": "30-day",
        "byMint": [{"mint": "Mint", "monthly": "25272016"}, {"mint": None, "monthly": "3000000"}],
    }
    unknown = await report(store, provider_id=None, start=D0, end=END, mint=None)
    assert unknown["mint"] == "Mint"  # None asks for the default, not the unknown mint


async def test_a_provider_sees_only_its_own(store: Store) -> None:
    a, b = await scenario(store)
    got_a = await report(store, provider_id=a, start=D0, end=END)
    assert "byProvider" not in got_a and got_a["provider"] == a
    assert got_a["totals"]["volume"] == str(22_400_000) and got_a["totals"]["payments"] == 6
    assert got_a["totals"]["byMode"]["oneTime"] == vol(str(1 * M), 1)
    assert got_a["totals"]["byMode"]["metered"] == vol(str(400_000), 2)
    assert [p["plan"] for p in got_a["byPlan"]] == [PA1, PA2]  # PX: its mint is unknown
    assert got_a["subscriptions"] == {"active": 3, "new": 2, "churned": 0}
    assert got_a["recurringRevenue"]["monthly"] == "24285714"  # 20 + 30/7 tokens
    assert [d["activeSubscriptions"] for d in got_a["days"]] == [2, 3, 3, 3, 3, 3, 3]

    got_b = await report(store, provider_id=b, start=D0, end=END)
    assert got_b["totals"]["volume"] == str(19_500_000) and got_b["totals"]["payments"] == 5
    assert got_b["byPlan"] == [{"plan": PB1, **vol(str(17 * M), 2)}]
    assert got_b["subscriptions"] == {"active": 1, "new": 2, "churned": 1}
    assert got_b["recurringRevenue"]["monthly"] == "986301"  # 12 * 30/365 tokens
    assert [d["churned"] for d in got_b["days"]] == [0, 0, 0, 1, 0, 0, 0]

    nobody = await report(store, provider_id="prov_unknown", start=D0, end=END)
    assert nobody["totals"]["volume"] == "0" and nobody["byPlan"] == []
    assert nobody["subscriptions"] == {"active": 0, "new": 0, "churned": 0}
    assert nobody["recurringRevenue"]["monthly"] == "0"


async def test_a_cancel_at_period_end_churns_when_the_subscription_ends(store: Store) -> None:
    a, _ = await scenario(store)
    got = await report(store, provider_id=a, start=D0 + 7 * DAY, end=D0 + 10 * DAY)
    assert [d["date"] for d in got["days"]] == ["2024-03-08", "2024-03-09", "2024-03-10"]
    assert [d["churned"] for d in got["days"]] == [0, 1, 0]  # S3 ended on day 8
    assert [d["activeSubscriptions"] for d in got["days"]] == [3, 2, 2]
    assert got["subscriptions"] == {"active": 2, "new": 0, "churned": 1}
    assert got["recurringRevenue"]["monthly"] == str(20 * M)  # S1, S2 (PA1); S6 apart
    assert got["totals"]["volume"] == str(9 * M)  # the payment at the earlier range's end
    # the whole history: S5 and S4 churned (S4 once, though cancelled and then closed)
    everything = await report(store, provider_id=None, start=D0 - 30 * DAY, end=D0 + 30 * DAY)
    assert everything["subscriptions"] == {"active": 3, "new": 6, "churned": 3}
    assert everything["totals"]["payments"] == 16  # 14, and two session redeems (S6 apart)
    assert sum(int(d["volume"]) for d in everything["days"]) == 42_400_000 + 7 * M + 9 * M + 20 * M


async def test_ranges_are_half_open_and_may_start_mid_day(store: Store) -> None:
    a, _ = await providers(store)
    for e in [
        paid(PAY_A, D0 + 12 * HOUR - 1, 1),  # before
        paid(PAY_A, D0 + 12 * HOUR, 10),  # first second: in
        paid(PAY_A, D0 + DAY + 5 * HOUR, 100),
        paid(PAY_A, D0 + DAY + 6 * HOUR - 1, 1000),  # last second: in
        paid(PAY_A, D0 + DAY + 6 * HOUR, 10000),  # end: out
    ]:
        await store.events.add(e)
    got = await report(store, provider_id=a, start=D0 + 12 * HOUR, end=D0 + DAY + 6 * HOUR)
    assert (got["from"], got["to"]) == ("2024-03-01", "2024-03-02")
    assert [(d["date"], d["oneTime"], d["payments"]) for d in got["days"]] == [
        ("2024-03-01", "10", 1),
        ("2024-03-02", "1100", 2),
    ]
    one_second = await report(store, provider_id=a, start=D0 + 12 * HOUR, end=D0 + 12 * HOUR + 1)
    assert len(one_second["days"]) == 1 and one_second["totals"]["volume"] == "10"


async def test_an_empty_range_has_every_day_at_zero(store: Store) -> None:
    await scenario(store)
    start = int(datetime(2023, 1, 1, tzinfo=UTC).timestamp())
    got = await report(store, provider_id=None, start=start, end=start + 3 * DAY)
    assert got["days"] == [day("2023-01-01"), day("2023-01-02"), day("2023-01-03")]
    zero = vol("0", 0)
    assert got["totals"] == {
        **zero,
        "byMode": {"oneTime": zero, "subscription": zero, "metered": zero, "session": zero},
    }
    assert got["byPlan"] == [] and got["byProvider"] == []
    assert got["subscriptions"] == {"active": 0, "new": 0, "churned": 0}
    assert got["recurringRevenue"] == {"monthly": "0", "basis": "30-day", "byMint": []}
    assert got["mint"] is None and got["mints"] == []


async def test_fees_a_fee_mint_withheld_are_reported_beside_gross_and_net(store: Store) -> None:
    """Token-2022 transfer-fee mints (docs/adr/0030, 0031): volume stays what payers sent,
    `fees` what the mints withheld, `net` what providers received; events without a fee
    (other mints) count as 0."""
    a, _ = await providers(store)
    for e in [
        plan_created(PA1, D0 - DAY, 10 * M, 30 * DAY),
        replace(sub_created("S1", PA1, D0 + HOUR, 10 * M), fee=10_000),
        replace(renewed("S1", PA1, D0 + DAY, 10 * M), fee=10_000),
        replace(deducted("S1", D0 + DAY + HOUR, 300_000), fee=4_500),
        replace(paid(PAY_A, D0 + 2 * DAY, 304_569), fee=4_569),
        paid(PAY_A, D0 + 2 * DAY + HOUR, 1 * M),  # an SPL Token payment: no fee
    ]:
        assert await store.events.add(e)
    got = await report(store, provider_id=a, start=D0, end=D0 + 3 * DAY)
    fees = 10_000 + 10_000 + 4_500 + 4_569
    assert {k: got["totals"][k] for k in ("volume", "fees", "net", "payments")} == vol(
        20 * M + 300_000 + 304_569 + M, 5, fees
    )
    assert got["totals"]["byMode"]["subscription"] == vol(20 * M, 2, 20_000)
    assert got["totals"]["byMode"]["metered"] == vol(300_000, 1, 4_500)
    assert got["totals"]["byMode"]["oneTime"] == vol(304_569 + M, 2, 4_569)
    assert got["byPlan"] == [{"plan": PA1, **vol(20_300_000, 3, 24_500)}]
    assert [d["fees"] for d in got["days"]] == ["10000", "14500", "4569"]


async def test_the_program_events_fee_reaches_the_events_table(store: Store) -> None:
    """SubscriptionRenewed (and the other payments) carry gross `amount`, `fee` and `net`;
    the lifecycle event keeps them in its data and the fee in its column."""
    a, _ = await providers(store)
    fields = {"subscription": "S1", "plan": PA1, "amount": 10 * M, "fee": 10_000,
              "net": 10 * M - 10_000, "periodStart": D0, "periodEnd": D0 + 30 * DAY,
              "cyclesBilled": 2, "recovered": False}  # fmt: skip
    (event,) = from_program_event("SubscriptionRenewed", fields, signature="sig", index=0, at=D0)
    assert (event.amount, event.fee) == (10 * M, 10_000)
    assert (event.data["fee"], event.data["net"]) == (10_000, 10 * M - 10_000)
    plain = dict(fields, fee=0, net=10 * M)
    (spl,) = from_program_event("SubscriptionRenewed", plain, signature="sig", index=1, at=D0)
    assert spl.fee is None
    await store.events.add_many([event, spl])
    got = await report(store, provider_id=a, start=D0, end=D0 + DAY)
    assert got["totals"]["byMode"]["subscription"] == vol(20 * M, 2, 10_000)


async def test_a_session_redeem_reports_the_fee_of_its_withdrawal() -> None:
    """A session's payout in a transfer-fee mint: the redeem records the claim, the
    withdrawal in the same transaction pays it and the mint withholds its fee there. The
    `session.redeemed` event carries that fee and the net, and the analytics count it
    (issue 38: `(3000, None, None)`, fees 0 instead of 30)."""
    events = [
        ("SessionRedeemed", {"session": "Ses1", "amount": 3000, "cumulative": 3000,
                             "deposit": 9900}),
        ("SessionWithdrawn", {"session": "Ses1", "amount": 3000, "fee": 30, "net": 2970,
                              "withdrawn": 3000}),
    ]  # fmt: skip
    fees = withdrawal_fees_of(events)
    assert fees == {"Ses1": 30}
    (redeemed,) = from_program_event(
        *events[0], signature="sig", index=0, at=D0, withdrawal_fees=fees
    )
    assert (redeemed.amount, redeemed.fee) == (3000, 30)
    assert (redeemed.data["fee"], redeemed.data["net"]) == (30, 2970)
    assert from_program_event(*events[1], signature="sig", index=1, at=D0) == []
    (alone,) = from_program_event(*events[0], signature="sig2", index=0, at=D0)
    assert alone.fee is None and "net" not in alone.data  # no payout in its transaction


async def test_sums_beyond_a_double_stay_exact(store: Store) -> None:
    a, _ = await providers(store)
    each = 2**53 - 1  # exact as a float (the store writes SQLite amounts through one)
    for i in range(3):
        await store.events.add(paid(PAY_A, D0 + i, each))
    got = await report(store, provider_id=a, start=D0, end=D0 + DAY)
    assert got["totals"]["volume"] == str(3 * each)  # odd, above 2**53: no float has it
    assert got["days"][0]["oneTime"] == str(3 * each)
    assert got["byPlan"] == [] and got["totals"]["payments"] == 3


async def test_a_range_must_be_one(store: Store) -> None:
    for start, end in [(D0, D0), (D0, D0 - 1), (-1, D0)]:
        with pytest.raises(ValueError, match="not a range"):
            await report(store, provider_id=None, start=start, end=end)


# -- parse_range ---------------------------------------------------------------------------------

NOW = D0 + 10 * DAY + 5 * HOUR  # 2024-03-11T05:00Z


def test_the_default_range_is_the_last_30_days_through_today() -> None:
    start, end = parse_range({}, NOW)
    assert end == D0 + 11 * DAY and start == end - 30 * DAY


def test_dates_and_unix_seconds() -> None:
    assert parse_range({"from": "2024-03-01", "to": "2024-03-07"}, NOW) == (D0, END)
    assert parse_range({"from": str(D0 + 5), "to": str(END + 7)}, NOW) == (D0 + 5, END + 7)
    assert parse_range({"from": "2024-03-01"}, NOW) == (D0, D0 + 11 * DAY)  # through today
    assert parse_range({"to": "2024-03-07"}, NOW) == (END - 30 * DAY, END)
    assert parse_range({"from": "2024-03-01", "to": "2024-03-01"}, NOW) == (D0, D0 + DAY)
    year = parse_range({"from": "2024-01-01", "to": "2024-12-31"}, NOW)  # a leap year: 366
    assert year[1] - year[0] == 366 * DAY


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"from": "yesterday"}, "'from' must be a date"),
        ({"to": "2024-3-1"}, "'to' must be a date"),
        ({"from": ""}, "'from' must be a date"),
        ({"from": "-5"}, "'from' must be a date"),
        ({"from": "1.5"}, "'from' must be a date"),
        ({"from": "2024-02-30"}, "not a valid date"),
        ({"to": "99999999999999"}, "too far in the future"),
        ({"from": "2024-03-07", "to": "2024-03-01"}, "must be before"),
        ({"from": str(D0), "to": str(D0)}, "must be before"),
        ({"from": "2023-01-01", "to": "2024-01-02"}, "at most 366 days"),
        ({"from": "2020-01-01"}, "at most 366 days"),
    ],
)
def test_bad_ranges_say_what_is_wrong(params: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_range(params, NOW)


# -- the chart -----------------------------------------------------------------------------------


def png_size(png: bytes) -> tuple[int, int]:
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert png[12:16] == b"IHDR"
    width, height = struct.unpack(">II", png[16:24])
    return width, height


async def test_the_chart_is_a_png_of_the_report(store: Store) -> None:
    a, _ = await scenario(store)
    got = await report(store, provider_id=a, start=D0, end=END)
    png = chart_png(got, title="Provider A: 2024-03-01 to 2024-03-07")
    assert png_size(png) == (1000, 600)
    assert png_size(chart_png(got, title="small", width=640, height=400)) == (640, 400)
    empty = await report(store, provider_id="prov_unknown", start=D0, end=D0 + DAY)
    assert png_size(chart_png(empty, title="nothing")) == (1000, 600)


def test_a_year_renders() -> None:
    days = [
        day(f"d{i}", one_time=i * M, subscription=5 * M, metered=(i % 3) * M, payments=3,
            new=i % 4, churned=i % 2, active=10 + i)
        for i in range(366)
    ]  # fmt: skip
    png = chart_png({"days": days}, title="a year")  # its speed: scripts/bench-facilitator
    assert png_size(png) == (1000, 600)
