"""The facilitator's ASGI app (its OpenAPI schema is served at GET /openapi.json).

Its routes live by concern in `svcpay.facilitator.api`:
- `payments`, public: POST /authorize (settle a one-time payment, answer its proof), POST
  /verify (an svcpay proof, or an x402 payment), POST /settle (x402), the MPP `charge`
  routes, GET /supported (x402's kinds, and the key gates trust);
- `provider` (Authorization: Bearer <API key>): metered usage, session vouchers, events,
  webhook endpoints and deliveries, analytics;
- `operations`: GET /health, GET /openapi.json.
People: the provider dashboard under /dashboard (`svcpay.facilitator.dashboard`, HTML).

Every other error is `{"error": Name, "message": what to do}` with a 4xx status; hostile
input never yields a 5xx. A request runs to its end even when its caller goes away
(`RunsToTheEnd`): a handler cancelled inside a SQLite transaction would leave that
transaction's write lock held, and every other writer answering 503, until the
abandoned connection is collected.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.routing import Mount
from starlette.types import ASGIApp, Receive, Scope, Send

from svcpay.facilitator.api.http import Guard, bug, http_error
from svcpay.facilitator.api.operations import Operations
from svcpay.facilitator.api.payments import Payments
from svcpay.facilitator.api.provider import ProviderApi
from svcpay.facilitator.dashboard.routes import dashboard_app
from svcpay.facilitator.service import Facilitator

log = logging.getLogger("svcpay.facilitator")


def create_app(facilitator: Facilitator, *, background: bool = True) -> Starlette:
    """The ASGI app. With `background`, its lifespan runs webhook delivery, the billing
    crank and the indexer (servers run the lifespan; in-process test clients may not)."""
    fac = facilitator
    guard = Guard(fac)
    running: set[asyncio.Task[None]] = set()  # requests in progress (RunsToTheEnd)

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
            if running:  # requests whose callers went away finish before the store closes
                await asyncio.wait(running, timeout=10)
            await fac.aclose()

    return Starlette(
        routes=[
            *Payments(fac).routes(guard),
            *Operations(fac).routes(guard),
            *ProviderApi(fac).routes(guard),
            Mount("/dashboard", app=dashboard_app(fac)),  # HTML for people, outside the API
        ],
        exception_handlers={HTTPException: http_error, Exception: bug},
        middleware=[Middleware(RunsToTheEnd, running=running)],
        lifespan=lifespan,
    )


class RunsToTheEnd:
    """Runs each HTTP request in a task of its own that a cancelled caller does not cancel:
    the caller's cancellation is raised to it at once, and the handler finishes its work
    (its answer goes nowhere; a failure of it is logged, since no caller sees it). An
    in-process caller's timeout, or a server's shutdown, never cuts a database transaction
    in half. `running` holds the requests in progress (the lifespan waits for them)."""

    def __init__(self, app: ASGIApp, running: set[asyncio.Task[None]] | None = None) -> None:
        self.app = app
        self._running = running if running is not None else set()  # held until done
        self._abandoned: set[asyncio.Task[None]] = set()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        task = asyncio.ensure_future(self.app(scope, receive, send))
        self._running.add(task)
        task.add_done_callback(self._done)
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            if not task.done():
                self._abandoned.add(task)
            raise

    def _done(self, task: asyncio.Task[None]) -> None:
        self._running.discard(task)
        abandoned = task in self._abandoned
        self._abandoned.discard(task)
        if task.cancelled():
            return
        error = task.exception()  # retrieved: a caller that waited has it raised too
        if abandoned and error is not None:
            log.error("a request whose caller went away failed", exc_info=error)
