"""How a gate asks svcpay's facilitator to settle a pulled MPP charge (`POST
{url}/mpp/charge/settle`) or to find and record a pushed one (`POST {url}/mpp/charge/verify`),
over the keep-alive client the x402 calls use (or a given httpx client). Anything but an
HTTP 200 `ChargeAnswer` raises `FacilitatorUnavailable` (the gate answers 503, or serves a
settle that may have been received as pending)."""

from __future__ import annotations

import json
from typing import Protocol

import httpx
from pydantic import ValidationError

from svcpay.keepalive import Broken, KeepAliveClient, Unreachable
from svcpay.schemes.mpp_charge.wire import ChargeAnswer, SettleCharge, VerifyCharge
from svcpay.schemes.x402_exact.facilitator_client import FacilitatorUnavailable

__all__ = ["ChargeFacilitatorClient", "ChargeSettler", "FacilitatorUnavailable"]


class ChargeSettler(Protocol):
    async def settle(self, charge: SettleCharge) -> ChargeAnswer: ...

    async def verify(self, charge: VerifyCharge) -> ChargeAnswer: ...


class ChargeFacilitatorClient:
    """svcpay's facilitator over HTTP, for MPP charges (see the module's docstring)."""

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
        self.headers = dict(headers or {})
        self.timeout = timeout
        self._http = http
        self._pool = (
            KeepAliveClient(self.url, max_connections=max_connections, timeout=timeout)
            if http is None
            else None
        )

    async def settle(self, charge: SettleCharge) -> ChargeAnswer:
        return await self._post("/mpp/charge/settle", charge.to_json_dict())

    async def verify(self, charge: VerifyCharge) -> ChargeAnswer:
        return await self._post("/mpp/charge/verify", charge.to_json_dict())

    async def aclose(self) -> None:
        if self._pool is not None:
            await self._pool.aclose()

    async def _post(self, path: str, body: dict[str, object]) -> ChargeAnswer:
        url = self.url + path
        if self._pool is not None:
            try:
                answer = await self._pool.post(
                    path, json.dumps(body, separators=(",", ":")).encode(), self.headers
                )
            except Unreachable as e:
                raise FacilitatorUnavailable(f"{url}: {e}", maybe_sent=False) from e
            except Broken as e:
                raise FacilitatorUnavailable(f"{url}: {e}") from e
            status, content = answer.status, answer.body
        else:
            assert self._http is not None
            try:
                reply = await self._http.post(
                    url, json=body, headers=self.headers, timeout=self.timeout
                )
            except httpx.HTTPError as e:
                sent = not isinstance(e, httpx.ConnectError | httpx.ConnectTimeout)
                raise FacilitatorUnavailable(f"{url}: {e}", maybe_sent=sent) from e
            status, content = reply.status_code, reply.content
        if status != 200:
            raise FacilitatorUnavailable(f"{url} answered {status}", maybe_sent=status >= 500)
        try:
            return ChargeAnswer.model_validate_json(content)
        except ValidationError as e:
            raise FacilitatorUnavailable(f"{url} answered something that is not a charge") from e
