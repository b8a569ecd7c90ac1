"""What the facilitator API answers, as pydantic models (requests are in
`svcpay.facilitator.models`). `svcpay.facilitator.openapi` generates the document's answer
schemas from these; the fuzz test checks every answer against them.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import ConfigDict, Field

from svcpay.facilitator.lifecycle import EVENT_TYPES
from svcpay.facilitator.models import Address, Body
from svcpay.schemes.x402_exact.wire import Supported

if TYPE_CHECKING:
    EventType = str
else:
    EventType = Literal[EVENT_TYPES]

Units = Annotated[str, Field(pattern="^[0-9]+$", description="base units")]
Unix = Annotated[int, Field(ge=0, description="unix seconds")]


class Error(Body):
    """Every 4xx/5xx answer."""

    error: str = Field(
        description="what went wrong, e.g. InvalidRequest, Unauthorized, NotFound, "
        "InsufficientFunds, TermsMismatch, AllowanceExhausted"
    )
    message: str = Field(description="what to do about it")


class Verdict(Body):
    """POST /verify's answer to an svcpay proof."""

    valid: bool
    reason: str = Field(description="why not; empty when valid")


class UsageResult(Body):
    id: str
    status: str = Field(description="deducted")
    subscription: Address
    amount: Units
    transaction: str = Field(description="the deduction's signature")
    used: Units | None = None
    cap: Units | None = None
    remaining: Units | None = None


class VoucherAnswer(Body):
    session: Address
    status: Literal["kept", "stale", "refused"] = Field(
        description="kept: the session's highest, to be redeemed; stale: not above what is "
        "kept or redeemed; refused: see reason"
    )
    reason: str | None = None


class VoucherAnswers(Body):
    vouchers: list[VoucherAnswer]


class HeldSession(Body):
    session: Address
    cumulative: Units
    redeemed: Units
    due_at: int = Field(description="redeemed by then at the latest (unix seconds)")
    last_error: str | None


class HeldSessions(Body):
    sessions: list[HeldSession]


class Event(Body):
    """A lifecycle event (also the body of a webhook delivery)."""

    model_config = ConfigDict(extra="forbid")

    id: str
    type: EventType
    created: Unix
    data: dict[str, Any]


class EventPage(Body):
    events: list[Event]
    next: int = Field(ge=0, description="the `after` of the next page")


class WebhookEndpoint(Body):
    id: str
    url: str
    event_types: list[str]
    created: Unix
    disabled: bool


class CreatedEndpoint(WebhookEndpoint):
    secret: str = Field(description="the signing secret, shown once")


class EndpointList(Body):
    endpoints: list[WebhookEndpoint]


class Delivery(Body):
    id: int
    event_id: str
    status: Literal["pending", "delivered", "dead"]
    attempts: int = Field(ge=0)
    last_status: int | None
    last_error: str | None
    delivered_at: int | None


class DeliveryList(Body):
    deliveries: list[Delivery]


class FeePayerHealth(Body):
    address: str
    lamports: int | None
    status: Literal["ok", "low", "unknown"]


class Health(Body):
    status: Literal["ok", "degraded"]
    database: Literal["ok", "unreachable"]
    rpc: Literal["ok", "unreachable"]
    fee_payer: FeePayerHealth


class SupportedHere(Supported):
    """x402's SupportedResponse (an `exact` kind per wire version) and svcpay's fields: the
    fee payer, the key that signs proofs, the webhook event types."""

    fee_payer: Address
    facilitator_key: Address
    event_types: list[str]


# -- analytics (what `analytics.report` answers for one provider) ---------------------------
Count = Annotated[int, Field(ge=0)]


Fees = Annotated[
    str,
    Field(
        pattern="^[0-9]+$",
        description="base units withheld of `volume` by Token-2022 transfer-fee mints",
    ),
]
Net = Annotated[
    str, Field(pattern="^[0-9]+$", description="base units the payees received: volume - fees")
]


class Volume(Body):
    volume: Units = Field(description="base units the payers sent")
    fees: Fees
    net: Net
    payments: Count


class VolumeByMode(Body):
    one_time: Volume
    subscription: Volume
    metered: Volume
    session: Volume


class AnalyticsTotals(Volume):
    by_mode: VolumeByMode


class AnalyticsDay(Body):
    """One UTC day (every day of the range, zeros included)."""

    date: dt.date
    one_time: Units
    subscription: Units
    metered: Units
    session: Units
    volume: Units
    fees: Fees
    payments: Count
    new_subscriptions: Count
    churned: Count
    active_subscriptions: int | None = Field(default=None, description="at the day's end")


class PlanVolume(Volume):
    plan: str


class SubscriptionCounts(Body):
    active: Count
    new: Count
    churned: Count


class RecurringRevenue(Body):
    monthly: Units
    basis: str = Field(description="30-day")


class AnalyticsReport(Body):
    """Payment volume by day, mode and plan; subscriptions; recurring revenue (amounts in
    base units)."""

    from_: dt.date = Field(alias="from", description="the first UTC day")
    to: dt.date = Field(description="the last UTC day")
    start: Unix
    end: Unix
    provider: str | None = None
    totals: AnalyticsTotals
    days: list[AnalyticsDay]
    by_plan: list[PlanVolume] = Field(description="payments with a plan, largest first")
    subscriptions: SubscriptionCounts
    recurring_revenue: RecurringRevenue
