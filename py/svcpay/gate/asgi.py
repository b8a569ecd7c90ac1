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
Non-HTTP scopes and paths outside the gated prefixes pass through untouched, and so does a
request the application does not serve (no route for its path, or not for its method): the
app answers its own 404 or 405 before any payment is asked for or any proof is taken. The
gate tells from `serves(scope)`, by default from the app's Starlette/FastAPI routes (found
through wrapping middleware's `.app`); an app it cannot read is assumed to serve every
gated request (pass `serves=` for those).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Collection, MutableMapping
from typing import Any, Protocol

from solders.pubkey import Pubkey

from svcpay.gate.chain import SubscriptionsUnavailable
from svcpay.gate.pricing import OneTime, PricingEntry, Subscription, Terms, build_payment_required
from svcpay.protocol.headers import MAX_HEADER_BYTES, SCHEME_EXACT
from svcpay.protocol.memo import Memos
from svcpay.protocol.models import PaymentOption, ProtocolError
from svcpay.protocol.proof import parse_payment_proof
from svcpay.protocol.replay import ReplayStore
from svcpay.protocol.verify import RemoteVerifier, verify_payment_proof_reason

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

log = logging.getLogger("svcpay.gate")


class SubscriptionView(Protocol):  # read-only, so frozen dataclasses qualify
    @property
    def plan(self) -> str: ...
    @property
    def status(self) -> str: ...  # "Active", "PastDue", "Paused", "Cancelled", "Expired"
    @property
    def allowance_remaining(self) -> int | None: ...


class Subscriptions(Protocol):
    async def lookup(self, subscription_id: str) -> SubscriptionView | None: ...
    def invalidate(self, subscription_id: str) -> None: ...


