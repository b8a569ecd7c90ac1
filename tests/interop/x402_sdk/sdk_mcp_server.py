"""An MCP server (mcp 1.x's FastMCP) selling one tool with the x402 SDK's payment wrapper
(`x402.mcp.create_payment_wrapper`), settling through a given facilitator (the SDK's
HTTPFacilitatorClient), served over MCP's streamable HTTP transport.

    sdk_mcp_server.py --facilitator URL --pay-to WALLET --mint MINT --network CAIP2
                      --price N [--host H] [--port P]

The tool `forecast(city)` costs N base units of MINT, paid to WALLET's associated token
account with the exact scheme; `ping()` is free. Prints `x402-sdk mcp server ready
http://host:port/mcp` (the MCP endpoint).
"""

from __future__ import annotations

import argparse

from common import seller_arguments, serve
from mcp.server.fastmcp import FastMCP
from starlette.applications import Starlette
from x402 import x402ResourceServer
from x402.http import FacilitatorConfig, HTTPFacilitatorClient
from x402.mcp import create_payment_wrapper
from x402.mechanisms.svm.exact import register_exact_svm_server
from x402.schemas import ResourceConfig, ResourceInfo


def create_app(args: argparse.Namespace) -> Starlette:
    facilitator = HTTPFacilitatorClient(FacilitatorConfig(url=args.facilitator))
    server = register_exact_svm_server(x402ResourceServer(facilitator), args.network)
    server.initialize()  # reads the facilitator's /supported (its fee payer)
    price = {"amount": str(args.price), "asset": args.mint}  # base units, not dollars
    config = ResourceConfig(scheme="exact", pay_to=args.pay_to, price=price, network=args.network)
    paid = create_payment_wrapper(
        server,
        accepts=server.build_payment_requirements(config),
        resource=ResourceInfo(url="mcp://tool/forecast", description="a paid forecast"),
    )

    mcp = FastMCP("x402-sdk weather", host=args.host)

    @mcp.tool(name="forecast", description="The weather in a city (paid)")
    @paid
    async def forecast(city: str) -> str:
        return f"sunny in {city}"

    @mcp.tool(name="ping", description="Free")
    async def ping() -> str:
        return "pong"

    return mcp.streamable_http_app()


def main() -> None:
    parser = seller_arguments(argparse.ArgumentParser(description=__doc__.split("\n\n")[0]))
    args = parser.parse_args()
    serve(create_app(args), args.host, args.port, "x402-sdk mcp server", path="/mcp")


if __name__ == "__main__":
    main()
