"""The facilitator's HTTP API (so far): POST /authorize, POST /verify, GET /supported,
GET /health.

`POST /authorize` takes `{"signedPayment": base64 transaction, "paymentRequirements": the
402 option the client pays}` and answers 200 with the proof, or 4xx `{error, message}`.
Hostile input gets a 4xx with the reason, never a 5xx.
"""

from __future__ import annotations

import base64
import binascii
import json

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from svcpay.facilitator.settlement import SettlementError, Settler
from svcpay.protocol.headers import SCHEME_EXACT
from svcpay.protocol.models import PaymentOption, ProtocolError, parse_model
from svcpay.protocol.proof import PaymentProof

MAX_BODY = 64 * 1024


def error(status: int, name: str, message: str) -> JSONResponse:
    return JSONResponse({"error": name, "message": message}, status_code=status)


def create_app(settler: Settler) -> Starlette:
    async def authorize(request: Request) -> JSONResponse:
        raw = await request.body()
        if len(raw) > MAX_BODY:
            return error(413, "RequestTooLarge", f"the body exceeds {MAX_BODY} bytes")
        try:
            body = json.loads(raw)
        except ValueError:
            return error(400, "InvalidRequest", "the body must be JSON")
        if not isinstance(body, dict) or not isinstance(body.get("signedPayment"), str):
            return error(400, "InvalidRequest", "signedPayment (base64 transaction) is required")
        try:
            option = parse_model(PaymentOption, body.get("paymentRequirements"))
            tx = base64.b64decode(body["signedPayment"], validate=True)
        except ProtocolError as e:
            return error(400, "InvalidRequest", f"paymentRequirements: {e.reason}")
        except (binascii.Error, ValueError):
            return error(400, "InvalidRequest", "signedPayment must be base64")
        if option.is_subscription or option.network != settler.network:
            return error(
                400, "InvalidRequest", f"only one-time {settler.network} payments are settled here"
            )
        try:
            proof = await settler.authorize(tx, option)
        except SettlementError as e:
            return error(e.status, e.name, e.message)
        return JSONResponse(proof.to_json_dict())

    async def verify(request: Request) -> JSONResponse:
        """`{"proof": {...}}` -> `{"valid": bool, "reason": str}`: the proof is this
        facilitator's, unexpired, and its transaction succeeded on chain."""
        try:
            body = json.loads(await request.body())
            proof = parse_model(PaymentProof, body.get("proof") if isinstance(body, dict) else None)
        except ValueError as e:
            why = e.reason if isinstance(e, ProtocolError) else "the body must be JSON"
            return error(400, "InvalidRequest", why)
        reason = await settler.check_proof(proof)
        return JSONResponse({"valid": reason is None, "reason": reason or ""})

    async def supported(request: Request) -> JSONResponse:
        return JSONResponse(
            {
                "kinds": [{"scheme": SCHEME_EXACT, "network": settler.network}],
                "feePayer": str(settler.fee_payer.pubkey()),
                "facilitatorKey": str(settler.fee_payer.pubkey()),
            }
        )

    async def health(request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    return Starlette(
        routes=[
            Route("/authorize", authorize, methods=["POST"]),
            Route("/verify", verify, methods=["POST"]),
            Route("/supported", supported),
            Route("/health", health),
        ]
    )
