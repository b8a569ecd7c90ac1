"""The facilitator's HTTP API (its OpenAPI schema is served at GET /openapi.json).

Public: POST /authorize (settle a one-time payment, answer its proof), POST /verify (an
svcpay proof, or an x402 payment), POST /settle (x402), GET /supported (x402's kinds, and
the key gates trust), GET /health. x402's /verify and /settle answer every payment with
HTTP 200 and x402's reason strings (`svcpay.schemes.x402_exact.facilitator`).
Providers (Authorization: Bearer <API key>): POST /v1/usage (metered usage; the facilitator
signs deduct_allowance), GET /v1/events, webhook endpoints (GET/POST /v1/webhooks,
DELETE /v1/webhooks/{id}, GET /v1/webhooks/{id}/deliveries), GET /v1/analytics and
GET /v1/analytics/chart.png.
People: the provider dashboard under /dashboard (`svcpay.facilitator.dashboard`, HTML).

Every other error is `{"error": Name, "message": what to do}` with a 4xx status; hostile
input never yields a 5xx.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

from pydantic import BaseModel
from pydantic.alias_generators import to_camel
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route

from svcpay._extras import MissingExtra
from svcpay.facilitator import analytics
from svcpay.facilitator.answers import Verdict
from svcpay.facilitator.dashboard.routes import dashboard_app
from svcpay.facilitator.errors import SettlementError
from svcpay.facilitator.lifecycle import EVENT_TYPES
from svcpay.facilitator.models import (
    MAX_BODY,
    AuthorizeRequest,
    EventsQuery,
    RangeQuery,
    SessionVouchersRequest,
    UsageRequest,
    VerifyRequest,
    WebhookRequest,
    parse,
)
from svcpay.facilitator.openapi import schema
from svcpay.facilitator.outage import DATABASE, RETRY_AFTER_SECS, Outage
from svcpay.facilitator.service import Facilitator
from svcpay.facilitator.usage import UsageError
from svcpay.facilitator.webhooks import check_endpoint_url
from svcpay.protocol.models import ProtocolError
from svcpay.protocol.voucher import SignedVoucher, VoucherError
from svcpay.schemes.x402_exact import facilitator as x402

# /health: below this the fee payer is "low" (about 200 transactions' fees at 5,000 lamports a
# signature); the RPC node gets this long to answer.
MIN_FEE_PAYER_LAMPORTS = 1_000_000
HEALTH_RPC_TIMEOUT_SECS = 2.0
log = logging.getLogger("svcpay.facilitator")
Handler = Callable[[Request], Awaitable[Response]]
M = TypeVar("M", bound=BaseModel)


def error(status: int, name: str, message: str) -> JSONResponse:
    """The API's error shape; a 503 says when to retry (`Retry-After`)."""
    headers = {"Retry-After": str(RETRY_AFTER_SECS)} if status == 503 else None
    return JSONResponse({"error": name, "message": message}, status_code=status, headers=headers)


def unavailable(found: Outage) -> JSONResponse:
    """A JSON 503 for an outage of the database or the RPC node: the same request succeeds
    once it is back (a payment is settled at most once however often it is sent)."""
    name = "DatabaseUnavailable" if found.dependency == DATABASE else "RpcUnavailable"
    what = "the database" if found.dependency == DATABASE else "the RPC node"
    return error(
        503, name, f"{what} is unreachable; send the same request again in {RETRY_AFTER_SECS} s"
    )


class BadRequest(Exception):
    def __init__(self, message: str, status: int = 400, name: str = "InvalidRequest") -> None:
        super().__init__(message)
        self.message, self.status, self.name = message, status, name


async def json_body(request: Request) -> dict[str, Any]:
    declared = request.headers.get("content-length", "")
    if declared.isascii() and declared.isdigit() and int(declared) > MAX_BODY:
        raise BadRequest(f"the body exceeds {MAX_BODY} bytes", 413, "RequestTooLarge")
    raw = b""
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > MAX_BODY:
            raise BadRequest(f"the body exceeds {MAX_BODY} bytes", 413, "RequestTooLarge")
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError) as e:  # RecursionError: nested too deep
        raise BadRequest("the body must be a JSON object") from e
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    return body