class Meter(Protocol):
    async def record(self, subscription_id: str, amount: int) -> None:
        """Records a use. It must count in `pending` before record's first await (the gate
        hands the use over from its own reservation in that same step)."""
        ...

    def pending(self, subscription_id: str) -> int:
        """Usage recorded but not yet deducted on chain."""
        ...


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
    ) -> None:
        """`remote` (e.g. FacilitatorVerifier) replaces the offline signature check with
        the facilitator's POST /verify; memo and replay checks stay here. `serves(scope)`
        says whether the app has a route for the request's path and method (default: read
        from the app's routes when it has Starlette-style ones); requests it does not serve
        are passed to the app unpriced, so a 404 or 405 is never paid for."""
        if (
            any(isinstance(e, Subscription) for p in routes.values() for e in p)
            and subscriptions is None
        ):
            raise ValueError("subscription pricing needs a `subscriptions` source")
        if (
            any(isinstance(e, Subscription) and e.metered for p in routes.values() for e in p)
            and meter is None
        ):
            raise ValueError("metered pricing needs a `meter`")
        self.app = app
        # Longest prefix first, so "/v1/data/x" prefers "/v1/data" over "/v1".
        self.routes = sorted(routes.items(), key=lambda kv: len(kv[0]), reverse=True)
        self.terms, self.memos, self.replay = terms, memos, replay
        self.trusted = frozenset(trusted_facilitators)
        self.subscriptions, self.meter = subscriptions, meter
        self._options: dict[OneTime, PaymentOption] = {}
        self.remote = remote
        self.serves = serves if serves is not None else routes_served_by(app)
        self._inflight: dict[str, int] = {}  # metered usage of requests being served

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        pricing = next((p for prefix, p in self.routes if _under(scope["path"], prefix)), None)
        if pricing is None or (self.serves is not None and not self.serves(scope)):
            await self.app(scope, receive, send)  # its 404/405 costs nothing
            return
        resource = f"{scope['method']} {scope['path']}"
        headers = {k.lower(): v for k, v in scope["headers"]}
        sub_header, pay_header = headers.get(b"x-svc-sub"), headers.get(b"x-payment")
        for name, value in (("X-Svc-Sub", sub_header), ("X-PAYMENT", pay_header)):
            if value is not None and len(value) > MAX_HEADER_BYTES:
                await _json(
                    send,
                    400,
                    {
                        "error": "HeaderTooLarge",
                        "message": f"{name} exceeds {MAX_HEADER_BYTES} bytes",
                    },
                )
                return
        if sub_header is not None and any(isinstance(e, Subscription) for e in pricing):
            await self._subscriber(scope, receive, send, resource, pricing, sub_header)
        elif pay_header is not None and any(isinstance(e, OneTime) for e in pricing):
            await self._paid(scope, receive, send, resource, pricing, pay_header)
        else:
            await self._payment_required(
                send, resource, pricing, None, "this resource requires payment"
            )

    async def _paid(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        resource: str,
        pricing: list[PricingEntry],
        header: bytes,
    ) -> None:
        entry = next(e for e in pricing if isinstance(e, OneTime))
        try:
            proof = parse_payment_proof(header)
        except ProtocolError as e:
            await self._payment_required(send, resource, pricing, "InvalidPaymentProof", e.reason)
            return
        option = self._one_time_option(entry)
        verdict = await verify_payment_proof_reason(
            proof,
            option,
            resource=resource,
            trusted_facilitators=self.trusted,
            memos=self.memos,
            replay=self.replay,
            remote=self.remote,
        )
        if not verdict.ok:
            await self._payment_required(
                send, resource, pricing, "InvalidPaymentProof", verdict.reason
            )
            return
        try:
            status = await self._run(scope, receive, send)
        except BaseException:  # the handler raised: no charge, the proof can be used again
            await self.replay.release(proof.replay_key)
            raise
        if status is None or status >= 400:
            await self.replay.release(proof.replay_key)

    async def _subscriber(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        resource: str,
        pricing: list[PricingEntry],
        header: bytes,
    ) -> None:
        assert self.subscriptions is not None
        sub_id = header.decode("latin-1").strip()
        try:
            Pubkey.from_string(sub_id)
        except ValueError:
            await _json(
                send,
                400,
                {
                    "error": "InvalidSubscriptionId",
                    "message": "X-Svc-Sub must be a subscription id (a base58 address)",
                },
            )
            return
        try:
            view = await self.subscriptions.lookup(sub_id)
        except SubscriptionsUnavailable as e:  # the chain is unreadable: retry, never a 500
            body = {"error": "ChainUnavailable", "message": f"cannot check the subscription: "
                    f"{e.reason}; retry in {e.retry_after} s"}  # fmt: skip
            await _json(send, 503, body, ((b"retry-after", str(e.retry_after).encode()),))
            return
        entry = next(
            (e for e in pricing if isinstance(e, Subscription) and view and e.plan == view.plan),
            None,
        )
        if view is None or entry is None:
            await self._payment_required(
                send,
                resource,
                pricing,
                "SubscriptionNotActive",
                "no subscription to this resource's plan has that id",
            )
            return
        if view.status != "Active":
            await self._payment_required(
                send,
                resource,
                pricing,
                "SubscriptionNotActive",
                f"the subscription is {view.status}; renew or resubscribe",
            )
            return
        if not entry.metered:
            await self._run(scope, receive, send)
            return
        assert self.meter is not None
        # Usage counts against the allowance from the moment the request is admitted (no
        # await between this check and the reservation), so concurrent requests cannot
        # together pass the cap; the reservation ends once the meter holds the usage.
        used = self.meter.pending(sub_id) + self._inflight.get(sub_id, 0)
        remaining = None if view.allowance_remaining is None else view.allowance_remaining - used
        if remaining is None or remaining < entry.metered:
            message = (
                "the metered allowance is used up: raise the overage limit or upgrade the plan"
            )
            await self._payment_required(send, resource, pricing, "AllowanceExhausted", message)
            return
        self._inflight[sub_id] = self._inflight.get(sub_id, 0) + entry.metered
        reserved = True
        try:
            status = await self._run(scope, receive, send)
            if status is not None and 200 <= status < 300:
                self.subscriptions.invalidate(sub_id)
                # The client may already send its next request: move the use from this
                # reservation to the meter's pending count in one step (no await between).
                self._unreserve(sub_id, entry.metered)
                reserved = False
                try:
                    await self.meter.record(sub_id, entry.metered)
                except Exception:  # the response is sent; the meter keeps and retries usage
                    log.exception("recording metered usage for %s failed", sub_id)
        finally:
            if reserved:
                self._unreserve(sub_id, entry.metered)

    def _unreserve(self, sub_id: str, amount: int) -> None:
        left = self._inflight[sub_id] - amount
        if left:
            self._inflight[sub_id] = left
        else:
            del self._inflight[sub_id]

    def _one_time_option(self, entry: OneTime) -> PaymentOption:
        """The terms a proof for `entry` must meet (validated once; the memo is checked
        from the proof itself, bound to the resource and price)."""
        option = self._options.get(entry)
        if option is None:
            option = PaymentOption(
                scheme=SCHEME_EXACT,
                network=self.terms.network,
                token=self.terms.token,
                amount=str(entry.amount),
                pay_to=self.terms.pay_to,
                memo="-",
            )
            self._options[entry] = option
        return option

    async def _run(self, scope: Scope, receive: Receive, send: Send) -> int | None:
        status: int | None = None

        async def capture(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        await self.app(scope, receive, capture)
        return status

    async def _payment_required(
        self,
        send: Send,
        resource: str,
        pricing: list[PricingEntry],
        error: str | None,
        message: str,
    ) -> None:
        body = build_payment_required(resource, pricing, self.terms, self.memos, error, message)
        await _json(send, 402, body.to_json_dict())


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


def _under(path: str, prefix: str) -> bool:
    return path == prefix or path.startswith(prefix.rstrip("/") + "/")


async def _json(
    send: Send, status: int, body: dict[str, Any], extra: tuple[tuple[bytes, bytes], ...] = ()
) -> None:
    data = json.dumps(body).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    headers += list(extra)
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})


def payment_gate(
    app: ASGIApp, /, pricing: dict[str, list[PricingEntry]], **kwargs: Any
) -> PaymentGate:
    """`paymentGate({pricing})` of the spec: `pricing` maps path prefixes to entries."""
    return PaymentGate(app, routes=pricing, **kwargs)
