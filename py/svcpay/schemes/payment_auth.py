"""MPP's `Payment` HTTP authentication scheme on the gate (a `GateScheme`): one
`WWW-Authenticate: Payment` challenge per offered (method, intent) on every 402, and an
`Authorization: Payment` credential handed to the intent it answers (`session` today:
`svcpay.schemes.session.server`). A credential for an intent the route does not offer is a
400 `method-unsupported` problem; other `Authorization` schemes (the app's own Bearer,
Basic) are not claimed and reach the app. docs/adr/0025.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from svcpay.protocol import mpp
from svcpay.protocol.pricing import PricingEntry
from svcpay.schemes.decision import Admit, Offer, PaymentRequiredFn, RawHeaders, Reply, Request

Memos = Mapping[Any, str]  # OneTime -> the memo issued for it


class Intent(Protocol):
    """One (method, intent) of the `Payment` scheme."""

    method: str
    intent: str

    def serves(self, pricing: list[PricingEntry]) -> bool:
        """Whether the route has a price this intent pays."""
        ...

    def challenges(
        self, request: Request, pricing: list[PricingEntry], memos: Memos | None = None
    ) -> RawHeaders:
        """`memos`: the memos a 402's svcpay body issued, per one-time entry, to reuse."""
        ...

    async def admit(
        self, request: Request, pricing: list[PricingEntry], header: bytes
    ) -> Reply | Admit: ...


class PaymentAuthScheme:
    name = "mpp"
    headers: tuple[bytes, ...] = ()  # a credential's size is the intent's to judge

    def __init__(self, intents: list[Intent]) -> None:
        self.intents = intents

    def claims(self, request: Request, pricing: list[PricingEntry]) -> bool:
        auth = request.headers.get(b"authorization")
        return auth is not None and mpp.is_payment_authorization(auth)

    def offer(self, offer: Offer) -> RawHeaders:
        return self.challenges(offer.request, offer.pricing, dict(offer.memos))

    def challenges(
        self, request: Request, pricing: list[PricingEntry], memos: Memos | None = None
    ) -> RawHeaders:
        """Each offered intent's challenges, filtered and ordered by the client's
        `Accept-Payment` when it sends one (an intent it gives q=0, or does not name
        while naming others, is left out; ties keep the server's order)."""
        intents = [i for i in self.intents if i.serves(pricing)]
        accept = request.headers.get(b"accept-payment")
        if accept is not None:
            wanted = accepted(accept.decode("latin-1"))
            ranked = [(q, n, i) for n, i in enumerate(intents) if (q := rank(wanted, i)) > 0]
            intents = [i for _, _, i in sorted(ranked, key=lambda t: (-t[0], t[1]))]
        return [h for i in intents for h in i.challenges(request, pricing, memos)]

    def refuse(
        self,
        request: Request,
        pricing: list[PricingEntry],
        kind: str,
        detail: str,
        **extra: Any,
    ) -> Reply:
        """A 402 with fresh challenges and the RFC 9457 problem (400 for
        `method-unsupported`)."""
        body = mpp.problem(kind, detail, **extra)
        headers = self.challenges(request, pricing) if body["status"] == 402 else []
        reply = Reply.json(body["status"], body, headers)
        reply.headers[0] = (b"content-type", b"application/problem+json")
        return reply

    async def admit(
        self, request: Request, pricing: list[PricingEntry], payment_required: PaymentRequiredFn
    ) -> Reply | Admit:
        header = request.headers[b"authorization"]
        served = [i for i in self.intents if i.serves(pricing)]
        if not served:
            return self.refuse(
                request, pricing, "method-unsupported", "this route takes no Payment credential"
            )
        try:
            echo = mpp.parse_credential(header.decode("latin-1")).challenge
        except mpp.MppError as e:
            return self.refuse(request, pricing, e.problem, str(e))
        for intent in served:
            if (echo.method, echo.intent) == (intent.method, intent.intent):
                return await intent.admit(request, pricing, header)
        offered = ", ".join(f"{i.method}/{i.intent}" for i in served)
        return self.refuse(
            request,
            pricing,
            "method-unsupported",
            f"this route takes {offered}, not {echo.method}/{echo.intent}",
        )


def accepted(header: str) -> list[tuple[str, str, float]]:
    """`Accept-Payment` ("solana/charge, */session;q=0.3") as (method, intent, q) ranges;
    malformed members are skipped."""
    out = []
    for member in header.split(","):
        kind, *params = (p.strip() for p in member.split(";"))
        method, slash, intent = kind.partition("/")
        if not slash or not method or not intent:
            continue
        q = 1.0
        for param in params:
            name, _, value = param.partition("=")
            if name.strip().lower() == "q":
                try:
                    q = min(max(float(value), 0.0), 1.0)
                except ValueError:
                    q = 0.0
        out.append((method.lower(), intent.lower(), q))
    return out


def rank(wanted: list[tuple[str, str, float]], intent: Intent) -> float:
    """The q the client gives `intent` (the most specific range that matches; 0 if none)."""
    best, specificity = 0.0, -1
    for method, name, q in wanted:
        if method not in ("*", intent.method) or name not in ("*", intent.intent):
            continue
        level = (method != "*") + (name != "*")
        if level > specificity:
            best, specificity = q, level
    return best