async def request_body(request: Request, model: type[M]) -> M:
    """The body as `model` (`svcpay.facilitator.models`, whose schemas the OpenAPI document
    holds): a 400 naming the first defect otherwise."""
    body = await json_body(request)
    try:
        return parse(model, body)
    except ProtocolError as e:
        raise BadRequest(e.reason) from e


def query(request: Request, model: type[M]) -> M:
    """The query parameters `model` names, as `model` (integers in ASCII digits); a 400
    naming the first defect otherwise. Others are ignored."""
    values: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        key = field.alias or name
        raw = request.query_params.get(key)
        if raw is not None:
            number = field.annotation is int and raw.isascii() and raw.isdigit()
            values[key] = int(raw) if number and len(raw) <= 30 else raw
    try:
        return parse(model, values)
    except ProtocolError as e:
        raise BadRequest(e.reason) from e


def x402_request(body: dict[str, Any]) -> x402.Request:
    try:
        return x402.parse_request(body)
    except x402.BadRequest as e:
        raise BadRequest(e.message) from e


def create_app(facilitator: Facilitator, *, background: bool = True) -> Starlette:
    """The ASGI app. With `background`, its lifespan runs webhook delivery, the billing
    crank and the indexer (servers run the lifespan; in-process test clients may not)."""
    fac = facilitator
    store = fac.store

    def guarded(handler: Handler) -> Handler:
        """Every route's errors as JSON: a 4xx for bad input, a 503 with Retry-After while
        the database or the RPC node is unreachable (logged once per outage), and a 500
        only for a bug (logged with its traceback)."""

        async def run(request: Request) -> Response:
            try:
                return await handler(request)
            except BadRequest as e:
                return error(e.status, e.name, e.message)
            except SettlementError as e:
                if e.status == 503:  # the RPC node did not answer: its state changes
                    fac.dependencies.failed(e)
                return error(e.status, e.name, e.message)
            except Exception as e:
                found = fac.dependencies.failed(e)
                if found is not None:
                    return unavailable(found)
                log.exception("%s %s failed", request.method, request.url.path)
                return error(500, "InternalError", "the facilitator failed; this is a bug")

        return run

    def provider_only(handler: Callable[[Request, str], Awaitable[Response]]) -> Handler:
        async def run(request: Request) -> Response:
            auth = request.headers.get("authorization", "")
            scheme, _, key = auth.partition(" ")
            if scheme.lower() != "bearer" or not key:
                return error(401, "Unauthorized", "send Authorization: Bearer <API key>")
            provider_id = await store.api_keys.authenticate(key.strip())
            if provider_id is None:
                return error(401, "Unauthorized", "the API key is unknown or revoked")
            return await handler(request, provider_id)

        return guarded(run)

    async def authorize(request: Request) -> Response:
        body = await request_body(request, AuthorizeRequest)
        option = body.payment_requirements
        if option.is_subscription or option.network != fac.config.network:
            raise BadRequest(f"only one-time {fac.config.network} payments are settled here")
        proof = await fac.settler.authorize(body.transaction, option)
        return JSONResponse(proof.to_json_dict())

    async def verify(request: Request) -> Response:
        """An x402 request (a body with `x402Version`) -> x402's VerifyResponse; svcpay's
        `{"proof": {...}}` -> `{"valid": bool, "reason": str}`: the proof is this
        facilitator's, unexpired, and its transaction succeeded on chain."""
        body = await json_body(request)
        if "x402Version" in body:
            verdict = await fac.x402.verify(x402_request(body))
            return JSONResponse(verdict.to_json_dict())
        try:
            proof = parse(VerifyRequest, body).proof
        except ProtocolError as e:
            raise BadRequest(e.reason) from e
        reason = await fac.settler.check_proof(proof)
        return JSONResponse(Verdict(valid=reason is None, reason=reason or "").model_dump())

    async def settle(request: Request) -> Response:
        """x402's settle: HTTP 200 with `success` and x402's reason for every payment."""
        outcome = await fac.x402.settle(x402_request(await json_body(request)))
        return JSONResponse(outcome.to_json_dict())

    async def mpp_charge_settle(request: Request) -> Response:
        """MPP Solana `charge`, pulled: check, co-sign, send, confirm (HTTP 200 for every
        payment, `ChargeAnswer`)."""
        try:
            answer = await fac.mpp_charge.settle(await json_body(request))
        except ProtocolError as e:
            raise BadRequest(e.reason) from e
        return JSONResponse(answer.to_json_dict())

    async def mpp_charge_verify(request: Request) -> Response:
        """MPP Solana `charge`, pushed: find the payer's transaction, check, record once."""
        try:
            answer = await fac.mpp_charge.verify(await json_body(request))
        except ProtocolError as e:
            raise BadRequest(e.reason) from e
        return JSONResponse(answer.to_json_dict())

    async def supported(request: Request) -> Response:
        """x402's SupportedResponse, with svcpay's own fields beside it."""
        return JSONResponse(
            {
                **fac.x402.supported().to_json_dict(),
                "feePayer": fac.public_key,
                "facilitatorKey": fac.public_key,
                "eventTypes": list(EVENT_TYPES),
            }
        )

    async def health(request: Request) -> Response:
        """200 when the database and the RPC node answer and the fee payer can pay fees; 503
        (for load balancers and monitors) naming what is down otherwise."""
        database, balance = await asyncio.gather(store.ping(), fee_payer_balance())
        low = balance is not None and balance < MIN_FEE_PAYER_LAMPORTS
        body = {
            "status": "ok" if database and balance is not None and not low else "degraded",
            "database": "ok" if database else "unreachable",
            "rpc": "ok" if balance is not None else "unreachable",
            "feePayer": {
                "address": fac.public_key,
                "lamports": balance,
                "status": "unknown" if balance is None else "low" if low else "ok",
            },
        }
        if body["status"] == "ok":
            return JSONResponse(body)
        return JSONResponse(body, 503, headers={"Retry-After": str(RETRY_AFTER_SECS)})

    async def fee_payer_balance() -> int | None:
        """The fee payer's lamports, or None when the RPC node does not answer in time."""
        try:
            reply = await asyncio.wait_for(
                fac.rpc.get_balance(fac.keypair.pubkey()), HEALTH_RPC_TIMEOUT_SECS
            )
            return int(reply.value)
        except Exception:  # any failure to get an answer is "unreachable" to a monitor
            return None

    async def openapi(request: Request) -> Response:
        return JSONResponse(schema())

    # -- provider API -------------------------------------------------------------------
    async def usage(request: Request, provider_id: str) -> Response:
        body = await request_body(request, UsageRequest)
        try:
            outcome = await fac.usage.report(
                provider_id, body.subscription, body.units, body.idempotency_key
            )
            return JSONResponse(outcome)
        except UsageError as e:
            reply = error(e.status, e.name, e.message)
            if e.retry_after is not None:  # transient: the same report, later
                reply.headers["Retry-After"] = str(e.retry_after)
            return reply

    async def session_vouchers(request: Request, provider_id: str) -> Response:
        body = await request_body(request, SessionVouchersRequest)
        vouchers = []
        for i, item in enumerate(body.vouchers):
            try:
                raw = item.model_dump(by_alias=True, exclude_none=True)
                vouchers.append(SignedVoucher.from_json_dict(raw))
            except VoucherError as e:
                raise BadRequest(f"vouchers.{i}: {e}") from e
        answers = await fac.sessions.report(provider_id, vouchers)
        return JSONResponse({"vouchers": answers})

    async def held_sessions(request: Request, provider_id: str) -> Response:
        rows = await store.sessions.of_provider(provider_id)
        return JSONResponse({"sessions": [r.to_json_dict() for r in rows]})

    async def list_events(request: Request, provider_id: str) -> Response:
        page = query(request, EventsQuery)
        found = await store.events.read(provider_id, after_seq=page.after, limit=page.limit)
        return JSONResponse(
            {
                "events": [e.to_json_dict() for e in found],
                "next": found[-1].seq if found else page.after,
            }
        )

    async def webhooks(request: Request, provider_id: str) -> Response:
        if request.method == "GET":
            found = await store.webhooks.endpoints(provider_id)
            return JSONResponse({"endpoints": [e.to_json_dict() for e in found]})
        body = await request_body(request, WebhookRequest)
        refused = check_endpoint_url(body.url, allow_local=fac.config.webhook_allow_local)
        if refused:
            raise BadRequest(refused)
        endpoint, secret = await store.webhooks.create_endpoint(
            provider_id, body.url, body.event_types
        )
        return JSONResponse({**endpoint.to_json_dict(), "secret": secret}, status_code=201)

    async def webhook(request: Request, provider_id: str) -> Response:
        endpoint_id = request.path_params["endpoint_id"]
        if not await store.webhooks.disable_endpoint(provider_id, endpoint_id):
            return error(404, "NotFound", "no such active webhook endpoint")
        return Response(status_code=204)

    async def deliveries(request: Request, provider_id: str) -> Response:
        endpoint_id = request.path_params["endpoint_id"]
        if endpoint_id not in {e.id for e in await store.webhooks.endpoints(provider_id)}:
            return error(404, "NotFound", "no such webhook endpoint")
        rows = await store.webhooks.deliveries(endpoint_id)
        keys = ("event_id", "status", "attempts", "last_status", "last_error", "delivered_at")
        return JSONResponse(
            {"deliveries": [{to_camel(k): r[k] for k in ("id", *keys)} for r in rows]}
        )

    async def analytics_json(request: Request, provider_id: str) -> Response:
        start, end = _range(request)
        return JSONResponse(
            await analytics.report(store, provider_id=provider_id, start=start, end=end)
        )

    async def analytics_chart(request: Request, provider_id: str) -> Response:
        start, end = _range(request)
        data = await analytics.report(store, provider_id=provider_id, start=start, end=end)
        title = f"svcpay: {data['from']} to {data['to']}"
        try:
            png = await asyncio.to_thread(analytics.chart_png, data, title=title)
        except MissingExtra as e:  # served without matplotlib: the JSON report still works
            return error(501, "NotImplemented", str(e))
        return Response(png, media_type="image/png")

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        stop = asyncio.Event()
        task = asyncio.create_task(fac.run_background(stop)) if background else None
        try:
            yield
        finally:
            stop.set()
            if task:
                await task
            await fac.aclose()

    return Starlette(
        routes=[
            Route("/authorize", guarded(authorize), methods=["POST"]),
            Route("/verify", guarded(verify), methods=["POST"]),
            Route("/settle", guarded(settle), methods=["POST"]),
            Route("/mpp/charge/settle", guarded(mpp_charge_settle), methods=["POST"]),
            Route("/mpp/charge/verify", guarded(mpp_charge_verify), methods=["POST"]),
            Route("/supported", guarded(supported)),
            Route("/health", guarded(health)),
            Route("/openapi.json", guarded(openapi)),
            Route("/v1/usage", provider_only(usage), methods=["POST"]),
            Route("/v1/events", provider_only(list_events)),
            Route("/v1/sessions", provider_only(held_sessions)),
            Route("/v1/sessions/vouchers", provider_only(session_vouchers), methods=["POST"]),
            Route("/v1/webhooks", provider_only(webhooks), methods=["GET", "POST"]),
            Route("/v1/webhooks/{endpoint_id}", provider_only(webhook), methods=["DELETE"]),
            Route("/v1/webhooks/{endpoint_id}/deliveries", provider_only(deliveries)),
            Route("/v1/analytics", provider_only(analytics_json)),
            Route("/v1/analytics/chart.png", provider_only(analytics_chart)),
            Mount("/dashboard", app=dashboard_app(fac)),  # HTML for people, outside the API
        ],
        exception_handlers={HTTPException: _http_error, Exception: _bug},
        lifespan=lifespan,
    )


async def _http_error(request: Request, exc: Exception) -> Response:
    """Starlette's own answers (no such route, a method the route lacks) in the API's shape."""
    assert isinstance(exc, HTTPException)
    names = {404: "NotFound", 405: "MethodNotAllowed"}
    return JSONResponse(
        {"error": names.get(exc.status_code, "InvalidRequest"), "message": exc.detail},
        status_code=exc.status_code,
        headers=exc.headers,
    )


async def _bug(request: Request, exc: Exception) -> Response:
    """What escaped every route's guard (Starlette's last resort): JSON, not plain text."""
    return error(500, "InternalError", "the facilitator failed; this is a bug")


def _range(request: Request) -> tuple[int, int]:
    bounds = query(request, RangeQuery)
    params = {k: v for k, v in (("from", bounds.from_), ("to", bounds.to)) if v is not None}
    try:
        return analytics.parse_range(params, int(time.time()))
    except ValueError as e:
        raise BadRequest(str(e)) from e
