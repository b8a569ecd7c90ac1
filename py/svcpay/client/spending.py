"""The paying client's spending limits: `PaymentAuth`'s max_per_request and max_per_period,
and a `SpendingPolicy` beside them (origins, assets, caps, a daily budget). Every payment is
counted against them before any money moves (`SpendingLimits._reserve`)."""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass

import httpx

from svcpay.protocol.errors import OriginNotAllowed, SpendingLimitExceeded

DAY_SECS = 86_400


@dataclass(frozen=True)
class SpendingPolicy:
    """What a paying client may spend, beside `PaymentAuth`'s limits (pay-kit's client
    permissions, plus a daily budget). None: no restriction of that kind.

    Args:
        origins: the origins ("https://api.example.com", scheme://host[:port]) it may pay.
        assets: the mints it may pay in.
        max_per_payment: base units one payment (or one deposit, one first period) may cost.
        max_per_origin_per_day: base units paid to one origin in the last 24 hours, at most.
        daily_budget: base units paid to every origin in the last 24 hours, at most.
    """

    origins: frozenset[str] | None = None
    assets: frozenset[str] | None = None
    max_per_payment: int | None = None
    max_per_origin_per_day: int | None = None
    daily_budget: int | None = None

    def __post_init__(self) -> None:
        for name in ("origins", "assets"):
            value = getattr(self, name)
            if isinstance(value, str):
                raise TypeError(f"SpendingPolicy.{name} is a set of strings, not one string")
            if value is not None:
                object.__setattr__(self, name, frozenset(value))
        if self.origins is not None:
            object.__setattr__(self, "origins", frozenset(normal_origin(o) for o in self.origins))
        for name in ("max_per_payment", "max_per_origin_per_day", "daily_budget"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"SpendingPolicy.{name} cannot be negative")


@dataclass(frozen=True)
class Spent:
    at: float  # time.monotonic()
    amount: int
    origin: str


class SpendingLimits:
    """`PaymentAuth`'s limits (it sets these attributes): what it may pay in, to whom, and
    how much per payment, per period and per day."""

    max_per_request: int
    max_per_period: int | None
    period_secs: int
    allowed_tokens: frozenset[str] | None
    policy: SpendingPolicy
    _spent: deque[Spent]

    def _allowed(self, token: str) -> bool:
        if self.policy.assets is not None and token not in self.policy.assets:
            return False
        return self.allowed_tokens is None or token in self.allowed_tokens

    def _check_origin(self, origin: str) -> None:
        if self.policy.origins is not None and origin not in self.policy.origins:
            raise OriginNotAllowed(
                f"{origin} is not among the origins this client may pay "
                f"({', '.join(sorted(self.policy.origins)) or 'none'})"
            )

    def _reserve(self, amount: int, origin: str = "", asset: str = "") -> Spent:
        """Counts `amount` (of `asset`, paid to `origin`) as spent: SpendingLimitExceeded if
        that passes a limit or the policy, OriginNotAllowed for an origin it does not list;
        returns the entry, for `_release` when nothing was paid after all."""
        policy = self.policy
        self._check_origin(origin)
        if asset and policy.assets is not None and asset not in policy.assets:
            raise SpendingLimitExceeded(f"{asset} is not among the assets this client may pay in")
        if amount > self.max_per_request:
            raise SpendingLimitExceeded(
                f"{amount} base units is above the per-request limit {self.max_per_request}"
            )
        if policy.max_per_payment is not None and amount > policy.max_per_payment:
            raise SpendingLimitExceeded(
                f"{amount} base units is above the policy's per-payment cap "
                f"{policy.max_per_payment}"
            )
        now = time.monotonic()
        horizon = max(self.period_secs, DAY_SECS)
        while self._spent and now - self._spent[0].at > horizon:
            self._spent.popleft()
        in_period = sum(e.amount for e in self._spent if now - e.at <= self.period_secs)
        if self.max_per_period is not None and in_period + amount > self.max_per_period:
            raise SpendingLimitExceeded(
                f"paying {amount} would pass the limit {self.max_per_period} per period"
            )
        today = [e for e in self._spent if now - e.at <= DAY_SECS]
        budget = policy.daily_budget
        if budget is not None and sum(e.amount for e in today) + amount > budget:
            raise SpendingLimitExceeded(
                f"paying {amount} would pass the daily budget {policy.daily_budget} "
                "(the last 24 hours, every origin)"
            )
        if policy.max_per_origin_per_day is not None:
            spent_here = sum(e.amount for e in today if e.origin == origin)
            if spent_here + amount > policy.max_per_origin_per_day:
                raise SpendingLimitExceeded(
                    f"paying {amount} would pass the cap {policy.max_per_origin_per_day} per "
                    f"origin per day for {origin}"
                )
        entry = Spent(now, amount, origin)
        self._spent.append(entry)
        return entry

    def _release(self, entry: Spent) -> None:
        if entry in self._spent:
            self._spent.remove(entry)

    def spent_today(self, origin: str | None = None) -> int:
        """Base units paid in the last 24 hours (to `origin` only, when given)."""
        now = time.monotonic()
        return sum(
            e.amount
            for e in self._spent
            if now - e.at <= DAY_SECS and (origin is None or e.origin == origin)
        )


def request_origin(request: httpx.Request) -> str:
    return normal_origin(str(request.url))


def normal_origin(url: str) -> str:
    """scheme://host[:port] of `url`, the port left out when it is the scheme's default."""
    parsed = httpx.URL(url)
    default = {"http": 80, "https": 443}.get(parsed.scheme)
    port = f":{parsed.port}" if parsed.port is not None and parsed.port != default else ""
    return f"{parsed.scheme}://{parsed.host}{port}"
