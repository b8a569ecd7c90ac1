"""The public payment routes: POST /authorize (settle a one-time svcpay payment, answer its
proof), POST /verify (an svcpay proof, or an x402 payment), POST /settle (x402), the MPP
Solana `charge` routes, and GET /supported. x402's /verify and /settle answer every payment
with HTTP 200 and x402's reason strings (`svcpay.schemes.x402_exact.facilitator`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from svcpay.facilitator.answers import Verdict
from svcpay.facilitator.api.http import (
    BadRequest,
    Guard,
    json_body,
    parsed,
    request_body,
    x402_request,
)
from svcpay.facilitator.lifecycle import EVENT_TYPES
from svcpay.facilitator.models import AuthorizeRequest, VerifyRequest
from svcpay.facilitator.service import Facilitator
from svcpay.protocol.models import ProtocolError
from svcpay.schemes.mpp_charge.wire import ChargeAnswer


class Payments:
    def __init__(self, fac: Facilitator) -> None:
        self.fac = fac

    def routes(self, guard: Guard) -> list[Route]:
        return [
            Route("/authorize", guard(self.authorize), methods=["POST"]),
            Route("/verify", guard(self.verify), methods=["POST"]),
            Route("/settle", guard(self.settle), methods=["POST"]),
            Route("/mpp/charge/settle", guard(self.mpp_charge_settle), methods=["POST"]),
            Route("/mpp/charge/verify", guard(self.mpp_charge_verify), methods=["POST"]),
            Route("/supported", guard(self.supported)),
        ]

    async def authorize(self, request: Request) -> Response:
        body = await request_body(request, AuthorizeRequest)
        option, network = body.payment_requirements, self.fac.config.network
        if option.is_subscription or option.network != network:
            raise BadRequest(f"only one-time {network} payments are settled here")
        proof = await self.fac.settler.authorize(body.transaction, option)
        return JSONResponse(proof.to_json_dict())

    async def verify(self, request: Request) -> Response:
        """An x402 request (a body with `x402Version`) -> x402's VerifyResponse; svcpay's
        `{"proof": {...}}` -> `{"valid": bool, "reason": str}`: the proof is this
        facilitator's, unexpired, and its transaction succeeded on chain."""
        body = await json_body(request)
        if "x402Version" in body:
            verdict = await self.fac.x402.verify(x402_request(body))
            return JSONResponse(verdict.to_json_dict())
        proof = parsed(VerifyRequest, body).proof
        reason = await self.fac.settler.check_proof(proof)
        return JSONResponse(Verdict(valid=reason is None, reason=reason or "").model_dump())

    async def settle(self, request: Request) -> Response:
        """x402's settle: HTTP 200 with `success` and x402's reason for every payment."""
        outcome = await self.fac.x402.settle(x402_request(await json_body(request)))
        return JSONResponse(outcome.to_json_dict())

    async def mpp_charge_settle(self, request: Request) -> Response:
        """MPP Solana `charge`, pulled: check, co-sign, send, confirm (HTTP 200 for every
        payment, `ChargeAnswer`)."""
        return await self._charge(request, self.fac.mpp_charge.settle)

    async def mpp_charge_verify(self, request: Request) -> Response:
        """MPP Solana `charge`, pushed: find the payer's transaction, check, record once."""
        return await self._charge(request, self.fac.mpp_charge.verify)

    async def _charge(
        self, request: Request, step: Callable[[Any], Awaitable[ChargeAnswer]]
    ) -> Response:
        try:
            answer = await step(await json_body(request))
        except ProtocolError as e:
            raise BadRequest(e.reason) from e
        return JSONResponse(answer.to_json_dict())

    async def supported(self, request: Request) -> Response:
        """x402's SupportedResponse, with svcpay's own fields beside it."""
        return JSONResponse(
            {
                **self.fac.x402.supported().to_json_dict(),
                "feePayer": self.fac.public_key,
                "facilitatorKey": self.fac.public_key,
                "eventTypes": list(EVENT_TYPES),
            }
        )
