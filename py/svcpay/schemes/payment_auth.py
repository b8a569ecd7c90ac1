"""MPP's `Payment` HTTP authentication scheme on the gate (a `GateScheme`): one
`WWW-Authenticate: Payment` challenge per offered (method, intent) on every 402, and an
`Authorization: Payment` credential handed to the intent it answers (`session` today:
`svcpay.schemes.session.server`). A credential for an intent the route does not offer is a
400 `method-unsupported` problem; other `Authorization` schemes (the app's own Bearer,
Basic) are not claimed and reach the app. docs/adr/0025.
"""

from __future__ import annotations

from typing import Any, Protocol

from svcpay.protocol import mpp
from svcpay.protocol.pricing import PricingEntry
from svcpay.schemes.decision import Admit, Offer, PaymentRequiredFn, RawHeaders, Reply, Request


class Intent(Protocol):
    """One (method, intent) of the `Payment` scheme."""

    method: str
    intent: str

    def serves(self, pricing: list[PricingEntry]) -> bool:
        """Whether the route has a price this intent pays."""
        ...

    def challenges(self, pricing: list[PricingEntry]) -> RawHeaders: ...

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
        return self.challenges(offer.pricing)

    def challenges(self, pricing: list[PricingEntry]) -> RawHeaders:
        return [h for i in self.intents if i.serves(pricing) for h in i.challenges(pricing)]

    def refuse(self, pricing: list[PricingEntry], kind: str, detail: str, **extra: Any) -> Reply:
        """A 402 with fresh challenges and the RFC 9457 problem (400 for
        `method-unsupported`)."""
        body = mpp.problem(kind, detail, **extra)
        headers = self.challenges(pricing) if body["status"] == 402 else []
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
                pricing, "method-unsupported", "this route takes no Payment credential"
            )
        try:
            echo = mpp.parse_credential(header.decode("latin-1")).challenge
        except mpp.MppError as e:
            return self.refuse(pricing, e.problem, str(e))
        for intent in served:
            if (echo.method, echo.intent) == (intent.method, intent.intent):
                return await intent.admit(request, pricing, header)
        offered = ", ".join(f"{i.method}/{i.intent}" for i in served)
        return self.refuse(
            pricing,
            "method-unsupported",
            f"this route takes {offered}, not {echo.method}/{echo.intent}",
        )
