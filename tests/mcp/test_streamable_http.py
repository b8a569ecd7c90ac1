"""Paid tools over MCP's streamable HTTP transport (issue 39): the same `PaidTools` server,
served by uvicorn as `MCPServer.streamable_http_app()`, paid by `PayingSession` on a client
that connects by URL, with each wire protocol; MPP's JSON-RPC error form crosses HTTP too.
The middleware sees each request whatever carried it, so stdio (tests/mcp/test_cli.py) and
HTTP answer alike."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import uvicorn
from mcp import Client
from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPError

from svcpay.mcp import PayingSession
from tests.cli.conftest import free_port
from tests.mcp.conftest import PRICE, Shop, paid_server

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def over_http(server: MCPServer) -> AsyncIterator[str]:
    """Serves `server` over streamable HTTP on this event loop; yields its endpoint."""
    port = free_port()
    config = uvicorn.Config(
        server.streamable_http_app(), host="127.0.0.1", port=port, log_level="warning"
    )
    web = uvicorn.Server(config)
    task = asyncio.create_task(web.serve())
    while not web.started:
        assert not task.done(), "uvicorn stopped before it started"
        await asyncio.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        web.should_exit = True
        await task


@pytest.mark.parametrize("protocol", ["svcpay", "x402", "mpp"])
async def test_each_protocol_pays_over_streamable_http(shop: Shop, protocol: str) -> None:
    async with over_http(shop.server) as url, Client(url, mode="legacy") as client:
        unpaid = await client.session.call_tool("forecast", {"city": "Lisbon"})
        assert unpaid.is_error and unpaid.structured_content
        assert unpaid.structured_content["accepts"][0]["amount"] == str(PRICE)
        paying = PayingSession(client.session, shop.auth(shop.buyer(), (protocol,)), "weather")
        paid = await paying.call_tool("forecast", {"city": "Lisbon"})
        free = await paying.call_tool("free", {"city": "Porto"})
    assert not paid.is_error and paid.protocol == protocol and paid.amount == PRICE
    assert paid.result.content[0].text == "sunny in Lisbon" and paid.receipt
    assert free.protocol is None and free.result.content[0].text == "cloudy in Porto"
    assert shop.calls == ["forecast Lisbon", "free Porto"]
    assert shop.market.received() == PRICE


async def test_mpps_error_form_crosses_http(shop: Shop) -> None:
    calls: list[str] = []
    server, _ = paid_server(shop.market, calls, answer="mpp")
    async with over_http(server) as url, Client(url, mode="legacy") as client:
        with pytest.raises(MCPError) as asked:
            await client.session.call_tool("forecast", {"city": "Lisbon"})
        assert asked.value.error.code == -32042
        assert asked.value.error.data["httpStatus"] == 402
        paying = PayingSession(client.session, shop.auth(shop.buyer(), ("mpp",)), "weather")
        paid = await paying.call_tool("forecast", {"city": "Lisbon"})
        replayed = None
        with pytest.raises(MCPError) as refused:
            replayed = await client.session.call_tool(
                "broken", {"city": "Lisbon"}, meta={"org.paymentauth/credential": {}}
            )
    assert replayed is None and refused.value.error.code == -32602  # malformed
    assert paid.protocol == "mpp" and paid.receipt["status"] == "success"
    assert calls == ["forecast Lisbon"] and shop.market.received() == PRICE
