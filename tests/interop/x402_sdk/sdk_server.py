"""An API sold with the x402 SDK's FastAPI payment middleware, settling through a given
facilitator (the SDK's HTTPFacilitatorClient).

    sdk_server.py --port P --facilitator URL --pay-to WALLET --mint MINT --network CAIP2
                  --price N [--host H] [--gc-freeze]

GET /paid costs N base units of MINT, paid to WALLET's associated token account with the
exact scheme; GET /free is free. Prints `x402-sdk server ready http://host:port`.
`--gc-freeze` takes the loaded heap out of the garbage collector's sight before serving, as
scripts/bench-gate's svcpay server does (docs/adr/0027), so both are measured alike.
"""

from __future__ import annotations

import argparse
import gc

from common import seller_arguments, serve
from fastapi import FastAPI
from x402 import x402ResourceServer
from x402.http import FacilitatorConfig, HTTPFacilitatorClient, PaymentOption
from x402.http.middleware.fastapi import PaymentMiddlewareASGI
from x402.http.types import RouteConfig
from x402.mechanisms.svm.exact import register_exact_svm_server


def create_app(args: argparse.Namespace) -> FastAPI:
    facilitator = HTTPFacilitatorClient(FacilitatorConfig(url=args.facilitator))
    server = register_exact_svm_server(x402ResourceServer(facilitator), args.network)
    price = {"amount": str(args.price), "asset": args.mint}  # base units, not dollars
    option = PaymentOption(scheme="exact", pay_to=args.pay_to, price=price, network=args.network)
    routes = {"GET /paid": RouteConfig(accepts=[option], description="a paid answer")}

    app = FastAPI()

    @app.get("/paid")
    async def paid() -> dict[str, str]:
        return {"answer": "paid content"}

    @app.get("/free")
    async def free() -> dict[str, str]:
        return {"answer": "free content"}

    app.add_middleware(PaymentMiddlewareASGI, routes=routes, server=server)
    return app


def main() -> None:
    parser = seller_arguments(argparse.ArgumentParser(description=__doc__.split("\n\n")[0]))
    parser.add_argument("--gc-freeze", action="store_true", help="gc.freeze() before serving")
    args = parser.parse_args()
    app = create_app(args)
    if args.gc_freeze:
        gc.collect()
        gc.freeze()
    serve(app, args.host, args.port, "x402-sdk server")


if __name__ == "__main__":
    main()
