"""The gate's core, free of ASGI and WSGI: given a request's method, path and headers (and
the stores it was built with), `GateCore.decide` answers `Reply` (send this, the handler
does not run) or `Admit` (run the handler; tell the admission its status when it starts
and when it ends). Each way to pay is its own scheme module (`svcpay.schemes.*.server`);
the ASGI middleware (`gate.asgi`) and the WSGI adapter (`gate.wsgi`) are shells around
this. docs/adr/0007 (the answers), docs/adr/0018 (this shape, x402).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Collection
from dataclasses import dataclass, field

from svcpay.gate.pricing import (
    OneTime,
    PricingEntry,
    Session,
    Subscription,
    Terms,
    build_payment_required,
)
from svcpay.protocol import mpp
from svcpay.protocol.headers import MAX_HEADER_BYTES
from svcpay.protocol.memo import Memos
from svcpay.protocol.replay import ReplayStore
from svcpay.protocol.verify import RemoteVerifier
from svcpay.schemes.decision import ADMIT, Admit, RawHeaders, Reply, Request
from svcpay.schemes.session.server import SessionScheme
from svcpay.schemes.subscription.server import Meter, Subscriptions, SubscriptionScheme
from svcpay.schemes.svcpay_proof.server import ProofScheme
from svcpay.schemes.x402_exact.idempotency import PaymentIdStore
from svcpay.schemes.x402_exact.server import X402Facilitator, X402Options, X402Server

__all__ = ["ADMIT", "Admit", "GateCore", "RawHeaders", "Reply", "Request", "under"]


@dataclass
class GateCore:
    """The decisions of `PaymentGate` (see its arguments)."""

    routes: dict[str, list[PricingEntry]]
    terms: Terms
    memos: Memos
    trusted_facilitators: Collection[str]
    replay: ReplayStore
    subscriptions: Subscriptions | None = None
    meter: Meter | None = None
    remote: RemoteVerifier | None = None
    x402_facilitator: X402Facilitator | None = None
    payment_ids: PaymentIdStore | None = None
    sessions: SessionScheme | None = None
    x402_options: X402Options | None = None
    _prefixes: list[tuple[str, list[PricingEntry]]] = field(init=False)

    def __post_init__(self) -> None:
        entries = [e for p in self.routes.values() for e in p]
        subscription = any(isinstance(e, Subscription) for e in entries)
        if subscription and self.subscriptions is None:
            raise ValueError("subscription pricing needs a `subscriptions` source")
        metered = any(isinstance(e, Subscription) and e.metered for e in entries)
        if metered and self.meter is None:
            raise ValueError("metered pricing needs a `meter`")
        if any(isinstance(e, Session) for e in entries) and self.sessions is None:
            raise ValueError("session pricing needs `sessions` (a SessionScheme)")
        # Longest prefix first, so "/v1/data/x" prefers "/v1/data" over "/v1".
        self._prefixes = sorted(self.routes.items(), key=lambda kv: len(kv[0]), reverse=True)
        self.proofs = ProofScheme(
            self.terms, self.memos, frozenset(self.trusted_facilitators), self.replay, self.remote
        )
        self.subscribed = SubscriptionScheme(self.subscriptions, self.meter)
        self.x402: X402Server | None = None
        if self.terms.owner is not None:
            self.x402 = X402Server(
                self.terms,
                self.memos,
                self.replay,
                self.x402_facilitator,
                payment_ids=self.payment_ids,
                options=self.x402_options,
            )

    @property
    def prefixes(self) -> list[tuple[str, list[PricingEntry]]]:
        return self._prefixes

    def pricing(self, path: str) -> list[PricingEntry] | None:
        """The pricing of the gated prefix `path` is under, or None (not gated)."""
        for prefix, pricing in self._prefixes:
            if under(path, prefix):
                return pricing
        return None

    async def decide(self, request: Request, pricing: list[PricingEntry]) -> Reply | Admit:
        """Admit or answer a request to a gated path the app serves."""
        headers = request.headers
        sub = headers.get(b"x-svc-sub")
        pay = headers.get(b"x-payment")
        signature = headers.get(b"payment-signature") if self.x402 is not None else None
        auth = headers.get(b"authorization")
        for name, value in (
            ("X-Svc-Sub", sub),
            ("X-PAYMENT", pay),
            ("PAYMENT-SIGNATURE", signature),
        ):
            if value is not None and len(value) > MAX_HEADER_BYTES:
                return _bad("HeaderTooLarge", f"{name} exceeds {MAX_HEADER_BYTES} bytes")
        if auth is not None and mpp.is_payment_authorization(auth):
            # Other schemes (the app's own Bearer, Basic) are the app's business.
            if self.sessions is not None and any(isinstance(e, Session) for e in pricing):
                return await self.sessions.admit(request, pricing, auth)
            body = mpp.problem("method-unsupported", "this route takes no Payment credential")
            return Reply.json(400, body)
        one_time = any(isinstance(e, OneTime) for e in pricing)
        if sub is not None and any(isinstance(e, Subscription) for e in pricing):
            return await self.subscribed.admit(request, pricing, sub, self.payment_required)
        if self.x402 is not None and one_time:
            if signature is not None:
                return await self.x402.admit(request, pricing, signature, 2, self.payment_required)
            if pay is not None and (version := _x402_version(pay)) is not None:
                if version != 1:
                    return _bad(
                        "InvalidPaymentHeader",
                        f"X-PAYMENT carries x402 version {version}; send version 2 in "
                        "PAYMENT-SIGNATURE",
                    )
                return await self.x402.admit(request, pricing, pay, 1, self.payment_required)
        if pay is not None and one_time:
            return await self.proofs.admit(request, pricing, pay, self.payment_required)
        return self.payment_required(request, pricing, None, "this resource requires payment")

    def payment_required(
        self,
        request: Request,
        pricing: list[PricingEntry],
        error: str | None,
        message: str,
        x402_error: str | None = None,
    ) -> Reply:
        """A 402 with fresh terms: svcpay's body and, with x402 on, `PAYMENT-REQUIRED`
        offering the same one-time options under the same memos."""
        headers: RawHeaders = []
        if self.sessions is not None:
            headers += self.sessions.headers(pricing)
        offered = [e for e in pricing if not isinstance(e, Session)]
        if not offered:  # sessions only: the body is MPP's problem
            assert self.sessions is not None
            return self.sessions.refuse(pricing, "payment-required", message)
        body = build_payment_required(
            request.resource, pricing, self.terms, self.memos, error, message
        )
        if self.x402 is not None:
            memos = [
                (entry, option.memo)
                for entry, option in zip(offered, body.accepts, strict=True)
                if isinstance(entry, OneTime) and option.memo
            ]
            headers += self.x402.payment_required_headers(request, memos, x402_error or message)
        return Reply.json(402, body.to_json_dict(), headers)


def under(path: str, prefix: str) -> bool:
    return path == prefix or path.startswith(prefix.rstrip("/") + "/")


def _bad(error: str, message: str) -> Reply:
    return Reply.json(400, {"error": error, "message": message})


def _x402_version(header: bytes) -> int | None:
    """`x402Version` of an `X-PAYMENT` value that is an x402 payload (base64 of a JSON object
    with that key), None for anything else (svcpay's proof, or garbage its parser names)."""
    try:
        raw = base64.b64decode(header.strip(), validate=True)
    except (binascii.Error, ValueError):
        return None
    if b'"x402Version"' not in raw:  # cheap: svcpay proofs never carry the key
        return None
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    version = data.get("x402Version") if isinstance(data, dict) else None
    return version if isinstance(version, int) and not isinstance(version, bool) else -1
