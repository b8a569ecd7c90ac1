"""What each dashboard page shows, from the store and the analytics report (no HTTP here)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from svcpay.facilitator.store import Event

# The chart's drawing area, in SVG user units.
CHART_W, CHART_H, CHART_PAD = 720, 200, 24


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    date: str
    volume: int


def revenue_bars(days: list[dict[str, Any]]) -> list[Bar]:
    """One bar per day of `analytics.report`'s `days`, scaled to the tallest."""
    if not days:
        return []
    volumes = [int(d["volume"]) for d in days]
    top = max(volumes) or 1
    step = CHART_W / len(days)
    width = max(step * 0.8, 1.0)
    bars = []
    for i, (day, volume) in enumerate(zip(days, volumes, strict=True)):
        height = round(CHART_H * volume / top, 2)
        x = round(i * step + (step - width) / 2, 2)
        y = round(CHART_PAD + CHART_H - height, 2)
        bars.append(Bar(x, y, round(width, 2), height, str(day["date"]), volume))
    return bars


@dataclass
class Subscription:
    id: str
    plan: str | None = None
    subscriber: str | None = None
    status: str = "active"
    next_renewal: int | None = None
    past_due_since: int | None = None
    grace_deadline: int | None = None
    cancel_at_period_end: bool = False
    last_amount: int | None = None
    last_event: int = 0
    history: list[str] = field(default_factory=list)


_STATUS = {  # a subscription.* event's type -> the status it leaves
    "subscription.created": "active",
    "subscription.renewed": "active",
    "subscription.renewal_failed": "past due",
    "subscription.paused": "paused",
    "subscription.resumed": "active",
    "subscription.cancelled": "cancelled",
    "subscription.ended": "ended",
    "subscription.closed": "closed",
}


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.isascii() and value.isdigit():
        return int(value)
    return None


def subscriptions(found: list[Event]) -> list[Subscription]:
    """Each subscription's state after its events (oldest first), most recent first."""
    subs: dict[str, Subscription] = {}
    for e in found:
        if e.subscription is None:
            continue
        s = subs.setdefault(e.subscription, Subscription(e.subscription))
        s.plan = e.plan or s.plan
        s.last_event = e.created_at
        s.history.append(e.type)
        data = e.data
        if isinstance(data.get("subscriber"), str):
            s.subscriber = data["subscriber"]
        status = _STATUS.get(e.type)
        if e.type == "subscription.cancelled" and data.get("cancelAtPeriodEnd") is True:
            s.cancel_at_period_end, status = True, "cancels at period end"
        if status is not None:
            s.status = status
        if e.amount is not None:
            s.last_amount = e.amount
        period_end = _int(data.get("periodEnd", data.get("currentPeriodEnd")))
        if period_end is not None:
            s.next_renewal = period_end
        if e.type == "subscription.renewal_failed":
            s.past_due_since = _int(data.get("pastDueSince")) or s.past_due_since or e.created_at
            s.grace_deadline = _int(data.get("graceDeadline")) or s.grace_deadline
        elif status == "active":
            s.past_due_since = s.grace_deadline = None
    for s in subs.values():
        if s.status not in ("active", "past due"):
            s.next_renewal = None  # nothing more will be charged
    return sorted(subs.values(), key=lambda s: (-s.last_event, s.id))
