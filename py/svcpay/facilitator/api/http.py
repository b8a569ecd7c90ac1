"""What every route of the facilitator's API shares: the error shape, the body and query
parsers, and the guards (`Guard`) that turn failures into answers: a 4xx for bad input, a
JSON 503 with Retry-After while the database or the RPC node is unreachable, a 500 only
for a bug."""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from pydantic import BaseModel
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from svcpay.facilitator.errors import SettlementError
from svcpay.facilitator.models import MAX_BODY, parse
from svcpay.facilitator.outage import DATABASE, RETRY_AFTER_SECS, Outage
from svcpay.facilitator.service import Facilitator
from svcpay.protocol.models import ProtocolError
from svcpay.schemes.x402_exact import facilitator as x402

log = logging.getLogger("svcpay.facilitator")
Handler = Callable[[Request], Awaitable[Response]]
ProviderHandler = Callable[[Request, str], Awaitable[Response]]
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
    return parsed(model, await json_body(request))


def parsed(model: type[M], body: dict[str, Any]) -> M:
    """`body` as `model`; a 400 naming the first defect otherwise."""
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
    return parsed(model, values)


def x402_request(body: dict[str, Any]) -> x402.Request:
    try:
        return x402.parse_request(body)
    except x402.BadRequest as e:
        raise BadRequest(e.message) from e


class Guard:
    """Wraps handlers so that every failure is an answer in the API's shape."""

    def __init__(self, fac: Facilitator) -> None:
        self.fac = fac

    def __call__(self, handler: Handler) -> Handler:
        """Every route's errors as JSON: a 4xx for bad input, a 503 with Retry-After while
        the database or the RPC node is unreachable (logged once per outage), and a 500
        only for a bug (logged with its traceback)."""
        fac = self.fac

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

    def provider(self, handler: ProviderHandler) -> Handler:
        """`handler` for a provider (Authorization: Bearer <API key>), given its id; a 401
        without a live key."""
        keys = self.fac.store.api_keys

        async def run(request: Request) -> Response:
            auth = request.headers.get("authorization", "")
            scheme, _, key = auth.partition(" ")
            if scheme.lower() != "bearer" or not key:
                return error(401, "Unauthorized", "send Authorization: Bearer <API key>")
            provider_id = await keys.authenticate(key.strip())
            if provider_id is None:
                return error(401, "Unauthorized", "the API key is unknown or revoked")
            return await handler(request, provider_id)

        return self(run)


async def http_error(request: Request, exc: Exception) -> Response:
    """Starlette's own answers (no such route, a method the route lacks) in the API's shape."""
    assert isinstance(exc, HTTPException)
    names = {404: "NotFound", 405: "MethodNotAllowed"}
    return JSONResponse(
        {"error": names.get(exc.status_code, "InvalidRequest"), "message": exc.detail},
        status_code=exc.status_code,
        headers=exc.headers,
    )


async def bug(request: Request, exc: Exception) -> Response:
    """What escaped every route's guard (Starlette's last resort): JSON, not plain text."""
    return error(500, "InternalError", "the facilitator failed; this is a bug")
