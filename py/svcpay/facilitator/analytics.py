"""Analytics over the lifecycle events: payment volume by provider, plan, mode and day;
subscriptions active, new and churned; recurring revenue. JSON for the API, a PNG for people.

Everything is computed from the `events` table with portable SQLAlchemy Core queries (the
same SQL on SQLite and PostgreSQL): day buckets are integer arithmetic on unix seconds
(`created_at - created_at % 86400`, UTC days), never a dialect's date functions.

- Volume: the events that carry a `mode` and an `amount` (payment.settled: one-time;
  subscription.created / .renewed: subscription, the period's charge; allowance.deducted:
  metered; session.redeemed: session, what a redeem paid), in base units, as decimal strings.
- A subscription is active at time T when its subscription.created is before T and no churn
  event is: subscription.ended, subscription.closed, or an immediate subscription.cancelled
  (one with cancelAtPeriodEnd true only schedules the end; subscription.ended follows).
  It churns at its first churn event.
- Recurring revenue: over the subscriptions active at the end of the range, each plan's
  amount normalised to 30 days (amount * 30 days / periodSecs, from the plan's plan.created;
  without that event, the subscription's first charge as a 30-day amount), rounded to the
  nearest base unit.
- Mints: amounts of different mints are never added. A report is of one mint (asked for,
  or the one of most payments in the range) and lists every mint's volume beside it; an
  event's mint is its plan's or session's (`events.mint`, migration 0007).

Ranges are half-open, [start, end) in unix seconds; `parse_range` turns the HTTP query's
`from`/`to` into one.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime
from fractions import Fraction
from typing import Any

import sqlalchemy as sa

from svcpay.facilitator.analytics_chart import chart_png as chart_png  # re-exported
from svcpay.facilitator.db import events, providers
from svcpay.facilitator.store import Store
from svcpay.protocol.stablecoins import name_of

DAY = 86400
MONTH = 30 * DAY  # the basis of recurring revenue
DEFAULT_RANGE_DAYS = 30
MAX_RANGE_DAYS = 366
MAX_TIMESTAMP = 253402300800  # 10000-01-01T00:00:00Z: days must stay printable

# mode column -> the key it has in the report
MODES: dict[str, str] = {
    "one-time": "oneTime",
    "subscription": "subscription",
    "metered": "metered",
    "session": "session",
}
CREATED = "subscription.created"
CHURN_TYPES = ("subscription.ended", "subscription.closed", "subscription.cancelled")

_DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")  # ASCII digits (\d takes any script's)
_UNIX = re.compile(r"[0-9]{1,15}")


# -- ranges ------------------------------------------------------------------------------------


def day_start(ts: int) -> int:
    """The start (00:00 UTC) of the day `ts` is in."""
    return ts - ts % DAY


def iso_day(ts: int) -> str:
    """`YYYY-MM-DD`, the UTC day `ts` is in."""
    return datetime.fromtimestamp(ts, UTC).date().isoformat()


def _bound(name: str, value: str, *, is_end: bool) -> int:
    text = value.strip()
    if _DATE.fullmatch(text):
        try:
            d = date.fromisoformat(text)
        except ValueError:
            raise ValueError(f"{name!r}: {value!r} is not a valid date (YYYY-MM-DD)") from None
        ts = int(datetime(d.year, d.month, d.day, tzinfo=UTC).timestamp())
        if ts < 0:
            raise ValueError(f"{name!r}: {value!r} is before 1970-01-01")
        return ts + DAY if is_end else ts  # `to` as a date includes that day
    if _UNIX.fullmatch(text):
        ts = int(text)
        if ts > MAX_TIMESTAMP:
            raise ValueError(f"{name!r}: {value!r} is too far in the future")
        return ts
    raise ValueError(f"{name!r} must be a date (YYYY-MM-DD) or unix seconds, got {value!r}")


def parse_range(params: Mapping[str, str], now: int) -> tuple[int, int]:
    """The half-open range [start, end) in unix seconds that the query parameters `from` and
    `to` name: each a UTC date `YYYY-MM-DD` (`to` inclusive: through the end of that day) or
    unix seconds (`to` exclusive). Without `to`, until the end of today; without `from`, the
    30 days before `to`. At most 366 days. Raises ValueError saying what is wrong."""
    end = (
        _bound("to", params["to"], is_end=True)
        if "to" in params
        else min(day_start(now) + DAY, MAX_TIMESTAMP)
    )
    start = (
        _bound("from", params["from"], is_end=False)
        if "from" in params
        else max(end - DEFAULT_RANGE_DAYS * DAY, 0)
    )
    if start >= end:
        raise ValueError(
            f"'from' ({params.get('from', iso_day(start))}) must be before "
            f"'to' ({params.get('to', iso_day(max(end - 1, 0)))})"
        )
    if end - start > MAX_RANGE_DAYS * DAY:
        raise ValueError(
            f"the range is {math.ceil((end - start) / DAY)} days long; at most "
            f"{MAX_RANGE_DAYS} days are allowed"
        )
    return start, end


# -- the report ----------------------------------------------------------------------------------


@dataclass
class _Subscription:
    plan: str | None
    amount: int
    created_at: int
    mint: str | None
    churned_at: int | None = None


def _int(value: Any) -> int | None:
    """An integer from a JSON value (int, or a decimal string), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return None


