"""Paid MCP tools (issue 39): a tool priced with `OneTime` on an `MCPServer`, decided by the
gate's core, paid by `PayingSession` through `PaymentAuth` with each wire protocol (svcpay's
proof, x402's MCP transport, MPP's), on the local validator with svcpay's facilitator."""

from __future__ import annotations

import pytest
from mcp import Client

from tests.mcp.conftest import PRICE, Shop

pytestmark = pytest.mark.anyio


async def test_an_unpaid_call_gets_x402s_terms_and_mpps_challenges(shop: Shop) -> None:
    async with Client(shop.server, mode="legacy") as client:
        result = await client.session.call_tool("forecast", {"city": "Lisbon"})
    assert result.is_error and shop.calls == []
    terms = result.structured_content
    assert terms is not None and terms["x402Version"] == 2
    [accept] = terms["accepts"]
    assert accept["amount"] == str(PRICE) and accept["payTo"] == str(shop.market.merchant)
    assert terms["resource"]["url"] == "mcp://weather/tools/call/forecast"
    meta = result.meta or {}
    challenges = meta["org.paymentauth/payment-required"]["challenges"]
    assert {(c["method"], c["intent"]) for c in challenges} == {("solana", "charge")}
    assert challenges[0]["request"]["amount"] == str(PRICE)  # an object, not base64url
    assert meta["svcpay/payment-required"]["accepts"][0]["amount"] == str(PRICE)


@pytest.mark.parametrize("protocol", ["svcpay", "x402", "mpp"])
async def test_each_protocol_pays_the_tool_once(shop: Shop, protocol: str) -> None:
    payer = shop.buyer()
    async with shop.client(shop.auth(payer, protocols=(protocol,))) as paying:
        paid = await paying.call_tool("forecast", {"city": "Lisbon"})
    assert not paid.is_error, paid.result
    assert paid.result.content[0].text == "sunny in Lisbon"
    assert paid.protocol == protocol and paid.amount == paid.settled == PRICE
    assert shop.calls == ["forecast Lisbon"]
    assert shop.market.received() == PRICE
    if protocol == "x402":
        assert paid.receipt["success"] is True and paid.receipt["transaction"]
    elif protocol == "mpp":
        assert paid.receipt["status"] == "success" and paid.receipt["reference"]
    else:
        assert paid.receipt["amount"] == str(PRICE) and paid.receipt["transaction"]


async def test_free_tools_pass_untouched(shop: Shop) -> None:
    async with shop.client(shop.auth(shop.buyer())) as paying:
        paid = await paying.call_tool("free", {"city": "Porto"})
    assert paid.protocol is None and paid.result.content[0].text == "cloudy in Porto"
