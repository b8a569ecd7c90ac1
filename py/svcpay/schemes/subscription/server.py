"""The gate's side of subscriptions and metered use (docs/adr/0007).

`X-Svc-Sub` passes only for an ACTIVE subscription to the plan priced on the route. On a
metered route the request's price is reserved against the allowance when it is admitted
(no await between the check and the reservation, so concurrent requests cannot together
pass the cap) and recorded with the meter after a 2xx answer; a failed request releases it.
"""

from __future__ import annotations

import logging
from typing import Protocol

from solders.pubkey import Pubkey

from svcpay.protocol.pricing import PricingEntry, Subscription
from svcpay.schemes.decision import (
    ADMIT,
    Admit,
    Offer,
    PaymentRequiredFn,
    RawHeaders,
    Reply,
    Request,
)

log = logging.getLogger("svcpay.gate")


class SubscriptionView(Protocol):  # read-only, so frozen dataclasses qualify
    @property
    def plan(self) -> str: ...
    @property
    def status(self) -> str: ...  # "Active", "PastDue", "Paused", "Cancelled", "Expired",
    # or "Overdue" (active, but not renewed long after its period ended)
    @property
    def allowance_remaining(self) -> int | None: ...


RETRY_AFTER_SECS = 5


class SubscriptionsUnavailable(Exception):
    """The subscriptions' source cannot be read now (e.g. the RPC node is unreachable or
    refused): the gate answers 503 with Retry-After, never serves on a guess and never
    charges."""

    def __init__(self, reason: str, retry_after: int = RETRY_AFTER_SECS) -> None:
        super().__init__(reason)
        self.reason, self.retry_after = reason, retry_after


class Subscriptions(Protocol):
    async def lookup(self, subscription_id: str) -> SubscriptionView | None:
        """The subscription's state, None when there is none; raises
        SubscriptionsUnavailable when the source cannot be read now."""
        ...

    def invalidate(self, subscription_id: str) -> None: ...


class Meter(Protocol):
    async def record(self, subscription_id: str, amount: int) -> None:
        """Records a use. It must count in `pending` before record's first await (the gate
        hands the use over from its own reservation in that same step)."""
        ...

    def pending(self, subscription_id: str) -> int:
        """Usage recorded but not yet deducted on chain."""
        ...


class SubscriptionScheme:
    """`X-Svc-Sub` on routes priced with `Subscription` (a `GateScheme`)."""

    name = "subscription"
    headers = (b"x-svc-sub",)

    def __init__(self, subscriptions: Subscriptions | None, meter: Meter | None) -> None:
        self.subscriptions, self.meter = subscriptions, meter
        self.inflight: dict[str, int] = {}  # metered usage of requests being served

    def claims(self, request: Request, pricing: list[PricingEntry]) -> bool:
        return b"x-svc-sub" in request.headers and any(isinstance(e, Subscription) for e in pricing)

    def offer(self, offer: Offer) -> RawHeaders:
        return []  # svcpay's 402 body lists the plans

    async def admit(
        self,
        request: Request,
        pricing: list[PricingEntry],
        payment_required: PaymentRequiredFn,
    ) -> Reply | Admit:
        sub_id = request.headers[b"x-svc-sub"].decode("latin-1").strip()
        return await self.admit_subscription(request, pricing, sub_id, payment_required)

    async def admit_subscription(
        self,
        request: Request,
        pricing: list[PricingEntry],
        sub_id: str,
        payment_required: PaymentRequiredFn,
    ) -> Reply | Admit:
        """Admits a request on subscription `sub_id` (also MPP's `subscription` intent,
        `schemes.mpp_subscription`, which names it in a credential)."""
        assert self.subscriptions is not None
        try:
            Pubkey.from_string(sub_id)
        except ValueError:
            return Reply.json(
                400,
                {
                    "error": "InvalidSubscriptionId",
                    "message": "X-Svc-Sub must be a subscription id (a base58 address)",
                },
            )
        try:
            view = await self.subscriptions.lookup(sub_id)
        except SubscriptionsUnavailable as e:  # the chain is unreadable: retry, never a 500
            message = f"cannot check the subscription: {e.reason}; retry in {e.retry_after} s"
            return Reply.json(
                503,
                {"error": "ChainUnavailable", "message": message},
                [(b"retry-after", str(e.retry_after).encode())],
            )
        entry = next(
            (e for e in pricing if isinstance(e, Subscription) and view and e.plan == view.plan),
            None,
        )
        if view is None or entry is None:
            why = "no subscription to this resource's plan has that id"
            return payment_required(request, pricing, "SubscriptionNotActive", why, None)
        if view.status == "Overdue":
            why = (
                "the subscription's renewal is overdue: its period ended and the payment "
                "could not be collected (the provider's webhooks say why); pay the provider "
                "or resubscribe"
            )
            return payment_required(request, pricing, "SubscriptionNotActive", why, None)
        if view.status != "Active":
            why = f"the subscription is {view.status}; renew or resubscribe"
            return payment_required(request, pricing, "SubscriptionNotActive", why, None)
        if not entry.metered:
            return ADMIT
        assert self.meter is not None
        used = self.meter.pending(sub_id) + self.inflight.get(sub_id, 0)
        remaining = None if view.allowance_remaining is None else view.allowance_remaining - used
        if remaining is None:
            why = (
                "the subscription has no metered allowance: its subscriber adds one with "
                "set_allowance_cap (`svcpay subscription allowance SUB AMOUNT`)"
            )
            return payment_required(request, pricing, "AllowanceExhausted", why, None)
        if remaining < entry.metered:
            why = "the metered allowance is used up: raise the overage limit or upgrade the plan"
            return payment_required(request, pricing, "AllowanceExhausted", why, None)
        self.inflight[sub_id] = self.inflight.get(sub_id, 0) + entry.metered
        return _Metered(self, sub_id, entry.metered)

    def unreserve(self, sub_id: str, amount: int) -> None:
        left = self.inflight[sub_id] - amount
        if left:
            self.inflight[sub_id] = left
        else:
            del self.inflight[sub_id]


class _Metered(Admit):
    """A reserved metered use: recorded after a 2xx answer, released otherwise."""

    __slots__ = ("amount", "scheme", "sub_id")

    def __init__(self, scheme: SubscriptionScheme, sub_id: str, amount: int) -> None:
        self.scheme, self.sub_id, self.amount = scheme, sub_id, amount

    async def end(self, status: int | None, body: bytes | None) -> None:
        scheme = self.scheme
        # The client may already send its next request: move the use from the reservation
        # to the meter's pending count in one step (no await between).
        scheme.unreserve(self.sub_id, self.amount)
        if status is None or not 200 <= status < 300:
            return
        assert scheme.subscriptions is not None and scheme.meter is not None
        scheme.subscriptions.invalidate(self.sub_id)
        try:
            await scheme.meter.record(self.sub_id, self.amount)
        except Exception:  # the response is sent; the meter keeps and retries usage
            log.exception("recording metered usage for %s failed", self.sub_id)
