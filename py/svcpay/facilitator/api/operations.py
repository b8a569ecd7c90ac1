"""The routes for operators and tools: GET /health (for load balancers and monitors) and
GET /openapi.json (the API's schema, `svcpay.facilitator.openapi`)."""

from __future__ import annotations

import asyncio

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from svcpay.facilitator.api.http import Guard
from svcpay.facilitator.openapi import schema
from svcpay.facilitator.outage import RETRY_AFTER_SECS
from svcpay.facilitator.service import Facilitator

# Below this the fee payer is "low" (about 200 transactions' fees at 5,000 lamports a
# signature); the RPC node gets this long to answer.
MIN_FEE_PAYER_LAMPORTS = 1_000_000
HEALTH_RPC_TIMEOUT_SECS = 2.0


class Operations:
    def __init__(self, fac: Facilitator) -> None:
        self.fac = fac

    def routes(self, guard: Guard) -> list[Route]:
        return [
            Route("/health", guard(self.health)),
            Route("/openapi.json", guard(self.openapi)),
        ]

    async def health(self, request: Request) -> Response:
        """200 when the database and the RPC node answer and the fee payer can pay fees; 503
        (for load balancers and monitors) naming what is down otherwise."""
        database, balance = await asyncio.gather(self.fac.store.ping(), self.fee_payer_balance())
        low = balance is not None and balance < MIN_FEE_PAYER_LAMPORTS
        body = {
            "status": "ok" if database and balance is not None and not low else "degraded",
            "database": "ok" if database else "unreachable",
            "rpc": "ok" if balance is not None else "unreachable",
            "feePayer": {
                "address": self.fac.public_key,
                "lamports": balance,
                "status": "unknown" if balance is None else "low" if low else "ok",
            },
        }
        if body["status"] == "ok":
            return JSONResponse(body)
        return JSONResponse(body, 503, headers={"Retry-After": str(RETRY_AFTER_SECS)})

    async def fee_payer_balance(self) -> int | None:
        """The fee payer's lamports, or None when the RPC node does not answer in time."""
        try:
            reply = await asyncio.wait_for(
                self.fac.rpc.get_balance(self.fac.keypair.pubkey()), HEALTH_RPC_TIMEOUT_SECS
            )
            return int(reply.value)
        except Exception:  # any failure to get an answer is "unreachable" to a monitor
            return None

    async def openapi(self, request: Request) -> Response:
        return JSONResponse(schema())