def _churns(event_type: str, data: str) -> bool:
    if event_type != "subscription.cancelled":
        return True
    try:
        parsed = json.loads(data)
    except ValueError:
        return True
    return not (isinstance(parsed, dict) and parsed.get("cancelAtPeriodEnd") is True)


def _amount(value: Any) -> int:
    """A SUM's result: int (SQLite), Decimal (PostgreSQL's numeric), None (no rows)."""
    return int(value) if value is not None else 0


@dataclass(frozen=True)
class _Scope:
    """The events a report counts: [start, end), one provider's or (None) everyone's, in
    one mint (None: the events whose mint is unknown)."""

    provider_id: str | None
    start: int
    end: int
    mint: str | None = None

    @property
    def mine(self) -> list[Any]:
        c = events.c
        return [c.provider_id == self.provider_id] if self.provider_id is not None else []

    @property
    def paid_in_any_mint(self) -> list[Any]:
        """The payments in range: events with a mode and an amount."""
        c = events.c
        return [
            c.created_at >= self.start,
            c.created_at < self.end,
            c.mode.in_(list(MODES)),
            c.amount.isnot(None),
            *self.mine,
        ]

    @property
    def paid(self) -> list[Any]:
        """The payments in range, in the report's mint."""
        c = events.c
        return [
            *self.paid_in_any_mint,
            c.mint.is_(None) if self.mint is None else c.mint == self.mint,
        ]


_C = events.c
_DAY = (_C.created_at - _C.created_at % sa.literal_column(str(DAY))).label("day")
_VOLUME = sa.type_coerce(sa.func.sum(_C.amount), sa.BigInteger)  # exact on SQLite too
_FEES = sa.type_coerce(sa.func.sum(sa.func.coalesce(_C.fee, 0)), sa.BigInteger)
_COUNT = sa.func.count()


@dataclass(frozen=True)
class _Volume:
    """Payments' gross volume (what payers sent), the fees transfer-fee mints withheld of
    it, and how many there were; net is what the payees received."""

    volume: int = 0
    fees: int = 0
    payments: int = 0

    def __add__(self, other: _Volume) -> _Volume:
        return _Volume(
            self.volume + other.volume, self.fees + other.fees, self.payments + other.payments
        )

    def json(self) -> dict[str, Any]:
        return {
            "volume": str(self.volume),
            "fees": str(self.fees),
            "net": str(self.volume - self.fees),
            "payments": self.payments,
        }


def _volume(v: Any, fees: Any, n: Any) -> _Volume:
    return _Volume(_amount(v), _amount(fees), int(n))


_ByDayMode = dict[tuple[int, str], _Volume]
_ByPlan = list[tuple[str, _Volume]]
_ByProvider = list[tuple[str | None, str | None, _Volume]]


async def _volumes(conn: Any, scope: _Scope) -> tuple[_ByDayMode, _ByPlan, _ByProvider]:
    """Volume by (day, mode), by plan, and (for everyone's report) by provider."""
    c = events.c
    by_day_mode = {
        (int(d), str(mode)): _volume(v, f, n)
        for d, mode, v, f, n in await conn.execute(
            sa.select(_DAY, c.mode, _VOLUME, _FEES, _COUNT)
            .where(*scope.paid)
            .group_by(_DAY, c.mode)
        )
    }
    by_plan = [
        (str(plan), _volume(v, f, n))
        for plan, v, f, n in await conn.execute(
            sa.select(c.plan, _VOLUME, _FEES, _COUNT)
            .where(*scope.paid, c.plan.isnot(None))
            .group_by(c.plan)
        )
    ]
    by_provider: _ByProvider = []
    if scope.provider_id is None:
        by_provider = [
            (provider, name, _volume(v, f, n))
            for provider, name, v, f, n in await conn.execute(
                sa.select(c.provider_id, providers.c.name, _VOLUME, _FEES, _COUNT)
                .select_from(events.outerjoin(providers, providers.c.id == c.provider_id))
                .where(*scope.paid)
                .group_by(c.provider_id, providers.c.name)
            )
        ]
    return by_day_mode, by_plan, by_provider


