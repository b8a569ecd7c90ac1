"""How a gate asks any x402 facilitator (svcpay's, the SDK's, PayAI, ...) to verify and settle:
`POST {url}/verify` and `POST {url}/settle` with `{x402Version, paymentPayload,
paymentRequirements}`, answered HTTP 200 with a `VerifyResponse` / `SettleResponse`.
Calls go over svcpay's keep-alive client (`svcpay.keepalive`, docs/adr/0027: about 30 µs
of CPU a call, where httpx spends about a millisecond), or over a given httpx client.
Anything else (unreachable, timeout, another status, an answer that is not one) raises
`FacilitatorUnavailable`, which the gate turns into a 503 with Retry-After.
"""

from __future__ import annotations

import json
from typing import Any, Protocol, TypeVar

import httpx
from pydantic import BaseModel, ValidationError

from svcpay.keepalive import Broken, KeepAliveClient, Unreachable
from svcpay.schemes.x402_exact.wire import SettleResponse, Supported, VerifyResponse

M = TypeVar("M", bound=BaseModel)


class FacilitatorUnavailable(Exception):
    """The facilitator could not be asked, or did not answer as x402 says it must.
    `maybe_sent`: the request may have reached it (a read timeout, a dropped connection,
    a 5xx), so a settle may be under way; False when it surely did not (no connection)."""

    def __init__(self, message: str, *, maybe_sent: bool = True) -> None:
        super().__init__(message)
        self.maybe_sent = maybe_sent


class X402Facilitator(Protocol):
    async def verify(
        self, version: int, payload: dict[str, Any], requirements: dict[str, Any]
    ) -> VerifyResponse: ...

    async def settle(
        self, version: int, payload: dict[str, Any], requirements: dict[str, Any]
    ) -> SettleResponse: ...


class X402FacilitatorClient:
    """An x402 facilitator over HTTP.

    Args:
        url: the facilitator's base URL (its `/verify` and `/settle` are below it).
        http: an httpx.AsyncClient to use instead of the keep-alive client (tests pass
            one bound to an ASGI app); `url` is then joined to its base URL.
        timeout: seconds per call; settling waits for the transaction to be confirmed, so
            keep it above the cluster's confirmation time.
        headers: extra headers on every call (an API key, for facilitators that need one).
        max_connections: connections to the facilitator, at most (calls beyond wait).
    """

    def __init__(
        self,
        url: str,
        *,
        http: httpx.AsyncClient | None = None,
        timeout: float = 30.0,
        headers: dict[str, str] | None = None,
        max_connections: int = 64,
    ) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.headers = dict(headers or {})
        self._http, self._own = http, http is None
        self._pool = (
            KeepAliveClient(self.url, max_connections=max_connections, timeout=timeout)
            if http is None
            else None
        )

    async def verify(
        self, version: int, payload: dict[str, Any], requirements: dict[str, Any]
    ) -> VerifyResponse:
        return await self._post("/verify", version, payload, requirements, VerifyResponse)

    async def settle(
        self, version: int, payload: dict[str, Any], requirements: dict[str, Any]
    ) -> SettleResponse:
        return await self._post("/settle", version, payload, requirements, SettleResponse)

    async def supported(self) -> Supported:
        """`GET /supported`: the kinds it settles and their `extra.feePayer`."""
        try:
            reply = await self._client().get(self.url + "/supported", headers=self.headers)
        except httpx.HTTPError as e:
            raise FacilitatorUnavailable(f"{self.url}/supported: {_describe(e)}") from e
        return _answer(reply.status_code, reply.content, f"{self.url}/supported", Supported)

    async def aclose(self) -> None:
        if self._own and self._http is not None:
            await self._http.aclose()
        self._http = None if self._own else self._http
        if self._pool is not None:
            await self._pool.aclose()

    def _client(self) -> httpx.AsyncClient:
        if self._http is None:  # made on first use, on the loop that serves the gate
            self._http = httpx.AsyncClient(timeout=self.timeout)
        return self._http

    async def _post(
        self,
        path: str,
        version: int,
        payload: dict[str, Any],
        requirements: dict[str, Any],
        model: type[M],
    ) -> M:
        body = {
            "x402Version": version,
            "paymentPayload": payload,
            "paymentRequirements": requirements,
        }
        return await self.post_json(path, body, model)

    async def post_json(self, path: str, body: dict[str, Any], model: type[M]) -> M:
        """POSTs `body` to `path` below the facilitator's URL; its HTTP 200 answer as
        `model`, else FacilitatorUnavailable (saying whether the request may have arrived).
        The transport of every gate-to-facilitator call (x402 here, MPP charges too)."""
        url = self.url + path
        if self._pool is not None:
            raw = json.dumps(body, separators=(",", ":")).encode()
            try:
                answer = await self._pool.post(path, raw, self.headers)
            except Unreachable as e:
                raise FacilitatorUnavailable(f"{url}: {e}", maybe_sent=False) from e
            except Broken as e:
                raise FacilitatorUnavailable(f"{url}: {e}") from e
            return _answer(answer.status, answer.body, url, model)
        try:
            reply = await self._client().post(
                url, json=body, headers=self.headers, timeout=self.timeout
            )
        except httpx.HTTPError as e:
            raise FacilitatorUnavailable(f"{url}: {_describe(e)}", maybe_sent=_maybe_sent(e)) from e
        return _answer(reply.status_code, reply.content, url, model)


def _answer(status: int, content: bytes, url: str, model: type[M]) -> M:
    if status != 200:
        raise FacilitatorUnavailable(f"{url} answered {status}", maybe_sent=status >= 500)
    try:
        return model.model_validate_json(content)
    except ValidationError as e:
        raise FacilitatorUnavailable(
            f"{url} answered something that is not a {model.__name__}"
        ) from e


def _maybe_sent(error: httpx.HTTPError) -> bool:
    """Whether the request may have reached the facilitator before `error`."""
    return not isinstance(error, (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout))


def _describe(error: httpx.HTTPError) -> str:
    if isinstance(error, httpx.TimeoutException):
        return "timed out"
    return str(error) or type(error).__name__
