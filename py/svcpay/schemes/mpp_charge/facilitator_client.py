"""How a gate asks svcpay's facilitator to settle a pulled MPP charge (`POST
{url}/mpp/charge/settle`) or to find and record a pushed one (`POST {url}/mpp/charge/verify`),
over the keep-alive client the x402 calls use (or a given httpx client). Anything but an
HTTP 200 `ChargeAnswer` raises `FacilitatorUnavailable` (the gate answers 503, or serves a
settle that may have been received as pending)."""

from __future__ import annotations

from typing import Protocol

import httpx

from svcpay.schemes.mpp_charge.wire import ChargeAnswer, SettleCharge, VerifyCharge
from svcpay.schemes.x402_exact.facilitator_client import (
    FacilitatorUnavailable,
    X402FacilitatorClient,
)

__all__ = ["ChargeFacilitatorClient", "ChargeSettler", "FacilitatorUnavailable"]


class ChargeSettler(Protocol):
    async def settle(self, charge: SettleCharge) -> ChargeAnswer: ...

    async def verify(self, charge: VerifyCharge) -> ChargeAnswer: ...


class ChargeFacilitatorClient:
    """svcpay's facilitator over HTTP, for MPP charges (see the module's docstring); the
    transport is the x402 client's (`X402FacilitatorClient.post_json`)."""

    def __init__(
        self,
        url: str,
        *,
        http: httpx.AsyncClient | None = None,
        timeout: float = 30.0,
        headers: dict[str, str] | None = None,
        max_connections: int = 64,
    ) -> None:
        self._link = X402FacilitatorClient(
            url, http=http, timeout=timeout, headers=headers, max_connections=max_connections
        )

    async def settle(self, charge: SettleCharge) -> ChargeAnswer:
        return await self._link.post_json("/mpp/charge/settle", charge.to_json_dict(), ChargeAnswer)

    async def verify(self, charge: VerifyCharge) -> ChargeAnswer:
        return await self._link.post_json("/mpp/charge/verify", charge.to_json_dict(), ChargeAnswer)

    async def aclose(self) -> None:
        await self._link.aclose()
