"""The provider API (Authorization: Bearer <API key>): POST /v1/usage (metered usage; the
facilitator signs deduct_allowance), session vouchers and held sessions, GET /v1/events,
webhook endpoints (GET/POST /v1/webhooks, DELETE /v1/webhooks/{id},
GET /v1/webhooks/{id}/deliveries), GET /v1/analytics and GET /v1/analytics/chart.png."""

from __future__ import annotations

import asyncio
import time

from pydantic.alias_generators import to_camel
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from svcpay._extras import MissingExtra
from svcpay.facilitator import analytics
from svcpay.facilitator.api.http import BadRequest, Guard, error, query, request_body
from svcpay.facilitator.models import (
    EventsQuery,
    RangeQuery,
    SessionVouchersRequest,
    UsageRequest,
    WebhookRequest,
)
from svcpay.facilitator.service import Facilitator
from svcpay.facilitator.usage import UsageError
from svcpay.facilitator.webhooks import check_endpoint_url
from svcpay.protocol.voucher import SignedVoucher, VoucherError


class ProviderApi:
    def __init__(self, fac: Facilitator) -> None:
        self.fac = fac
        self.store = fac.store

    def routes(self, guard: Guard) -> list[Route]:
        own = guard.provider
        return [
            Route("/v1/usage", own(self.usage), methods=["POST"]),
            Route("/v1/events", own(self.events)),
            Route("/v1/sessions", own(self.sessions)),
            Route("/v1/sessions/vouchers", own(self.session_vouchers), methods=["POST"]),
            Route("/v1/webhooks", own(self.webhooks), methods=["GET", "POST"]),
            Route("/v1/webhooks/{endpoint_id}", own(self.webhook), methods=["DELETE"]),
            Route("/v1/webhooks/{endpoint_id}/deliveries", own(self.deliveries)),
            Route("/v1/analytics", own(self.analytics)),
            Route("/v1/analytics/chart.png", own(self.analytics_chart)),
        ]

    # -- metering and sessions ---------------------------------------------------------
    async def usage(self, request: Request, provider_id: str) -> Response:
        body = await request_body(request, UsageRequest)
        try:
            outcome = await self.fac.usage.report(
                provider_id, body.subscription, body.units, body.idempotency_key
            )
            return JSONResponse(outcome)
        except UsageError as e:
            reply = error(e.status, e.name, e.message)
            if e.retry_after is not None:  # transient: the same report, later
                reply.headers["Retry-After"] = str(e.retry_after)
            return reply

    async def session_vouchers(self, request: Request, provider_id: str) -> Response:
        body = await request_body(request, SessionVouchersRequest)
        vouchers = []
        for i, item in enumerate(body.vouchers):
            try:
                raw = item.model_dump(by_alias=True, exclude_none=True)
                vouchers.append(SignedVoucher.from_json_dict(raw))
            except VoucherError as e:
                raise BadRequest(f"vouchers.{i}: {e}") from e
        answers = await self.fac.sessions.report(provider_id, vouchers)
        return JSONResponse({"vouchers": answers})

    async def sessions(self, request: Request, provider_id: str) -> Response:
        rows = await self.store.sessions.of_provider(provider_id)
        return JSONResponse({"sessions": [r.to_json_dict() for r in rows]})

    # -- events and webhooks -----------------------------------------------------------
    async def events(self, request: Request, provider_id: str) -> Response:
        page = query(request, EventsQuery)
        found = await self.store.events.read(provider_id, after_seq=page.after, limit=page.limit)
        return JSONResponse(
            {
                "events": [e.to_json_dict() for e in found],
                "next": found[-1].seq if found else page.after,
            }
        )

    async def webhooks(self, request: Request, provider_id: str) -> Response:
        if request.method == "GET":
            found = await self.store.webhooks.endpoints(provider_id)
            return JSONResponse({"endpoints": [e.to_json_dict() for e in found]})
        body = await request_body(request, WebhookRequest)
        refused = check_endpoint_url(body.url, allow_local=self.fac.config.webhook_allow_local)
        if refused:
            raise BadRequest(refused)
        endpoint, secret = await self.store.webhooks.create_endpoint(
            provider_id, body.url, body.event_types
        )
        return JSONResponse({**endpoint.to_json_dict(), "secret": secret}, status_code=201)

    async def webhook(self, request: Request, provider_id: str) -> Response:
        endpoint_id = request.path_params["endpoint_id"]
        if not await self.store.webhooks.disable_endpoint(provider_id, endpoint_id):
            return error(404, "NotFound", "no such active webhook endpoint")
        return Response(status_code=204)

    async def deliveries(self, request: Request, provider_id: str) -> Response:
        endpoint_id = request.path_params["endpoint_id"]
        if endpoint_id not in {e.id for e in await self.store.webhooks.endpoints(provider_id)}:
            return error(404, "NotFound", "no such webhook endpoint")
        rows = await self.store.webhooks.deliveries(endpoint_id)
        keys = ("event_id", "status", "attempts", "last_status", "last_error", "delivered_at")
        return JSONResponse(
            {"deliveries": [{to_camel(k): r[k] for k in ("id", *keys)} for r in rows]}
        )

    # -- analytics ---------------------------------------------------------------------
    async def analytics(self, request: Request, provider_id: str) -> Response:
        start, end, mint = _range(request)
        return JSONResponse(
            await analytics.report(
                self.store, provider_id=provider_id, start=start, end=end, mint=mint
            )
        )

    async def analytics_chart(self, request: Request, provider_id: str) -> Response:
        start, end, mint = _range(request)
        data = await analytics.report(
            self.store, provider_id=provider_id, start=start, end=end, mint=mint
        )
        title = analytics.chart_title(data)
        try:
            png = await asyncio.to_thread(analytics.chart_png, data, title=title)
        except MissingExtra as e:  # served without matplotlib: the JSON report still works
            return error(501, "NotImplemented", str(e))
        return Response(png, media_type="image/png")


def _range(request: Request) -> tuple[int, int, str | None]:
    bounds = query(request, RangeQuery)
    params = {k: v for k, v in (("from", bounds.from_), ("to", bounds.to)) if v is not None}
    try:
        return (*analytics.parse_range(params, int(time.time())), bounds.mint)
    except ValueError as e:
        raise BadRequest(str(e)) from e
