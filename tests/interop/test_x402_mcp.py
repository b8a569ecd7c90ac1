"""x402's MCP transport against the real thing (issue 39): the PyPI x402 SDK's `x402.mcp`
(its paying client `x402MCPClient` and its FastMCP wrapper `create_payment_wrapper`, on
mcp 1.x in the SDK's own environment) with and against svcpay's `PaidTools` and
`PayingSession` (mcp 2.x), over MCP's streamable HTTP transport between separate
processes, on the local validator presented as Solana devnet; money moves on chain.

The first test is the SDK alone (its MCP client, its wrapped tool, its facilitator): it
proves the harness, so a failure in the others is svcpay's.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager

import pytest
from mcp import Client
from mcp.server.mcpserver import MCPServer
from starlette.types import ASGIApp

from svcpay.gate import OneTime
from svcpay.gate.pricing import Terms
from svcpay.localnet.process import Localnet
from svcpay.mcp import PaidTools, PayingSession
from svcpay.protocol.memo import Memos
from svcpay.protocol.replay import MemoryReplayStore
from svcpay.schemes.x402_exact.facilitator_client import X402FacilitatorClient
from tests.cli.conftest import serve
from tests.interop.conftest import SVCPAY_DEVNET, Market, Sdk, Svcpay, x402_payer
from tests.interop.test_x402_sdk import balances, settled_in
from tests.support.chain import Chain

PRICE = 1_000  # base units of a 6-decimal mint: 0.001


@contextmanager
def paid_tools(facilitator: str, market: Market, calls: list[str]) -> Iterator[str]:
    """svcpay's `PaidTools` on an `MCPServer`, its tool `forecast` priced PRICE and settled
    through svcpay's facilitator process at `facilitator`, served over streamable HTTP by
    uvicorn in a thread; yields the MCP endpoint."""
    fee_payer = str(market.fee_payer.pubkey())  # svcpay's facilitator signs with it

    @asynccontextmanager
    async def app() -> AsyncIterator[ASGIApp]:
        server = MCPServer("weather")
        x402 = X402FacilitatorClient(facilitator)
        paid = PaidTools(
            server,
            terms=Terms(
                pay_to=str(market.seller_account),
                token=str(market.mint),
                network=SVCPAY_DEVNET,
                owner=str(market.seller),
                fee_payer=fee_payer,
            ),
            memos=Memos(b"x402-mcp-interop-memo-secret-0123"),
            trusted_facilitators={fee_payer},
            replay=MemoryReplayStore(),
            x402_facilitator=x402,
        )

        @paid.tool(OneTime(PRICE))
        async def forecast(city: str) -> str:
            calls.append(city)
            return f"sunny in {city}"

        asgi = server.streamable_http_app()
        try:
            async with asgi.router.lifespan_context(asgi):  # its session manager
                yield asgi
        finally:
            await x402.aclose()

    with serve(app) as url:
        yield f"{url}/mcp"


def test_the_sdk_mcp_client_pays_its_own_wrapped_tool(
    sdk: Sdk, market: Market, chain: Chain
) -> None:
    facilitator = sdk.facilitator(market.fee_payer_file)
    server = sdk.server(facilitator, market, PRICE, mcp=True)
    before = balances(chain, market)

    report = sdk.call_tool(server, "forecast", {"city": "Lisbon"}, market, replay=True)

    assert (report["status"], report["result"]["text"]) == ("paid", "sunny in Lisbon"), report
    settled_in(report, market)
    assert report["result"]["_meta"]["x402/payment-response"] == report["paymentResponse"]
    assert balances(chain, market) == (before[0] - PRICE, before[1] + PRICE)
    assert report["replay"]["isError"], report["replay"]  # the same payment again
    assert balances(chain, market) == (before[0] - PRICE, before[1] + PRICE)


@pytest.mark.parametrize("wrapper", ["x402MCPClient", "x402MCPSession"])
def test_the_sdk_mcp_client_pays_paid_tools(
    sdk: Sdk, svcpay: Svcpay, market: Market, chain: Chain, wrapper: str
) -> None:
    """The SDK's x402MCPClient, and its x402MCPSession (whose payment has null members),
    against svcpay's PaidTools settling through svcpay's facilitator: it reads x402's
    PaymentRequired from the tool result, pays, is served once with the payment response
    in `_meta`; the same payment again is refused (duplicate_settlement)."""
    facilitator = svcpay.facilitator(market.fee_payer)
    calls: list[str] = []
    before = balances(chain, market)

    with paid_tools(facilitator, market, calls) as url:
        session = wrapper == "x402MCPSession"
        report = sdk.call_tool(
            url, "forecast", {"city": "Lisbon"}, market, replay=True, session=session
        )

    assert (report["status"], report["result"]["text"]) == ("paid", "sunny in Lisbon"), report
    asked = report["asked"]["structuredContent"]
    assert (asked["x402Version"], asked["accepts"][0]["amount"]) == (2, str(PRICE)), asked
    if session:  # what svcpay.mcp.wire drops before the PAYMENT-SIGNATURE it stands for
        assert report["payment"]["resource"]["description"] is None, report["payment"]
    transaction = settled_in(report, market)
    assert report["result"]["_meta"]["x402/payment-response"]["transaction"] == transaction
    assert calls == ["Lisbon"]
    assert balances(chain, market) == (before[0] - PRICE, before[1] + PRICE)
    replay = report["replay"]
    assert replay["isError"] and "x402/payment-response" not in replay["_meta"], replay
    assert replay["structuredContent"]["error"] == "duplicate_settlement", replay
    assert calls == ["Lisbon"]  # served once
    assert balances(chain, market) == (before[0] - PRICE, before[1] + PRICE)


@pytest.mark.anyio
@pytest.mark.parametrize("settler", ["x402-sdk", "svcpay"])
async def test_paying_session_pays_the_sdk_wrapped_tool(
    sdk: Sdk, svcpay: Svcpay, market: Market, chain: Chain, validator: Localnet, settler: str
) -> None:
    """svcpay's PayingSession (PaymentAuth, x402 only) against the SDK's FastMCP tool
    settling through the SDK's own facilitator, or svcpay's: it reads the wrapper's
    payment-required result, pays ATA(payTo) in `_meta["x402/payment"]` and gets the SDK's
    payment response as its receipt."""
    if settler == "svcpay":
        facilitator = svcpay.facilitator(market.fee_payer)
    else:
        facilitator = sdk.facilitator(market.fee_payer_file)
    server = sdk.server(facilitator, market, PRICE, mcp=True)
    before = balances(chain, market)
    async with (
        x402_payer(market, validator.url, protocols=("x402",)) as (auth, called),
        Client(server, mode="legacy") as client,
    ):
        paid = await PayingSession(client.session, auth, "x402-sdk").call_tool(
            "forecast", {"city": "Lisbon"}
        )

    assert not paid.is_error and paid.result.content[0].text == "sunny in Lisbon", paid
    assert (paid.protocol, paid.amount) == ("x402", PRICE), paid
    settled_in({"paymentResponse": paid.receipt}, market)
    assert paid.result.meta["x402/payment-response"] == paid.receipt
    assert balances(chain, market) == (before[0] - PRICE, before[1] + PRICE)
    assert called == [], called
