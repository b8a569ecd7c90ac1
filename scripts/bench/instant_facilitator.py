"""An x402 facilitator over HTTP that answers at once: `GET /supported`, `POST /verify`
(valid), `POST /settle` (settled) and MPP's `POST /mpp/charge/settle` (charged), after
reading the whole request. What a gate's payments cost when its facilitator is a real HTTP
service that takes no time itself (scripts/bench/gate_http.py serves it with uvicorn; the
x402 SDK's middleware and svcpay's gate both use it). Plain ASGI, no imports beyond the
standard library, so any environment's uvicorn can serve it. Configured by BENCH_NETWORK
(CAIP-2) and BENCH_FEE_PAYER."""

from __future__ import annotations

import json
import os
from typing import Any

NETWORK = os.environ.get("BENCH_NETWORK", "solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp")
FEE_PAYER = os.environ.get("BENCH_FEE_PAYER", "")
PAYER = "BenchPayer111111111111111111111111111111111"
SIGNATURE = "5" * 87  # base58, the length of a Solana signature
EXTRA = {"feePayer": FEE_PAYER}
SUPPORTED = json.dumps(
    {
        "kinds": [
            {"x402Version": 2, "scheme": "exact", "network": NETWORK, "extra": EXTRA},
            {"x402Version": 1, "scheme": "exact", "network": "solana", "extra": EXTRA},
        ],
        "extensions": [],
        "signers": {"solana:*": [FEE_PAYER]},
    }
).encode()
VERIFIED = json.dumps({"isValid": True, "payer": PAYER}).encode()
SETTLED = json.dumps(
    {"success": True, "transaction": SIGNATURE, "network": NETWORK, "payer": PAYER}
).encode()
CHARGED = json.dumps({"success": True, "reference": SIGNATURE, "payer": PAYER}).encode()
HEADERS = [(b"content-type", b"application/json")]


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    more = True
    while more:  # read the request whole, as a real facilitator must
        message = await receive()
        more = message.get("more_body", False)
    body = {
        "/supported": SUPPORTED,
        "/verify": VERIFIED,
        "/settle": SETTLED,
        "/mpp/charge/settle": CHARGED,
    }.get(scope["path"])
    status = 200 if body is not None else 404
    headers = [*HEADERS, (b"content-length", str(len(body or b"")).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body or b""})
