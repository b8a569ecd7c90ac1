"""The x402 SDK's MCP payment wrapper, calls per second in one process: the SDK's side of
scripts/bench-mcp. scripts/bench/mcp_rps.py runs this file with the python of the SDK's own
environment (scripts/x402-sdk: x402 2.25 and mcp 1.x) and reads the JSON it prints.

A FastMCP server (mcp 1.x) sells the tool `paid(city)` with `x402.mcp.create_payment_wrapper`
over an `x402ResourceServer` with the SDK's exact SVM scheme; `free(city)` is the same tool
unwrapped (unstructured, as the wrapped one is: mcp 1.x's client would otherwise compile its
output schema to check every result). mcp 1.x's in-memory client session calls them (memory
streams, as svcpay's side calls its `MCPServer` through `mcp.Client`). The wrapper's paid
path runs whole, as the SDK ships it: the payment read from `_meta["x402/payment"]`, the
PaymentPayload parsed, the payment-required response built and matched against the
payload's `accepted`, the resource server's `verify_payment` (its hook phases and its
routing to the facilitator client), the tool, `settle_payment`, and the settlement put in
the result's `_meta`.

With `facilitator_url`, the same calls again through the SDK's own `HTTPFacilitatorClient`
to scripts/bench/instant_facilitator.py (an HTTP facilitator that answers at once, served by
mcp_rps.py): what the wrapper costs with a facilitator reached as the SDK reaches one.

Otherwise stubbed, and nothing else: the facilitator client. `InstantFacilitatorClient`
implements the SDK's `FacilitatorClient` protocol in process: `get_supported` lists the
exact scheme on the network with the given fee payer (what `initialize()` reads), `verify`
answers valid and `settle` settled at once, as svcpay's `InstantFacilitator` does for its
own side. So no network and no chain; the transaction is only carried (the SDK's resource
server leaves its checks to the facilitator, where svcpay's gate decodes it and checks
terms, memo and replay before calling its facilitator). FastMCP logs at WARNING: mcp 1.x's
server logs every request at INFO by default, mcp 2.x's does not, and that cost is not the
wrapper's.

Reads JSON on stdin: `network` (CAIP-2), `pay_to` (the wallet), `mint`, `fee_payer`,
`price` (base units), `warmup` and `transactions` (base64, one payment each: the first
`warmup` pay uncounted calls, each of the others one timed call; mcp_rps.py signs them as
gate_rps's `x402_headers` does, for the same payee, mint, amount and fee payer), and
`facilitator_url` (optional). The payloads carry the requirements the wrapper's own
payment-required result offers. Prints `{"paid": calls/s, "unpaid": calls/s, "calls": n}`
and `"paid_http"` with a facilitator URL.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

from mcp.client.session import ClientSession
from mcp.server.fastmcp import FastMCP
from mcp.shared.memory import create_connected_server_and_client_session
from x402 import x402ResourceServer
from x402.http import FacilitatorConfig, HTTPFacilitatorClient
from x402.mcp import create_payment_wrapper
from x402.mechanisms.svm.exact import register_exact_svm_server
from x402.schemas import (
    ResourceConfig,
    ResourceInfo,
    SettleResponse,
    SupportedKind,
    SupportedResponse,
    VerifyResponse,
)

PAYER = "BenchPayer111111111111111111111111111111111"
SIGNATURE = "5" * 87  # base58, the length of a Solana signature


class InstantFacilitatorClient:
    """The SDK's FacilitatorClient protocol, answering at once (the wrapper's cost alone)."""

    def __init__(self, network: str, fee_payer: str) -> None:
        self.network, self.fee_payer = network, fee_payer

    def get_supported(self) -> SupportedResponse:
        kind = SupportedKind(
            x402_version=2, scheme="exact", network=self.network, extra={"feePayer": self.fee_payer}
        )
        return SupportedResponse(kinds=[kind], signers={"solana:*": [self.fee_payer]})

    async def verify(self, payload: Any, requirements: Any) -> VerifyResponse:
        return VerifyResponse(is_valid=True, payer=PAYER)

    async def settle(self, payload: Any, requirements: Any) -> SettleResponse:
        return SettleResponse(
            success=True, transaction=SIGNATURE, network=requirements.network, payer=PAYER
        )


def server(terms: dict[str, Any], facilitator_url: str | None = None) -> FastMCP:
    facilitator: Any = InstantFacilitatorClient(terms["network"], terms["fee_payer"])
    if facilitator_url:  # the SDK's own client, as the SDK ships it
        facilitator = HTTPFacilitatorClient(FacilitatorConfig(url=facilitator_url))
    resource_server = register_exact_svm_server(x402ResourceServer(facilitator), terms["network"])
    resource_server.initialize()
    price = {"amount": str(terms["price"]), "asset": terms["mint"]}  # base units
    config = ResourceConfig(
        scheme="exact", pay_to=terms["pay_to"], price=price, network=terms["network"]
    )
    wrapper = create_payment_wrapper(
        resource_server,
        accepts=resource_server.build_payment_requirements(config),
        resource=ResourceInfo(url="mcp://tool/paid", description="a paid quote"),
    )
    mcp = FastMCP("bench", log_level="WARNING")  # mcp 1.x logs each request at INFO

    async def quote(city: str) -> str:
        return f"42 in {city}"

    # Unstructured, as the wrapper's tool is (it returns a CallToolResult): mcp 1.x's client
    # would otherwise compile the output schema to check every free result.
    mcp.tool(name="free", structured_output=False)(quote)
    mcp.tool(name="paid")(wrapper(quote))
    return mcp


async def rate(session: ClientSession, name: str, metas: list[dict[str, Any] | None]) -> float:
    start = time.perf_counter()
    for meta in metas:
        result = await session.call_tool(name, {"city": "Lisbon"}, meta=meta)
        if result.isError:
            raise SystemExit(f"{name}: {result.model_dump(exclude_none=True)}")
    return len(metas) / (time.perf_counter() - start)


async def rates(mcp: FastMCP, transactions: list[str], warmup: int) -> tuple[float, float]:
    """(paid, unpaid) calls per second of `mcp`'s tools, each paid call with its own
    transaction (the first `warmup` uncounted)."""
    async with create_connected_server_and_client_session(mcp) as session:
        asked = await session.call_tool("paid", {"city": "Lisbon"})  # the wrapper's 402
        required = asked.structuredContent
        assert asked.isError and required is not None, asked
        metas: list[dict[str, Any] | None] = [
            {
                "x402/payment": {
                    "x402Version": 2,
                    "resource": required["resource"],
                    "accepted": required["accepts"][0],
                    "payload": {"transaction": tx},
                }
            }
            for tx in transactions
        ]
        warm, measured = metas[:warmup], metas[warmup:]
        settled = await session.call_tool("paid", {"city": "Lisbon"}, meta=warm[0])
        assert settled.meta and settled.meta["x402/payment-response"]["success"], settled
        await rate(session, "paid", warm[1:])
        await rate(session, "free", [None] * warmup)
        unpaid = await rate(session, "free", [None] * len(measured))
        paid = await rate(session, "paid", measured)
    return paid, unpaid


async def main() -> None:
    terms = json.load(sys.stdin)
    warmup: int = terms["warmup"]
    paid, unpaid = await rates(server(terms), terms["transactions"], warmup)
    out = {"paid": paid, "unpaid": unpaid, "calls": len(terms["transactions"]) - warmup}
    if terms.get("facilitator_url"):
        # The same payments again: the instant facilitator checks nothing.
        via = server(terms, terms["facilitator_url"])
        out["paid_http"], _ = await rates(via, terms["transactions"], warmup)
    print(json.dumps(out))


if __name__ == "__main__":
    asyncio.run(main())
