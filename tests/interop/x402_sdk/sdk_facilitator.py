"""The x402 SDK's own facilitator (x402FacilitatorSync with the exact SVM scheme and a
keypair signer on a given RPC), served over HTTP as x402 facilitators are:
GET /supported, POST /verify, POST /settle.

    sdk_facilitator.py --port P --keypair FEE_PAYER --rpc URL --network CAIP2 [--host H]

Prints `x402-sdk facilitator ready http://host:port`.
"""

from __future__ import annotations

import argparse
from typing import Any

from common import load_keypair, serve
from fastapi import FastAPI
from fastapi.responses import JSONResponse
from x402 import x402FacilitatorSync
from x402.mechanisms.svm import FacilitatorKeypairSigner
from x402.mechanisms.svm.exact import register_exact_svm_facilitator
from x402.schemas import parse_payment_payload, parse_payment_requirements


def create_app(args: argparse.Namespace) -> FastAPI:
    signer = FacilitatorKeypairSigner(load_keypair(args.keypair), rpc_url=args.rpc)
    facilitator = register_exact_svm_facilitator(x402FacilitatorSync(), signer, args.network)
    app = FastAPI()

    def parsed(body: dict[str, Any]) -> tuple[Any, Any]:
        payload = parse_payment_payload(body["paymentPayload"])
        requirements = parse_payment_requirements(payload.x402_version, body["paymentRequirements"])
        return payload, requirements

    # Plain `def`: the SDK's scheme calls the RPC synchronously, so FastAPI runs these on
    # its thread pool.
    @app.get("/supported")
    def supported() -> Any:
        return facilitator.get_supported().model_dump(by_alias=True, exclude_none=True)

    @app.post("/verify")
    def verify(body: dict[str, Any]) -> Any:
        try:
            payload, requirements = parsed(body)
        except (KeyError, ValueError) as e:
            return JSONResponse({"error": str(e)}, status_code=400)
        result = facilitator.verify(payload, requirements)
        return result.model_dump(by_alias=True, exclude_none=True)

    @app.post("/settle")
    def settle(body: dict[str, Any]) -> Any:
        try:
            payload, requirements = parsed(body)
        except (KeyError, ValueError) as e:
            return JSONResponse({"error": str(e)}, status_code=400)
        result = facilitator.settle(payload, requirements)
        return result.model_dump(by_alias=True, exclude_none=True)

    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--keypair", required=True, help="the fee payer's keypair file")
    parser.add_argument("--rpc", required=True, help="the cluster's JSON-RPC URL")
    parser.add_argument("--network", required=True, help="CAIP-2 id")
    args = parser.parse_args()
    serve(create_app(args), args.host, args.port, "x402-sdk facilitator")


if __name__ == "__main__":
    main()
