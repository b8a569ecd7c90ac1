"""Pricing entries of a gated route and the 402 bodies built from them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from svcpay.protocol.headers import NETWORK_MAINNET, PROTOCOL_VERSION, SCHEME_EXACT
from svcpay.protocol.memo import Memos, MemoTerms
from svcpay.protocol.models import PaymentOption, PaymentRequired, SvcExtension
from svcpay.protocol.request import Request


@dataclass(frozen=True)
class OneTime:
    """Pay `amount` (base units) per request through the facilitator.

    `settle` applies to x402 payments (svcpay proofs arrive settled): "after" (x402's
    order, the default) verifies, runs the handler and settles only below 400; "before"
    settles before the handler runs (for handlers whose effect cannot be taken back), for
    x402 and MPP charges alike. `description` says what is sold (MPP's challenges carry
    it)."""

    amount: int
    settle: Literal["after", "before"] = "after"
    description: str = ""

    def __post_init__(self) -> None:
        if self.settle not in ("after", "before"):
            raise ValueError(f'OneTime.settle must be "after" or "before", not {self.settle!r}')


@dataclass(frozen=True)
class Subscription:
    """Served to ACTIVE subscribers of `plan` (its address). With `metered`, each 2xx
    response also deducts that many base units from the subscription's allowance.

    `token` and `pay_to` are the plan's mint and destination where they are not the gate's
    `Terms` (a plan in PYUSD on a gate whose one-time payments are in USDC): what the
    plan's 402 option and MPP challenge name. `description` names the plan for people
    (the browser paywall heads the plan's offer with it; a plan on chain has no name)."""

    plan: str
    amount: int  # the plan's price per period (shown to clients)
    interval: int  # the plan's period, seconds
    metered: int | None = None
    token: str | None = None  # default: Terms.token
    pay_to: str | None = None  # default: Terms.pay_to
    description: str = ""


@dataclass(frozen=True)
class Session:
    """Paid by vouchers on a session the payer opened (MPP intent `session`; docs/adr/0025):
    `amount` base units per unit, where a request counts `units(request)` units (one by
    default, so `amount` is the price per call). `suggested_deposit` is what a client opens
    a session with when it has none (default: 1,000 calls)."""

    amount: int
    unit: str = "request"
    units: Callable[[Request], int] | None = None
    suggested_deposit: int = 0
    description: str = ""

    def __post_init__(self) -> None:
        if self.amount <= 0:
            raise ValueError("Session.amount must be positive")
        if not self.suggested_deposit:
            object.__setattr__(self, "suggested_deposit", self.amount * 1000)

    def price(self, request: Request) -> int:
        """What `request` costs: at least one base unit (a voucher must always grow)."""
        units = 1 if self.units is None else self.units(request)
        return max(self.amount * units, 1)


PricingEntry = OneTime | Subscription | Session


@dataclass(frozen=True)
class Terms:
    """What every option of this gate has in common."""

    pay_to: str  # the provider's token account
    token: str  # the mint
    network: str = NETWORK_MAINNET
    facilitator: str | None = None  # the facilitator's URL, advertised in `svc`
    # x402 (docs/adr/0018): on when `owner` is given. `owner` is the wallet that owns
    # `pay_to`, which must be its associated token account (x402's payTo is the wallet);
    # `fee_payer` is the facilitator's fee payer (x402's extra.feePayer).
    owner: str | None = None
    fee_payer: str | None = None
    max_timeout_seconds: int = 60  # x402's maxTimeoutSeconds


def build_payment_required(
    resource: str,
    pricing: list[PricingEntry],
    terms: Terms,
    memos: Memos,
    error: str | None = None,
    message: str | None = None,
) -> PaymentRequired:
    """The 402 body for `resource` listing every accepted option, each one-time option with
    a fresh memo bound to the resource and price."""
    accepts = []
    for entry in pricing:
        if isinstance(entry, Session):
            continue  # offered in `WWW-Authenticate: Payment` (MPP), not in this body
        token, pay_to = terms.token, terms.pay_to
        if isinstance(entry, OneTime):
            amount = str(entry.amount)
            memo = memos.issue(MemoTerms(resource, amount, terms.pay_to, terms.token))
            # Named so a client needs nothing but the URL to pay (`svcpay pay URL`).
            svc = SvcExtension(facilitator=terms.facilitator) if terms.facilitator else None
        else:
            amount, memo = str(entry.amount), None
            svc = SvcExtension(
                plan_id=entry.plan,
                subscription_scheme=True,
                facilitator=terms.facilitator,
                interval=entry.interval,
            )
            token, pay_to = entry.token or token, entry.pay_to or pay_to
        accepts.append(
            PaymentOption(
                scheme=SCHEME_EXACT,
                network=terms.network,
                token=token,
                amount=amount,
                pay_to=pay_to,
                memo=memo,
                svc=svc,
            )
        )
    return PaymentRequired(version=PROTOCOL_VERSION, accepts=accepts, error=error, message=message)
