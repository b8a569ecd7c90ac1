"""A tool priced by its arguments (issue 39): `PaidTools.tool(by=...)` prices each call, a
payment made for a cheaper call pays no dearer one (for every protocol, refused before the
tool runs), arguments the price refuses are a 400 problem, and a call priced at nothing
runs free."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from svcpay.gate import OneTime
from svcpay.mcp import PayingSession
from tests.mcp.conftest import Shop, paid_server
from tests.mcp.test_refusals import Recording

pytestmark = pytest.mark.anyio
DAY = 30_000


def per_day(arguments: Mapping[str, Any]) -> OneTime | None:
    days = arguments.get("days")
    if not isinstance(days, int) or not 0 <= days <= 14:
        raise ValueError("days: a whole number from 0 to 14")
    return OneTime(DAY * days) if days else None


@pytest.fixture
def outlook_shop(shop: Shop) -> Shop:
    server, paid = paid_server(shop.market, shop.calls)

    @paid.tool(OneTime(DAY), by=per_day)
    async def outlook(city: str, days: int) -> str:
        shop.calls.append(f"outlook {city} {days}")
        return f"{days} days of sun in {city}"

    return Shop(shop.market, server, paid, shop.calls)


@pytest.mark.parametrize("protocol", ["svcpay", "x402", "mpp"])
async def test_the_price_follows_the_arguments(outlook_shop: Shop, protocol: str) -> None:
    shop = outlook_shop
    async with Client(shop.server, mode="legacy") as client:
        recording = Recording(client.session)
        paying = PayingSession(recording, shop.auth(shop.buyer(), (protocol,)), "weather")
        paid = await paying.call_tool("outlook", {"city": "Lisbon", "days": 2})
        assert not paid.is_error and paid.amount == 2 * DAY, paid.result
        meta = recording.metas[-1]
        dearer = {"city": "Lisbon", "days": 7}
        if protocol == "x402":  # its payment-identifier resent: the paid call's answer
            stored = await client.session.call_tool("outlook", dearer, meta=meta)
            assert stored.content[0].model_dump()["text"] == "2 days of sun in Lisbon"
            payload = dict(meta["x402/payment"])
            payload.pop("extensions", None)  # the same transaction without its id
            meta = {"x402/payment": payload}
        try:  # the same payment for a dearer call: refused, the tool not run
            refused = await client.session.call_tool("outlook", dearer, meta=meta)
            assert refused.is_error and refused.structured_content
            assert refused.structured_content["accepts"][0]["amount"] == str(7 * DAY)
        except MCPError as e:
            assert protocol == "mpp" and e.error.code == -32043, e.error
    assert shop.calls == ["outlook Lisbon 2"]
    assert shop.market.received() == 2 * DAY


async def test_refused_arguments_are_a_problem_and_a_free_call_runs(outlook_shop: Shop) -> None:
    shop = outlook_shop
    async with Client(shop.server, mode="legacy") as client:
        bad = await client.session.call_tool("outlook", {"city": "Lisbon", "days": 99})
        free = await client.session.call_tool("outlook", {"city": "Lisbon", "days": 0})
    problem = (bad.meta or {})["svcpay/problem"]
    assert bad.is_error and problem["status"] == 400 and "days" in problem["message"]
    assert not free.is_error and free.content[0].model_dump()["text"] == "0 days of sun in Lisbon"
    assert shop.calls == ["outlook Lisbon 0"] and shop.market.received() == 0


async def test_a_price_the_gate_cannot_serve_is_refused_at_registration(shop: Shop) -> None:
    from svcpay.gate import Subscription

    _, paid = paid_server(shop.market, [])
    with pytest.raises(ValueError, match="subscriptions"):
        paid.price(
            "outlook", Subscription("11111111111111111111111111111111", DAY, 86_400), by=per_day
        )
