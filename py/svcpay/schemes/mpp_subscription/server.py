"""MPP's `subscription` intent on svc_billing's plans (ADR 0029's section on subscriptions),
ahead of a Solana profile (solana-foundation/subscriptions#310 is still open).

A route priced with `Subscription(plan, amount, interval)` also offers, when the interval is
a whole number of weeks or days, a `solana`/`subscription` challenge: `{amount, currency:
<mint>, periodUnit: "week" | "day", periodCount, recipient, methodDetails: {network,
planId, decimals}}`. Plans whose period is not a whole number of days are not offered over
MPP, and no plan is ever offered as `month`: svc_billing's periods are fixed seconds, and
the intent forbids approximating a calendar month.

Activation is svc_billing's own: the payer subscribes on chain (which collects the first
period) and presents the subscription in a credential, `payload: {"type": "subscription",
"subscriptionId": <address>}`; the gate admits it as it admits `X-Svc-Sub` (ACTIVE, this
plan, a metered allowance drawn on), once per challenge, and answers with a
`Payment-Receipt` carrying `subscriptionId` (a base58 address is also a base64url string).
Later periods are renewed by the facilitator's crank (at most one charge per period, missed
periods never accumulate: ADR 0005); later requests name the subscription in `X-Svc-Sub`
(the intent leaves selecting a subscription to the application).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from svcpay.protocol import mpp
from svcpay.protocol.pricing import PricingEntry, Subscription, Terms
from svcpay.protocol.replay import ReplayStore
from svcpay.schemes.decision import Admit, RawHeaders, Reply, Request
from svcpay.schemes.mpp_charge.wire import METHOD, NETWORKS
from svcpay.schemes.subscription.server import SubscriptionScheme

INTENT = "subscription"
CHALLENGE_SECS = 300
DAY, WEEK = 86_400, 604_800


def period(interval: int) -> tuple[str, int] | None:
    """(periodUnit, periodCount) for a plan's interval in seconds, None when the intent
    cannot represent it exactly (never `month`: calendar months are not fixed seconds)."""
    if interval > 0 and interval % WEEK == 0:
        return "week", interval // WEEK
    if interval > 0 and interval % DAY == 0:
        return "day", interval // DAY
    return None


class SubscriptionIntent:
    """MPP `subscription` on one gate (see the module's docstring)."""

    method, intent = METHOD, INTENT

    def __init__(
        self,
        terms: Terms,
        issuer: mpp.ChallengeIssuer,
        replay: ReplayStore,
        subscriptions: SubscriptionScheme,
        *,
        decimals: int = 6,
        challenge_secs: int = CHALLENGE_SECS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.terms, self.issuer, self.replay = terms, issuer, replay
        self.subscriptions, self.decimals = subscriptions, decimals
        self.challenge_secs, self.clock = challenge_secs, clock

    def _offered(self, pricing: list[PricingEntry]) -> list[tuple[Subscription, str, int]]:
        return [
            (e, *p)
            for e in pricing
            if isinstance(e, Subscription) and (p := period(e.interval)) is not None
        ]

    def serves(self, pricing: list[PricingEntry]) -> bool:
        return bool(self._offered(pricing))

    def request_json(self, entry: Subscription, unit: str, count: int) -> dict[str, Any]:
        return {
            "amount": str(entry.amount),
            "currency": entry.token or self.terms.token,
            "periodUnit": unit,
            "periodCount": str(count),
            "recipient": entry.pay_to or self.terms.owner or self.terms.pay_to,
            "methodDetails": {
                "network": NETWORKS.get(self.terms.network, "localnet"),
                "planId": entry.plan,
                "decimals": self.decimals,
            },
        }

    def challenges(
        self, request: Request, pricing: list[PricingEntry], memos: Any = None
    ) -> RawHeaders:
        expires = int(self.clock()) + self.challenge_secs
        return [
            (
                b"www-authenticate",
                self.issuer.issue(
                    METHOD, INTENT, self.request_json(e, unit, count), expires=expires
                )
                .header()
                .encode(),
            )
            for e, unit, count in self._offered(pricing)
        ]

    def refuse(self, request: Request, pricing: list[PricingEntry], kind: str, why: str) -> Reply:
        body = mpp.problem(kind, why)
        headers = self.challenges(request, pricing) if body["status"] == 402 else []
        reply = Reply.json(body["status"], body, [*headers, (b"cache-control", b"no-store")])
        reply.headers[0] = (b"content-type", b"application/problem+json")
        return reply

    async def admit(
        self, request: Request, pricing: list[PricingEntry], header: bytes
    ) -> Reply | Admit:
        try:
            credential = mpp.parse_credential(header.decode("latin-1"))
        except mpp.MppError as e:
            return self.refuse(request, pricing, e.problem, str(e))
        echo = credential.challenge
        if not self.issuer.recognises(echo):
            return self.refuse(
                request, pricing, "invalid-challenge", "the challenge was not issued here"
            )
        expires = mpp.parse_rfc3339(echo.expires) if echo.expires else None
        if expires is None or expires < self.clock():
            return self.refuse(request, pricing, "payment-expired", "the challenge has expired")
        asked = echo.request_json
        plan = (asked.get("methodDetails") or {}).get("planId") if isinstance(asked, dict) else None
        if plan not in {e.plan for e, _, _ in self._offered(pricing)}:
            return self.refuse(
                request, pricing, "invalid-challenge", "the challenge is for another route's plan"
            )
        payload = credential.payload
        sub_id = payload.get("subscriptionId")
        if payload.get("type") != "subscription" or not isinstance(sub_id, str):
            return self.refuse(
                request,
                pricing,
                "malformed-credential",
                'payload must be {"type": "subscription", "subscriptionId": <address>}: '
                f"subscribe to plan {plan} on chain first",
            )
        if not await self.replay.claim("mppsub:" + echo.id, int(expires) + 60):
            return self.refuse(
                request, pricing, "verification-failed", "this credential was already used"
            )

        def refused(
            request: Request,
            pricing: list[PricingEntry],
            error: str | None,
            message: str,
            x402_error: str | None = None,
        ) -> Reply:
            return self.refuse(request, pricing, "verification-failed", message)

        mine: list[PricingEntry] = [
            e for e in pricing if isinstance(e, Subscription) and e.plan == plan
        ]
        decided = await self.subscriptions.admit_subscription(request, mine, sub_id, refused)
        if isinstance(decided, Reply):
            await self.replay.release("mppsub:" + echo.id)  # unused: the challenge may be retried
            return decided
        return _Receipted(decided, sub_id, echo.id, int(self.clock()))


class _Receipted(Admit):
    """The subscription's admission, with MPP's receipt on a paid answer."""

    wants_start = True

    def __init__(self, inner: Admit, sub_id: str, challenge_id: str, now: int) -> None:
        self.inner, self.sub_id, self.challenge_id, self.now = inner, sub_id, challenge_id, now
        self.capture = inner.capture

    async def start(self, status: int, headers: RawHeaders) -> Reply | RawHeaders:
        extra = await self.inner.start(status, headers) if self.inner.wants_start else []
        if isinstance(extra, Reply) or status >= 400:
            return extra
        receipt = mpp.Receipt(
            METHOD,
            self.sub_id,
            self.now,
            challenge_id=self.challenge_id,
            intent=INTENT,
            extra={"subscriptionId": self.sub_id},
        )
        return [*extra, (b"payment-receipt", receipt.header().encode())]

    async def end(self, status: int | None, body: bytes | None) -> None:
        await self.inner.end(status, body)
