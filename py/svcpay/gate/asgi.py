"""`PaymentGate`: pure ASGI middleware implementing the spec's table (section 4.1).

- No credentials: 402 listing every accepted option (fresh memos).
- `X-PAYMENT` with a valid proof: the handler runs. The proof is claimed first (so racing
  copies cannot both be served) and released if the handler fails (status >= 400): the
  client is not charged for a failed response and may retry with the same proof.
- `X-PAYMENT` that fails verification: 402 `InvalidPaymentProof` with the reason.
- `X-Svc-Sub` of an ACTIVE subscription to the route's plan: the handler runs; paused,
  cancelled, past due or another plan's: 402 `SubscriptionNotActive`.
- Metered routes: 402 `AllowanceExhausted` when the allowance cannot cover the request;
  after a 2xx response the meter deducts the usage.
- Malformed or oversized credentials: 400 with the reason. Never a 500 of the gate's own.
- With `Terms.owner` set, x402 too (`PAYMENT-REQUIRED` on every 402; `PAYMENT-SIGNATURE` or
  an x402 v1 `X-PAYMENT` pays; docs/adr/0018).
The decisions are `GateCore`'s (gate/core.py, no ASGI in it); this is the ASGI shell.
At start (the app's lifespan), a gate that reads the chain refuses to serve terms whose
network is not its RPC node's cluster: the server is told the startup failed, with one line
naming both (gate/cluster.py, docs/adr/0038).
Other non-HTTP scopes and paths outside the gated prefixes pass through untouched, and so does a
request the application does not serve (no route for its path, or not for its method): the
app answers its own 404 or 405 before any payment is asked for or any proof is taken. The
gate tells from `serves(scope)`, by default from the app's Starlette/FastAPI routes (found
through wrapping middleware's `.app`); an app it cannot read is assumed to serve every
gated request (pass `serves=` for those).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Collection, MutableMapping, Sequence
from typing import Any

from svcpay.gate.core import Admit, GateCore, Reply, Request, private_cache
from svcpay.gate.paywall import Paywall
from svcpay.protocol.memo import Memos
from svcpay.protocol.mints import MintReader
from svcpay.protocol.pricing import PricingEntry, Terms
from svcpay.protocol.replay import ReplayStore
from svcpay.protocol.verify import RemoteVerifier
from svcpay.rpc.cluster import WrongCluster
from svcpay.schemes.mpp_charge.facilitator_client import ChargeSettler
from svcpay.schemes.session.server import SessionScheme
from svcpay.schemes.subscription.server import Meter, Subscriptions, SubscriptionView
from svcpay.schemes.x402_exact.facilitator_client import X402Facilitator
from svcpay.schemes.x402_exact.idempotency import PaymentIdStore
from svcpay.schemes.x402_exact.server import X402Options

__all__ = ["Meter", "PaymentGate", "Subscriptions", "SubscriptionView", "payment_gate"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

log = logging.getLogger("svcpay.gate")


class PaymentGate:
    def __init__(
        self,
        app: ASGIApp,
        *,
        routes: dict[str, list[PricingEntry]],
        terms: Terms,
        memos: Memos,
        trusted_facilitators: Collection[str],
        replay: ReplayStore,
        subscriptions: Subscriptions | None = None,
        meter: Meter | None = None,
        remote: RemoteVerifier | None = None,
        serves: Callable[[Scope], bool] | None = None,
        x402_facilitator: X402Facilitator | None = None,
        payment_ids: PaymentIdStore | None = None,
        sessions: SessionScheme | None = None,
        x402_options: X402Options | None = None,
        schemes: Sequence[str] | None = None,
        mpp_facilitator: ChargeSettler | None = None,
        mints: MintReader | None = None,
        paywall: Paywall | None = None,
    ) -> None:
        """`remote` (e.g. FacilitatorVerifier) replaces the offline signature check with
        the facilitator's POST /verify; memo and replay checks stay here. `serves(scope)`
        says whether the app has a route for the request's path and method (default: read
        from the app's routes when it has Starlette-style ones); requests it does not serve
        are passed to the app unpriced, so a 404 or 405 is never paid for.

        x402 is on when `terms.owner` is set (ValueError at once when `terms.pay_to` is not
        that wallet's associated token account, or `terms.fee_payer` is missing):
        `x402_facilitator` settles (default: an X402FacilitatorClient of
        `terms.facilitator`) after the gate's own check of the payment, and
        `x402_options` says how (a remote /verify too, the cap on payments waiting to
        settle, the breaker, where pending settlements wait: docs/adr/0027);
        `payment_ids` keeps the payment-identifier responses (default: beside `replay`,
        see `idempotency.shared_with`). `sessions` takes the vouchers of routes priced
        with `Session` (MPP's `Authorization: Payment`, docs/adr/0025; see
        `svcpay.gate.chain.session_scheme`). `schemes` turns ways to pay on by name, of
        `svcpay.gate.core.SCHEMES` ("mpp", "subscription", "x402", "svcpay"; default: all,
        x402 when `terms.owner` is set). `mints` reads `terms.token` when it is a
        Token-2022 mint (required then for x402 and MPP charges; e.g.
        `svcpay.gate.chain.ChainMints(AsyncClient(rpc_url))`): the gate checks a payment by
        what the provider receives after the mint's transfer fee (docs/adr/0031).
        `paywall` (`svcpay.gate.paywall.Paywall`) restyles the HTML 402 a browser gets for
        an unpaid request, or turns it off (`Paywall(enabled=False)`: browsers get the JSON
        402 too; docs/adr/0032)."""
        self.app = app
        self.core = GateCore(
            routes,
            terms,
            memos,
            trusted_facilitators,
            replay,
            subscriptions,
            meter,
            remote,
            x402_facilitator,
            payment_ids,
            sessions,
            x402_options,
            schemes,
            mpp_facilitator,
            mints,
            paywall,
        )
        self.routes = self.core.prefixes
        self.terms, self.memos, self.replay = terms, memos, replay
        self.serves = serves if serves is not None else routes_served_by(app)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, receive, self._checked_startup(send))
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        pricing = self.core.pricing(path)
        if pricing is None or (self.serves is not None and not self.serves(scope)):
            await self.app(scope, receive, send)  # its 404/405 costs nothing
            return
        headers = {k.lower(): v for k, v in scope["headers"]}
        request = Request(scope["method"], path, headers, scope.get("scheme", "http"))
        decision = await self.core.decide(request, pricing)
        if isinstance(decision, Reply):
            await _reply(send, decision)
        else:
            await _admitted(self.app, decision, scope, receive, send)

    def _checked_startup(self, send: Send) -> Send:
        """`send` for the app's lifespan: its startup completes only if the gate's RPC node
        is on the terms' network (GateCore.check_cluster); else the server is told the
        startup failed, with the one line that says why, and serves nothing."""

        async def checked(message: Message) -> None:
            if message["type"] == "lifespan.startup.complete":
                try:
                    await self.core.check_cluster()
                except WrongCluster as e:
                    message = {"type": "lifespan.startup.failed", "message": str(e)}
            await send(message)

        return checked


async def _admitted(app: ASGIApp, admit: Admit, scope: Scope, receive: Receive, send: Send) -> None:
    """Runs `app` for an admitted request, telling `admit` its status and body."""
    status: int | None = None
    replaced = False
    body = bytearray() if admit.capture else None

    async def capture(message: Message) -> None:
        nonlocal status, replaced
        if replaced:  # the gate answered instead (its settlement failed): drop the app's
            return
        kind = message["type"]
        if kind == "http.response.start":
            status = int(message["status"])
            headers = list(message.get("headers", []))
            if admit.wants_start:
                extra = await admit.start(status, headers)
                if isinstance(extra, Reply):
                    replaced = True
                    await _reply(send, extra)
                    return
                headers += extra
            message = {**message, "headers": private_cache(headers)}
        elif kind == "http.response.body" and body is not None:
            body.extend(message.get("body", b""))
        await send(message)

    try:
        await app(scope, receive, capture)
    except BaseException:  # the handler raised: no charge
        await admit.end(None, None)
        raise
    await admit.end(status, None if body is None else bytes(body))


def routes_served_by(app: object) -> Callable[[Scope], bool] | None:
    """`serves(scope)` from the routes of a Starlette or FastAPI app (or a router), looked
    for through middleware that keeps the wrapped app as `.app`; None when there are none.
    A request is served when one route matches its path and method (a partial match is a
    405; no match is a 404 or the router's slash redirect, both free)."""
    for _ in range(32):
        routes = getattr(app, "routes", None)
        if isinstance(routes, list) and routes and all(hasattr(r, "matches") for r in routes):
            return _matching(routes)
        app = getattr(app, "app", None)
        if app is None:
            return None
    return None


def _matching(routes: list[Any]) -> Callable[[Scope], bool]:
    def serves(scope: Scope) -> bool:
        return any(route.matches(scope)[0].name == "FULL" for route in routes)

    return serves


async def _reply(send: Send, reply: Reply) -> None:
    await send({"type": "http.response.start", "status": reply.status, "headers": reply.headers})
    await send({"type": "http.response.body", "body": reply.body})


def payment_gate(
    app: ASGIApp, /, pricing: dict[str, list[PricingEntry]], **kwargs: Any
) -> PaymentGate:
    """`paymentGate({pricing})` of the spec: `pricing` maps path prefixes to entries."""
    return PaymentGate(app, routes=pricing, **kwargs)
