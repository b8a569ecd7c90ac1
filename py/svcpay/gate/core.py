"""The gate's core, free of ASGI and WSGI: given a request's method, path and headers (and
the stores it was built with), `GateCore.decide` answers `Reply` (send this, the handler
does not run) or `Admit` (run the handler; tell the admission its status when it starts
and when it ends). Each way to pay is a `GateScheme` (`svcpay.schemes.decision`) in its own
module: the core asks each registered scheme in turn whether it claims the request's
credential, and lets every scheme add its headers to a 402. The ASGI middleware
(`gate.asgi`) and the WSGI adapter (`gate.wsgi`) are shells around this. docs/adr/0007 (the
answers), docs/adr/0018 (this shape, x402), docs/adr/0028 (the registry).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

from svcpay.gate.cluster import check_cluster, rpc_of
from svcpay.gate.paywall import Paywall, Ways, prefers_html, render
from svcpay.protocol import mpp
from svcpay.protocol.headers import MAX_HEADER_BYTES
from svcpay.protocol.memo import Memos
from svcpay.protocol.mints import MintReader
from svcpay.protocol.pricing import (
    OneTime,
    PricingEntry,
    Session,
    Subscription,
    Terms,
    build_payment_required,
)
from svcpay.protocol.replay import ReplayStore
from svcpay.protocol.verify import RemoteVerifier
from svcpay.schemes.decision import ADMIT, Admit, GateScheme, Offer, RawHeaders, Reply, Request
from svcpay.schemes.mpp_charge.facilitator_client import ChargeFacilitatorClient, ChargeSettler
from svcpay.schemes.mpp_charge.server import ChargeIntent
from svcpay.schemes.mpp_subscription.server import SubscriptionIntent
from svcpay.schemes.payment_auth import Intent, PaymentAuthScheme
from svcpay.schemes.session.server import SessionScheme
from svcpay.schemes.subscription.server import Meter, Subscriptions, SubscriptionScheme
from svcpay.schemes.svcpay_proof.server import ProofScheme
from svcpay.schemes.x402_exact.idempotency import PaymentIdStore, shared_with
from svcpay.schemes.x402_exact.server import (
    X402Facilitator,
    X402Options,
    X402Server,
    terms_token_program,
)
from svcpay.schemes.x402_exact.settling import Guard

__all__ = ["ADMIT", "SCHEMES", "Admit", "GateCore", "RawHeaders", "Reply", "Request", "under"]

# The registered schemes, in the order they are asked: MPP's `Authorization: Payment`,
# `X-Svc-Sub`, x402's payment headers, then svcpay's proof (whose `X-PAYMENT` x402 v1 shares).
SCHEMES = ("mpp", "subscription", "x402", "svcpay")


@dataclass
class GateCore:
    """The decisions of `PaymentGate` (see its arguments). `schemes` names the schemes to
    turn on, of SCHEMES (default: all; x402 when `terms.owner` is set). `mints` reads a
    Token-2022 `terms.token` for x402 and MPP charges (docs/adr/0031). `paywall` is how a
    browser's unpaid request is answered (default `Paywall()`: an HTML 402; docs/adr/0032)."""

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
    schemes: Sequence[str] | None = None
    mpp_facilitator: ChargeSettler | None = None
    mints: MintReader | None = None
    paywall: Paywall | None = None
    _prefixes: list[tuple[str, list[PricingEntry]]] = field(init=False)

    def __post_init__(self) -> None:
        entries = [e for p in self.routes.values() for e in p]
        self._check_sources(entries)
        # Longest prefix first, so "/v1/data/x" prefers "/v1/data" over "/v1".
        self._prefixes = sorted(self.routes.items(), key=lambda kv: len(kv[0]), reverse=True)
        wanted = SCHEMES if self.schemes is None else tuple(self.schemes)
        if unknown := [n for n in wanted if n not in SCHEMES]:
            raise ValueError(f"unknown schemes {unknown}: choose among {list(SCHEMES)}")
        if self.schemes is not None and "x402" in wanted and self.terms.owner is None:
            raise ValueError("the x402 scheme needs Terms.owner (the wallet paid)")
        self.proofs = ProofScheme(
            self.terms, self.memos, frozenset(self.trusted_facilitators), self.replay, self.remote
        )
        self.subscribed = SubscriptionScheme(self.subscriptions, self.meter)
        self.x402: X402Server | None = None
        if self.terms.owner is not None and "x402" in wanted:
            self.x402 = X402Server(
                self.terms,
                self.memos,
                self.replay,
                self.x402_facilitator,
                payment_ids=self.payment_ids,
                options=self.x402_options,
                mints=self.mints,
            )
        intents: list[Intent] = [self.sessions] if self.sessions is not None else []
        # One key for MPP's charge and subscription challenges, derived from the memo
        # secret, so every process that shares the memo secret recognises them.
        issuer = mpp.ChallengeIssuer(self.memos.derive(b"svcpay mpp challenges"), "svcpay")
        self.charge: ChargeIntent | None = None
        settler = self.mpp_facilitator
        if settler is None and self.terms.facilitator is not None:
            settler = ChargeFacilitatorClient(self.terms.facilitator)
        if (
            "mpp" in wanted
            and settler is not None
            and self.terms.owner is not None
            and self.terms.fee_payer is not None
        ):
            guard = self.x402.guard if self.x402 is not None else Guard()
            ids = self.x402.payment_ids if self.x402 is not None else self.payment_ids
            self.charge = ChargeIntent(
                self.terms,
                self.memos,
                issuer,
                self.replay,
                settler,
                guard,
                token_program=str(terms_token_program(self.terms)),
                payment_ids=ids if ids is not None else shared_with(self.replay),
                mints=self.mints,
            )
            intents.append(self.charge)
        if "mpp" in wanted and self.subscriptions is not None:
            intents.append(SubscriptionIntent(self.terms, issuer, self.replay, self.subscribed))
        self.payment_auth = PaymentAuthScheme(intents)
        available: dict[str, GateScheme | None] = {
            "mpp": self.payment_auth,
            "subscription": self.subscribed,
            "x402": self.x402,
            "svcpay": self.proofs,
        }
        self.registered: list[GateScheme] = [
            scheme for name in SCHEMES if name in wanted and (scheme := available[name])
        ]
        self._checked = sorted({h for s in self.registered for h in s.headers})
        self._wanted = wanted
        self.check_pricing(entries)
        if self.paywall is None:
            self.paywall = Paywall()
        on = {id(scheme) for scheme in self.registered}
        mpp_on = id(self.payment_auth) in on
        self.ways = Ways(  # what the paywall lists
            svcpay=id(self.proofs) in on,
            x402=self.x402 is not None and id(self.x402) in on,
            mpp_charge=mpp_on and self.charge is not None,
            mpp_subscription=mpp_on and self.subscriptions is not None,
            mpp_session=mpp_on and self.sessions is not None,
            subscription=id(self.subscribed) in on,
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

    def check_pricing(self, entries: Sequence[PricingEntry]) -> None:
        """ValueError when this gate cannot serve one of `entries`: no source (a
        subscription without `subscriptions`, metering without a `meter`, a session without
        `sessions`), or its scheme turned off."""
        self._check_sources(entries)
        if any(isinstance(e, Subscription) for e in entries) and (
            self.subscribed not in self.registered
        ):
            raise ValueError("subscription pricing needs the subscription scheme")
        if any(isinstance(e, Session) for e in entries) and "mpp" not in self._wanted:
            raise ValueError("session pricing needs the mpp scheme")

    def _check_sources(self, entries: Sequence[PricingEntry]) -> None:
        if any(isinstance(e, Subscription) for e in entries) and self.subscriptions is None:
            raise ValueError("subscription pricing needs a `subscriptions` source")
        metered = any(isinstance(e, Subscription) and e.metered for e in entries)
        if metered and self.meter is None:
            raise ValueError("metered pricing needs a `meter`")
        if any(isinstance(e, Session) for e in entries) and self.sessions is None:
            raise ValueError("session pricing needs `sessions` (a SessionScheme)")

    async def check_cluster(self) -> None:
        """Raises WrongCluster when the RPC node this gate reads the chain with is not on
        `terms.network` (svcpay.gate.cluster); the shells call it at start."""
        rpc = rpc_of(self.subscriptions, self.meter, self.sessions, self.mints)
        await check_cluster(self.terms.network, rpc)

    async def decide(self, request: Request, pricing: list[PricingEntry]) -> Reply | Admit:
        """Admit or answer a request to a gated path the app serves: the first registered
        scheme that claims its credential decides; without one, a 402."""
        headers = request.headers
        for name in self._checked:
            value = headers.get(name)
            if value is not None and len(value) > MAX_HEADER_BYTES:
                shown = name.decode().upper() if name != b"x-svc-sub" else "X-Svc-Sub"
                return _bad("HeaderTooLarge", f"{shown} exceeds {MAX_HEADER_BYTES} bytes")
        for scheme in self.registered:
            if scheme.claims(request, pricing):
                return await scheme.admit(request, pricing, self.payment_required)
        reply = self.payment_required(request, pricing, None, "this resource requires payment")
        paywall = self.paywall
        if (
            paywall is not None
            and paywall.enabled
            and reply.status == 402
            and prefers_html(headers.get(b"accept"))
        ):
            return render(paywall, request, pricing, self.terms, self.ways, reply)
        return reply

    def payment_required(
        self,
        request: Request,
        pricing: list[PricingEntry],
        error: str | None,
        message: str,
        x402_error: str | None = None,
    ) -> Reply:
        """A 402 with fresh terms: svcpay's body (or, on a route priced only with sessions,
        MPP's problem) and every scheme's headers, the one-time options under one memo
        each."""
        offered = [e for e in pricing if not isinstance(e, Session)]
        if not offered:
            return self.payment_auth.refuse(request, pricing, "payment-required", message)
        body = build_payment_required(
            request.resource, pricing, self.terms, self.memos, error, message
        )
        memos = [
            (entry, option.memo)
            for entry, option in zip(offered, body.accepts, strict=True)
            if isinstance(entry, OneTime) and option.memo
        ]
        offer = Offer(request, pricing, memos, message, x402_error)
        headers: RawHeaders = [h for scheme in self.registered for h in scheme.offer(offer)]
        return Reply.json(402, body.to_json_dict(), headers)


def under(path: str, prefix: str) -> bool:
    return path == prefix or path.startswith(prefix.rstrip("/") + "/")


def _bad(error: str, message: str) -> Reply:
    return Reply.json(400, {"error": error, "message": message})


def private_cache(headers: RawHeaders) -> RawHeaders:
    """`headers` with `Cache-Control` made private, for every answer the gate admitted: a
    paid answer is its payer's, and a shared cache must never serve it to anyone else (MPP's
    core draft: a response with `Payment-Receipt` MUST carry `Cache-Control: private`; the
    same holds for x402's `PAYMENT-RESPONSE` and svcpay's answers). The handler's own
    directives stay, except `public` and `s-maxage`; `no-store` already says more."""
    kept: RawHeaders = []
    directives: list[bytes] = []
    for name, value in headers:
        if name.lower() == b"cache-control":
            directives += [d.strip() for d in value.split(b",") if d.strip()]
        else:
            kept.append((name, value))
    directives = [
        d for d in directives if d.lower() != b"public" and not d.lower().startswith(b"s-maxage")
    ]
    if not any(d.lower() in (b"private", b"no-store") for d in directives):
        directives.insert(0, b"private")
    return [*kept, (b"cache-control", b", ".join(directives))]
