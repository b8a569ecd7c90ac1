"""Steps 6 and 7, what the provider sees: every webhook received (signatures verified,
duplicates ignored) with each transaction's compute units, and the facilitator's analytics
with its chart."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import httpx

from svcpay.amounts import format_amount
from svcpay.demo.context import while_working
from svcpay.demo.output import expect, say, step
from svcpay.demo.world import DAY

if TYPE_CHECKING:
    from svcpay.demo.context import Walkthrough


async def webhook_summary(w: Walkthrough) -> None:
    step("6. Webhooks received (every Svcpay-Signature verified, deduplicated by id)")
    r = w.receiver
    expected = ["payment.settled", "subscription.created", "subscription.renewed"]
    expect(r.wait_for(expected, 0), f"webhooks missing: {expected} vs {r.types()}")
    units: dict[str, int | None] = {}
    say(f"{'event':<22} {'id':<28} {'transaction':<14} {'compute units':>13}")
    for event in r.snapshot():
        sig = event["data"].get("transaction")
        cu: int | None = None
        if isinstance(sig, str):
            if sig not in units:
                units[sig] = w.compute_units(sig)
            cu = units[sig]
        shown = f"{sig[:10]}…" if isinstance(sig, str) else "-"
        say(f"{event['type']:<22} {event['id']:<28} {shown:<14} {f'{cu:,}' if cu else '-':>13}")
    say(
        f"{r.deliveries} deliveries, {len(r.events)} distinct events, "
        f"{r.duplicates} duplicates ignored, {r.refused} refused signatures"
    )


async def analytics(w: Walkthrough) -> None:
    step("7. Analytics (the facilitator's provider API)")
    # The chain's clock is 30 days ahead of this machine's: cover both.
    start = min(w.began, w.chain.unix_timestamp())
    end = max(int(time.time()), w.chain.unix_timestamp()) + 1
    params = {"from": str(start - start % DAY), "to": str(end - end % DAY + DAY)}
    reply = await w.provider_api.get("/v1/analytics", params=params)
    expect(reply.status_code == 200, f"GET /v1/analytics: {reply.status_code} {reply.text}")
    data = reply.json()
    plans_in = w.world.plans_in
    symbols = {str(w.world.mint): "USDC", str(plans_in.mint): plans_in.symbol}
    say(
        f"{data['from']} to {data['to']}, each mint on its own (amounts of different mints "
        "are never added):"
    )
    reports = {data["mint"]: data}
    for row in data["mints"]:  # each other mint's report, asked for by its address
        if row["mint"] not in reports:
            other = await w.provider_api.get(
                "/v1/analytics", params={**params, "mint": row["mint"]}
            )
            expect(other.status_code == 200, f"GET /v1/analytics?mint=: {other.status_code}")
            reports[row["mint"]] = other.json()
    for row in data["mints"]:
        mint, report = row["mint"], reports[row["mint"]]
        symbol = symbols.get(mint or "")

        def money(units: str, symbol: str | None = symbol) -> str:
            return format_amount(int(units), symbol=symbol) if symbol else f"{units} base units"

        say(f"{symbol or mint}: {money(row['volume'])} in {row['payments']} payments")
        for mode, figures in report["totals"]["byMode"].items():
            if figures["payments"]:
                say(f"  {mode:<13} {money(figures['volume']):>12}  ({figures['payments']})")
        if mint == str(plans_in.mint):
            subs = report["subscriptions"]
            say(
                f"subscriptions: {subs['active']} active, {subs['new']} new, "
                f"{subs['churned']} churned; recurring revenue "
                f"{w.plan_amount(int(report['recurringRevenue']['monthly']))} per 30 days"
            )
    # Drawn on request: matplotlib's first import and the drawing take seconds of the
    # facilitator's CPU, many more on a loaded machine, so no fixed read timeout.
    chart = await while_working(
        w.provider_api.get(
            "/v1/analytics/chart.png", params=params, timeout=httpx.Timeout(30, read=None)
        ),
        w.services.facilitator,
        "the analytics chart",
    )
    expect(
        chart.status_code == 200 and chart.content.startswith(b"\x89PNG\r\n\x1a\n"),
        f"GET /v1/analytics/chart.png: {chart.status_code}",
    )
    w.out_dir.mkdir(parents=True, exist_ok=True)
    path = w.out_dir / "analytics.png"
    path.write_bytes(chart.content)
    say(f"chart: {path} ({len(chart.content):,} bytes, PNG)")