async def _mints(conn: Any, scope: _Scope) -> list[tuple[str | None, _Volume]]:
    """Volume by mint (None: unknown), most payments first."""
    c = events.c
    rows = [
        (mint, _volume(v, f, n))
        for mint, v, f, n in await conn.execute(
            sa.select(c.mint, _VOLUME, _FEES, _COUNT)
            .where(*scope.paid_in_any_mint)
            .group_by(c.mint)
        )
    ]
    return sorted(rows, key=lambda r: (-r[1].payments, r[0] is None, r[0] or ""))


def _default_mint(
    mints: list[tuple[str | None, _Volume]], subs: dict[str, _Subscription]
) -> str | None:
    """The known mint of most payments in range; without payments, of most subscriptions;
    the unknown mint (None) only when no other is there."""
    known = [mint for mint, _ in mints if mint is not None]
    if known:
        return known[0]
    counts = Counter(s.mint for s in subs.values() if s.mint is not None)
    if not counts:
        return None
    return min(counts, key=lambda m: (-counts[m], m))


async def _subscriptions(
    conn: Any, scope: _Scope
) -> tuple[dict[str, _Subscription], dict[str, tuple[int, int]]]:
    """Every subscription created before the range's end (with its first churn, if any), in
    any mint, and the terms (amount, periodSecs) of their plans, from plan.created."""
    c = events.c
    created = sa.select(c.subscription).where(
        c.type == CREATED, c.created_at < scope.end, c.subscription.isnot(None), *scope.mine
    )
    subs: dict[str, _Subscription] = {}
    for sub, plan, amount, created_at, mint in await conn.execute(
        sa.select(
            c.subscription,
            c.plan,
            sa.type_coerce(c.amount, sa.BigInteger),
            c.created_at,
            c.mint,
        )
        .where(c.type == CREATED, c.created_at < scope.end, c.subscription.isnot(None), *scope.mine)
        .order_by(c.created_at, c.seq)
    ):
        subs.setdefault(sub, _Subscription(plan, _amount(amount), int(created_at), mint))
    for sub, event_type, at, data in await conn.execute(
        sa.select(c.subscription, c.type, c.created_at, c.data)
        .where(
            c.type.in_(CHURN_TYPES),
            c.created_at < scope.end,
            c.subscription.in_(created.scalar_subquery()),
        )
        .order_by(c.created_at, c.seq)
    ):
        s = subs.get(sub)
        if s is not None and s.churned_at is None and _churns(event_type, data):
            s.churned_at = int(at)
    plans: dict[str, tuple[int, int]] = {}  # plan -> (amount, periodSecs)
    for plan, data in await conn.execute(
        sa.select(c.plan, c.data)
        .where(
            c.type == "plan.created",
            c.plan.in_(
                sa.select(c.plan)
                .where(c.type == CREATED, c.created_at < scope.end, *scope.mine)
                .scalar_subquery()
            ),
        )
        .order_by(c.seq)
    ):
        try:
            parsed = json.loads(data)
        except ValueError:
            continue
        if not isinstance(parsed, dict):
            continue
        amount, period = _int(parsed.get("amount")), _int(parsed.get("periodSecs"))
        if amount is not None and period:
            plans.setdefault(plan, (amount, period))
    return subs, plans


def _recurring_monthly(
    subs: dict[str, _Subscription], plans: dict[str, tuple[int, int]]
) -> dict[str | None, int]:
    """Per mint, the 30-day revenue of the subscriptions that have not churned, to the
    nearest unit."""
    monthly: dict[str | None, Fraction] = {}
    for s in subs.values():
        if s.churned_at is None:
            amount, period = plans.get(s.plan or "", (s.amount, MONTH))
            monthly[s.mint] = monthly.get(s.mint, Fraction(0)) + Fraction(amount * MONTH, period)
    return {mint: math.floor(m + Fraction(1, 2)) for mint, m in monthly.items()}


def _days(
    scope: _Scope, volumes: dict[tuple[int, str], _Volume], subs: dict[str, _Subscription]
) -> list[dict[str, Any]]:
    """Every UTC day of the range: volume by mode, fees, payments, new, churned and active
    subscriptions (active at the day's end)."""
    new_by_day: Counter[int] = Counter()
    churned_by_day: Counter[int] = Counter()
    active = 0
    for s in subs.values():
        if s.created_at < scope.start:
            active += s.churned_at is None or s.churned_at >= scope.start
        else:
            new_by_day[day_start(s.created_at)] += 1
        if s.churned_at is not None and s.churned_at >= scope.start:
            churned_by_day[day_start(s.churned_at)] += 1
    days: list[dict[str, Any]] = []
    for d in range(day_start(scope.start), day_start(scope.end - 1) + DAY, DAY):
        row: dict[str, Any] = {"date": iso_day(d)}
        total = _Volume()
        for mode, key in MODES.items():
            v = volumes.get((d, mode), _Volume())
            row[key] = str(v.volume)
            total += v
        active += new_by_day[d] - churned_by_day[d]
        row.update(
            volume=str(total.volume),
            fees=str(total.fees),
            payments=total.payments,
            newSubscriptions=new_by_day[d],
            churned=churned_by_day[d],
            activeSubscriptions=active,
        )
        days.append(row)
    return days


