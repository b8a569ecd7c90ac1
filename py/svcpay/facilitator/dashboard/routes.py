"""The dashboard's pages and forms (an ASGI app that `create_app` mounts at /dashboard).

GET pages need a provider's session (else a 303 to the login page); every POST needs the
session's CSRF token in the form's `csrf` field (else a 403 saying so). Every answer is
HTML with a strict Content-Security-Policy: no script runs, styles come from our one
stylesheet, forms post only here, and no page can be framed.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from decimal import Decimal
from importlib import resources
from typing import Any
from urllib.parse import parse_qs

import jinja2
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from svcpay.facilitator import analytics
from svcpay.facilitator.dashboard import views
from svcpay.facilitator.dashboard.auth import Cookies, Session, signing_secret
from svcpay.facilitator.outage import DATABASE, RETRY_AFTER_SECS, RPC
from svcpay.facilitator.service import Facilitator
from svcpay.facilitator.store.providers import key_id
from svcpay.protocol.models import check_address
from svcpay.protocol.stablecoins import name_of

log = logging.getLogger("svcpay.facilitator.dashboard")

MAX_FORM = 8192
WHAT = {DATABASE: "database", RPC: "RPC node"}  # an outage named for people
HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; "
        "frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
    "Referrer-Policy": "same-origin",
    "X-Frame-Options": "DENY",
}
NAV = [
    ("/", "Overview"),
    ("/subscriptions", "Subscriptions"),
    ("/events", "Payments and events"),
    ("/webhooks", "Webhooks"),
    ("/keys", "API keys"),
    ("/sessions", "Sessions"),
]
Page = Callable[[Request, Session], Awaitable[Response]]


class Forbidden(Exception):
    """A POST without the session's CSRF token (answered 403)."""


