"""Steps 6 and 7, what the provider sees: every webhook received (signatures verified,
duplicates ignored) with each transaction's compute units, and the facilitator's analytics
with its chart."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from svcpay.amounts import format_amount
from svcpay.demo.output import expect, say, step, usdc
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
    totals = data["totals"]
    mixed = w.world.plans_in.token_2022  # PYUSD plans, USDC one-time and session
    volume = int(totals["volume"])
    say(
        f"volume {format_amount(volume, symbol='') if mixed else usdc(volume)} in "
        f"{totals['payments']} payments, {data['from']} to {data['to']}"
        + (" (base units of both tokens, 6 decimals each):" if mixed else ":")
    )
    for mode, figures in totals["byMode"].items():
        money = usdc if mode in ("oneTime", "session") else w.plan_amount
        say(f"  {mode:<13} {money(int(figures['volume'])):>12}  ({figures['payments']})")
    subs = data["subscriptions"]
    say(
        f"subscriptions: {subs['active']} active, {subs['new']} new, "
        f"{subs['churned']} churned; recurring revenue "
        f"{w.plan_amount(int(data['recurringRevenue']['monthly']))} per 30 days"
    )
    chart = await w.provider_api.get("/v1/analytics/chart.png", params=params)
    expect(
        chart.status_code == 200 and chart.content.startswith(b"\x89PNG\r\n\x1a\n"),
        f"GET /v1/analytics/chart.png: {chart.status_code}",
    )
    w.out_dir.mkdir(parents=True, exist_ok=True)
    path = w.out_dir / "analytics.png"
    path.write_bytes(chart.content)
    say(f"chart: {path} ({len(chart.content):,} bytes, PNG)")