def chart_title(data: Mapping[str, Any]) -> str:
    """The chart's title for `report`'s `data`: its days and its mint."""
    mint = data.get("mint")
    coin = (name_of(mint) or f"{mint[:4]}..{mint[-4:]}") if isinstance(mint, str) else None
    return f"svcpay: {data['from']} to {data['to']}" + (f", {coin}" if coin else "")


async def report(
    store: Store,
    *,
    provider_id: str | None,
    start: int,
    end: int,
    mint: str | None = None,
) -> dict[str, Any]:
    """The analytics of [start, end) (unix seconds), for one provider or (None) for all, in
    one mint: `mint`, else the mint of most payments in the range (of most subscriptions
    when there were none). Amounts of different mints are never added (docs/adr/0044).

    `{"from", "to"` (first and last UTC day), `"start", "end", "provider", "mint"` (the
    report's; null: events whose mint is unknown), `"mints": [{"mint", "volume", "fees",
    "net", "payments"}]` (every mint paid in the range, each on its own, most payments
    first), `"totals": {"volume", "fees", "net", "payments", "byMode":
    {"oneTime"|"subscription"|"metered"|"session": {"volume", "fees", "net", "payments"}}},
    "days": [{"date", "volume", "fees", "oneTime", "subscription", "metered", "session",
    "payments", "newSubscriptions", "churned", "activeSubscriptions"}]` (every day, zeros
    included; active at the day's end), `"byPlan": [{"plan", "volume", "fees", "net",
    "payments"}]` (payments with a plan, largest first), `"byProvider": [{"provider",
    "name", "volume", "fees", "net", "payments"}]` (only for all providers; provider None:
    payments to no registered provider), `"subscriptions": {"active", "new", "churned"},
    "recurringRevenue": {"monthly", "basis": "30-day", "byMint": [{"mint", "monthly"}]}}`.
    Everything but `mints` and `recurringRevenue.byMint` is of the report's mint. Amounts
    are decimal strings of base units: `volume` is what payers sent, `fees` what Token-2022
    transfer-fee mints withheld of it, `net` what payees received (docs/adr/0030)."""
    if not 0 <= start < end:
        raise ValueError(f"not a range: start {start}, end {end}")
    scope = _Scope(provider_id, start, end, mint)
    async with store.engine.connect() as conn:
        if store.dialect == "postgresql":  # one snapshot for all the queries
            await conn.execution_options(isolation_level="REPEATABLE READ")
        mints = await _mints(conn, scope)
        all_subs, plans = await _subscriptions(conn, scope)
        if mint is None:
            scope = replace(scope, mint=_default_mint(mints, all_subs))
        volumes, by_plan, by_provider = await _volumes(conn, scope)
    subs = {k: s for k, s in all_subs.items() if s.mint == scope.mint}
    recurring = _recurring_monthly(all_subs, plans)

    days = _days(scope, volumes, subs)
    by_mode = {
        key: sum((v for (_, m), v in volumes.items() if m == mode), _Volume()).json()
        for mode, key in MODES.items()
    }
    out: dict[str, Any] = {
        "from": iso_day(start),
        "to": iso_day(end - 1),
        "start": start,
        "end": end,
        "provider": provider_id,
        "mint": scope.mint,
        "mints": [{"mint": m, **v.json()} for m, v in mints],
        "totals": {**sum(volumes.values(), _Volume()).json(), "byMode": by_mode},
        "days": days,
        "byPlan": [
            {"plan": plan, **v.json()}
            for plan, v in sorted(by_plan, key=lambda r: (-r[1].volume, r[0]))
        ],
        "subscriptions": {
            "active": sum(s.churned_at is None for s in subs.values()),
            "new": sum(1 for s in subs.values() if s.created_at >= start),
            "churned": sum(
                1 for s in subs.values() if s.churned_at is not None and s.churned_at >= start
            ),
        },
        "recurringRevenue": {
            "monthly": str(recurring.get(scope.mint, 0)),
            "basis": "30-day",
            "byMint": [
                {"mint": m, "monthly": str(v)}
                for m, v in sorted(recurring.items(), key=lambda r: (r[0] is None, r[0] or ""))
            ],
        },
    }
    if provider_id is None:
        out["byProvider"] = [
            {"provider": p, "name": name, **v.json()}
            for p, name, v in sorted(
                by_provider, key=lambda r: (-r[2].volume, r[0] is None, r[0] or "")
            )
        ]
    return out