def _when(ts: Any) -> str:
    if ts is None or ts == "":
        return "—"
    return datetime.fromtimestamp(int(ts), UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


# What amounts are shown with: USDC, USDT, PYUSD and USDG all have 6 decimals (the events
# and the analytics API keep base units; the dashboard shows tokens).
DECIMALS = 6


def _is_address(text: str) -> bool:
    try:
        check_address(text, "mint")
    except ValueError:
        return False
    return True


def _mint_name(mint: str | None) -> str:
    """A mint as a person reads it: its stablecoin's symbol, else its address."""
    if mint is None:
        return "an unknown mint"
    return name_of(mint) or mint


def _tokens(units: Any) -> str:
    """12500000 -> "12.50" (at least two decimals, the rest only when not zero)."""
    if units is None or units == "":
        return "—"
    whole, _, frac = f"{Decimal(int(units)).scaleb(-DECIMALS):,.{DECIMALS}f}".partition(".")
    return f"{whole}.{frac.rstrip('0').ljust(2, '0')}"


def _templates() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("svcpay.facilitator.dashboard", "templates"),
        autoescape=True,  # every value is text: a <script> in a URL or plan shows as text
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["when"] = _when
    env.filters["tokens"] = _tokens
    env.filters["mint_name"] = _mint_name
    env.filters["pretty"] = lambda data: json.dumps(data, indent=2, ensure_ascii=False)
    return env


def security_headers(app: ASGIApp) -> ASGIApp:
    """`app` with HEADERS on every answer (errors and the stylesheet too)."""

    async def wrapped(scope: Scope, receive: Receive, send: Send) -> None:
        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                names = {k.lower() for k, _ in message.get("headers", [])}
                message["headers"] = [
                    *message.get("headers", []),
                    *(
                        (k.lower().encode(), v.encode())
                        for k, v in HEADERS.items()
                        if k.lower().encode() not in names
                    ),
                ]
            await send(message)

        await app(scope, receive, sending)

    return wrapped


class Dashboard:
    def __init__(self, facilitator: Facilitator) -> None:
        self.fac = facilitator
        self.store = facilitator.store
        config = facilitator.config
        self.cookies = Cookies(signing_secret(facilitator.keypair, config.dashboard_secret))
        self.templates = _templates()
        self.css = (
            resources.files("svcpay.facilitator.dashboard")
            .joinpath("static/dashboard.css")
            .read_bytes()
        )

    # -- plumbing -------------------------------------------------------------------------
    def render(
        self,
        request: Request,
        template: str,
        session: Session | None,
        status: int = 200,
        headers: dict[str, str] | None = None,
        **context: Any,
    ) -> HTMLResponse:
        html = self.templates.get_template(template).render(
            root=request.scope.get("root_path", ""),
            nav=NAV,
            active=context.pop("active", ""),
            provider=context.pop("provider", None),
            csrf=session.csrf if session else "",
            **context,
        )
        return HTMLResponse(html, status_code=status, headers=headers)

    def redirect(self, request: Request, path: str) -> RedirectResponse:
        return RedirectResponse(f"{request.scope.get('root_path', '')}{path}", status_code=303)

    async def provider_session(self, request: Request) -> Session | None:
        """The request's session if it names a provider whose key is still live."""
        session = self.cookies.load(request)
        if session is None or session.provider_id is None or session.key_id is None:
            return None
        owner = await self.store.api_keys.live_owner(session.key_id)
        return session if owner == session.provider_id else None

    def page(
        self, handler: Page, *, form: bool = False
    ) -> Callable[[Request], Awaitable[Response]]:
        """`handler` for a provider's session (a 303 to the login page without one); a
        `form` needs the session's CSRF token too."""

        async def run(request: Request) -> Response:
            return await self.guarded(request, handler, form)

        return run

    async def guarded(self, request: Request, handler: Page, form: bool) -> Response:
        try:
            session = await self.provider_session(request)
            if session is None:
                if form:
                    raise Forbidden("your session has ended; log in again")
                return self.redirect(request, "/login")
            if form:
                await self.check_csrf(request, session)
            return await handler(request, session)
        except Forbidden as e:
            return self.render(request, "error.html", None, 403, title="Forbidden", reason=str(e))
        except HTTPException:
            raise
        except Exception as e:
            return self.failure(request, e)

    def failure(self, request: Request, e: Exception) -> Response:
        """An HTML 503 with Retry-After while the database (or RPC node) is unreachable, as
        the API answers, else a 500 (a bug)."""
        if (down := self.fac.dependencies.failed(e)) is not None:
            return self.render(
                request, "error.html", None, 503, {"Retry-After": str(RETRY_AFTER_SECS)},
                title="Unavailable",
                reason=f"the facilitator's {WHAT[down.dependency]} is unreachable; try again in "
                f"{RETRY_AFTER_SECS} s",
            )  # fmt: skip
        log.exception("%s %s failed", request.method, request.url.path)
        return self.render(request, "error.html", None, 500, title="Error", reason="a bug")

    def safe(self, handler: Callable[[Request], Awaitable[Response]]) -> Any:
        """A handler without a provider's session (the login page and form), guarded."""

        async def run(request: Request) -> Response:
            try:
                return await handler(request)
            except HTTPException:
                raise
            except Exception as e:
                return self.failure(request, e)

        return run

    async def form(self, request: Request) -> dict[str, str]:
        """The urlencoded form (the first value of each field); Forbidden if too large or
        not UTF-8."""
        raw = b""
        async for chunk in request.stream():
            raw += chunk
            if len(raw) > MAX_FORM:
                raise Forbidden("the form is too large")
        try:
            fields = parse_qs(raw.decode(), max_num_fields=20, strict_parsing=False)
        except (UnicodeDecodeError, ValueError) as e:
            raise Forbidden("the form is malformed") from e
        request.state.form = {k: v[0] for k, v in fields.items()}
        return dict(request.state.form)

    async def check_csrf(self, request: Request, session: Session) -> None:
        fields = await self.form(request)
        if not session.csrf_ok(fields.get("csrf")):
            raise Forbidden("the form's CSRF token is missing or wrong; reload the page")

    async def context(self, session: Session) -> dict[str, Any]:
        assert session.provider_id is not None
        provider = await self.store.providers.get(session.provider_id)
        return {"provider": provider or {"id": session.provider_id, "name": ""}}

    # -- login ----------------------------------------------------------------------------
    async def login_page(self, request: Request) -> Response:
        if await self.provider_session(request) is not None:
            return self.redirect(request, "/")
        session = self.cookies.load(request) or Session.visitor()
        response = self.render(request, "login.html", session, title="Log in")
        self.cookies.set(response, request, session)
        return response

    async def login(self, request: Request) -> Response:
        visitor = self.cookies.load(request)
        try:
            if visitor is None:
                raise Forbidden("the login form has expired; reload the page")
            fields = await self.form(request)
            if not visitor.csrf_ok(fields.get("csrf")):
                raise Forbidden("the form's CSRF token is missing or wrong; reload the page")
        except Forbidden as e:
            return self.render(request, "error.html", None, 403, title="Forbidden", reason=str(e))
        key = fields.get("api_key", "").strip()
        provider_id = await self.store.api_keys.authenticate(key) if key else None
        if provider_id is None:
            return self.render(
                request, "login.html", visitor, 401, title="Log in",
                error="That API key is unknown or revoked.",
            )  # fmt: skip
        response = self.redirect(request, "/")
        self.cookies.set(response, request, Session.provider(provider_id, key_id(key)))
        return response

    async def logout(self, request: Request, session: Session) -> Response:
        response = self.redirect(request, "/login")
        self.cookies.clear(response, request)
        return response

    async def css_file(self, request: Request) -> Response:
        return Response(self.css, media_type="text/css")

    # -- pages ----------------------------------------------------------------------------
    async def overview(self, request: Request, session: Session) -> Response:
        assert session.provider_id is not None
        params = {k: request.query_params[k] for k in ("from", "to") if k in request.query_params}
        error = None
        try:
            start, end = analytics.parse_range(params, int(time.time()))
        except ValueError as e:
            error, (start, end) = str(e), analytics.parse_range({}, int(time.time()))
        mint = request.query_params.get("mint") or None
        if mint is not None and not _is_address(mint):
            error, mint = f"not a mint address: {mint[:64]!r}", None
        report = await analytics.report(
            self.store, provider_id=session.provider_id, start=start, end=end, mint=mint
        )
        return self.render(
            request, "overview.html", session, title="Overview", active="/",
            report=report, bars=views.revenue_bars(report["days"]), range_error=error,
            chart_w=views.CHART_W, chart_h=views.CHART_H + 2 * views.CHART_PAD,
            **await self.context(session),
        )  # fmt: skip

    async def subscriptions(self, request: Request, session: Session) -> Response:
        assert session.provider_id is not None
        found = await self.store.events.of_subscriptions(session.provider_id)
        return self.render(
            request, "subscriptions.html", session, title="Subscriptions",
            active="/subscriptions", subscriptions=views.subscriptions(found), now=time.time(),
            **await self.context(session),
        )  # fmt: skip

    async def events(self, request: Request, session: Session) -> Response:
        assert session.provider_id is not None
        before = request.query_params.get("before", "")
        before_seq = int(before) if before.isascii() and before.isdigit() and before else None
        found = await self.store.events.latest(
            session.provider_id, before_seq=before_seq, limit=100
        )
        return self.render(
            request, "events.html", session, title="Payments and events", active="/events",
            events=found, older=found[-1].seq if len(found) == 100 else None,
            **await self.context(session),
        )  # fmt: skip

    async def webhooks(self, request: Request, session: Session, **extra: Any) -> Response:
        assert session.provider_id is not None
        endpoints = await self.store.webhooks.endpoints(session.provider_id)
        deliveries = await self.store.webhooks.recent_deliveries(session.provider_id)
        return self.render(
            request, "webhooks.html", session, title="Webhooks", active="/webhooks",
            endpoints=endpoints, deliveries=deliveries, **extra,
            **await self.context(session),
        )  # fmt: skip

    async def resend(self, request: Request, session: Session) -> Response:
        assert session.provider_id is not None
        raw = request.path_params["delivery_id"]
        ok = raw.isascii() and raw.isdigit() and len(raw) < 19
        if not (ok and await self.store.webhooks.resend(session.provider_id, int(raw))):
            return await self.webhooks(
                request, session, notice="No failed delivery of yours has that id."
            )
        return self.redirect(request, "/webhooks")

    async def keys(self, request: Request, session: Session, **extra: Any) -> Response:
        assert session.provider_id is not None
        return self.render(
            request, "keys.html", session, title="API keys", active="/keys",
            keys=await self.store.api_keys.of_provider(session.provider_id),
            current=session.key_id, **extra, **await self.context(session),
        )  # fmt: skip

    async def create_key(self, request: Request, session: Session) -> Response:
        assert session.provider_id is not None
        label = request.state.form.get("label", "").strip()[:200] or "dashboard"
        _, key = await self.store.api_keys.create(session.provider_id, label)
        return await self.keys(request, session, new_key=key)

    async def revoke_key(self, request: Request, session: Session) -> Response:
        assert session.provider_id is not None
        kid = request.path_params["key_id"]
        if not await self.store.api_keys.revoke(kid, provider_id=session.provider_id):
            return await self.keys(request, session, notice="No live key of yours has that id.")
        return self.redirect(request, "/keys" if kid != session.key_id else "/login")

    async def sessions(self, request: Request, session: Session) -> Response:
        assert session.provider_id is not None
        return self.render(
            request, "sessions.html", session, title="Sessions", active="/sessions",
            sessions=await self.store.sessions.of_provider(session.provider_id),
            **await self.context(session),
        )  # fmt: skip

    async def not_found(self, request: Request, exc: Exception) -> Response:
        status = exc.status_code if isinstance(exc, HTTPException) else 500
        reason = {404: "There is no such page.", 405: "That method is not allowed here."}
        return self.render(
            request, "error.html", None, status, title="Not found" if status == 404 else "Error",
            reason=reason.get(status, "The request failed."),
        )  # fmt: skip

    def app(self) -> ASGIApp:
        page = self.page
        routes = [
            Route("/", page(self.overview)),
            Route("/login", self.safe(self.login_page)),
            Route("/login", self.safe(self.login), methods=["POST"]),
            Route("/logout", page(self.logout, form=True), methods=["POST"]),
            Route("/static/dashboard.css", self.css_file),
            Route("/subscriptions", page(self.subscriptions)),
            Route("/events", page(self.events)),
            Route("/webhooks", page(self.webhooks)),
            Route(
                "/webhooks/deliveries/{delivery_id}/resend",
                page(self.resend, form=True),
                methods=["POST"],
            ),
            Route("/keys", page(self.keys)),
            Route("/keys", page(self.create_key, form=True), methods=["POST"]),
            Route("/keys/{key_id}/revoke", page(self.revoke_key, form=True), methods=["POST"]),
            Route("/sessions", page(self.sessions)),
        ]
        app = Starlette(routes=routes, exception_handlers={HTTPException: self.not_found})
        return security_headers(app)


def dashboard_app(facilitator: Facilitator) -> ASGIApp:
    """The provider dashboard, to mount at /dashboard."""
    return Dashboard(facilitator).app()
