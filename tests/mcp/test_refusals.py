"""What a paid MCP tool refuses, with HTTP's semantics (issue 39): a replayed payment, a
payment for another tool, concurrent copies of one (served once), a tool that raises (not
charged), a price over the client's limits (refused before anything is signed), and a
facilitator that is down (a problem result, never an exception); MPP's JSON-RPC error form
and its capability."""

from __future__ import annotations

import time
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from svcpay.client import SpendingPolicy
from svcpay.mcp import PayingSession
from svcpay.protocol.errors import OriginNotAllowed, SpendingLimitExceeded
from svcpay.protocol.replay import MemoryReplayStore
from svcpay.schemes.x402_exact.facilitator_client import (
    FacilitatorUnavailable,
    X402FacilitatorClient,
)
from svcpay.schemes.x402_exact.wire import PaymentRequired, parse
from tests.mcp.conftest import PRICE, Shop, paid_server

pytestmark = pytest.mark.anyio


class Recording:
    """A ClientSession that remembers the `_meta` of every call."""

    def __init__(self, session: Any) -> None:
        self.session, self.metas = session, list[dict[str, Any]]()

    async def call_tool(self, name: str, arguments: Any, timeout: Any, meta: Any = None) -> Any:
        self.metas.append(dict(meta or {}))
        return await self.session.call_tool(name, arguments, timeout, meta=meta)


async def paid_meta(shop: Shop, protocol: str, tool: str = "forecast") -> Any:
    """The `_meta` that paid one call of `tool` with `protocol`."""
    async with Client(shop.server, mode="legacy") as client:
        recording = Recording(client.session)
        paying = PayingSession(recording, shop.auth(shop.buyer(), (protocol,)), "weather")
        paid = await paying.call_tool(tool, {"city": "Lisbon", "port": "Lisbon"})
        assert not paid.is_error and paid.protocol == protocol
    return recording.metas[-1]


@pytest.mark.parametrize("protocol", ["svcpay", "x402", "mpp"])
async def test_a_replayed_payment_is_refused(shop: Shop, protocol: str) -> None:
    meta = await paid_meta(shop, protocol)
    async with Client(shop.server, mode="legacy") as client:
        if protocol == "mpp":  # a client paying with MPP is answered in MPP's error form
            with pytest.raises(MCPError) as refused:
                await client.session.call_tool("forecast", {"city": "Lisbon"}, meta=meta)
            assert refused.value.error.code == -32043
            assert refused.value.error.data["challenges"], "fresh challenges"
        else:
            if protocol == "x402":  # the same payment-identifier: the stored answer, unpaid
                resent = await client.session.call_tool("forecast", {"city": "Lisbon"}, meta=meta)
                assert (
                    not resent.is_error
                    and resent.content[0].model_dump()["text"] == "sunny in Lisbon"
                )
                payload = dict(meta["x402/payment"])
                payload.pop("extensions", None)  # the same transaction without its id
                meta = {"x402/payment": payload}
            again = await client.session.call_tool("forecast", {"city": "Lisbon"}, meta=meta)
            assert again.is_error and again.structured_content
            assert again.structured_content["accepts"], "fresh terms"
    assert shop.calls == ["forecast Lisbon"] and shop.market.received() == PRICE


@pytest.mark.parametrize("protocol", ["svcpay", "x402", "mpp"])
async def test_a_payment_for_another_tool_is_refused(shop: Shop, protocol: str) -> None:
    meta = await paid_meta(shop, protocol, tool="tides")  # paid tides' price, 0.20
    async with Client(shop.server, mode="legacy") as client:
        try:
            result = await client.session.call_tool("forecast", {"city": "Faro"}, meta=meta)
            assert result.is_error
        except MCPError as e:
            assert protocol == "mpp" and e.error.code == -32043
    assert shop.calls == ["tides Lisbon"]


async def test_concurrent_copies_of_one_payment_are_served_once(shop: Shop) -> None:
    async with Client(shop.server, mode="legacy") as client:
        first = await client.session.call_tool("forecast", {"city": "Lisbon"})
        assert first.is_error
        auth = shop.auth(shop.buyer(), ("x402",))
        recording = Recording(client.session)
        paying = PayingSession(recording, auth, "weather")
        # Build one x402 payment by paying once, then send copies of a second one at once.
        await paying.call_tool("forecast", {"city": "Lisbon"})
        shop.calls.clear()
        received = shop.market.received()
        second = await auth._pay_x402(_terms(first.structured_content), "mcp://weather")
        import httpx

        from svcpay.mcp import wire

        request = httpx.Request("POST", "mcp://weather/tools/call/forecast")
        request.headers[second[0]] = second[1]
        meta: Any = wire.payment_meta(request)
        results: list[Any] = []

        async def call() -> None:
            results.append(
                await client.session.call_tool("forecast", {"city": "Lisbon"}, meta=meta)
            )

        async with anyio.create_task_group() as tg:
            for _ in range(4):
                tg.start_soon(call)
    assert sorted(r.is_error for r in results) == [False, True, True, True]
    assert shop.calls == ["forecast Lisbon"]
    assert shop.market.received() == received + PRICE


def _terms(structured: Any) -> Any:
    return parse(PaymentRequired, structured)


@pytest.mark.parametrize("protocol", ["x402", "mpp"])
async def test_a_tool_that_raises_is_not_charged(shop: Shop, protocol: str) -> None:
    async with shop.client(shop.auth(shop.buyer(), (protocol,))) as paying:
        paid = await paying.call_tool("broken", {"city": "Lisbon"})
    assert paid.is_error and paid.protocol is None and paid.settled == 0
    assert shop.calls == ["broken Lisbon"] and shop.market.received() == 0


async def test_a_price_over_the_limits_is_refused_before_signing(shop: Shop) -> None:
    payer = shop.buyer()
    for protocol in ("svcpay", "x402", "mpp"):
        async with shop.client(shop.auth(payer, (protocol,), max_per_request=PRICE - 1)) as p:
            with pytest.raises(SpendingLimitExceeded):
                await p.call_tool("forecast", {"city": "Lisbon"})
    elsewhere = SpendingPolicy(origins=frozenset({"https://api.example.com"}))
    async with shop.client(shop.auth(payer, policy=elsewhere)) as paying:
        with pytest.raises(OriginNotAllowed, match="mcp://weather"):
            await paying.call_tool("forecast", {"city": "Lisbon"})
    assert shop.calls == [] and shop.market.received() == 0


async def test_the_facilitator_down_is_a_problem_result(shop: Shop) -> None:
    down = X402FacilitatorClient("http://127.0.0.1:9", timeout=5)
    calls: list[str] = []
    server, _ = paid_server(shop.market, calls, x402_facilitator=down, schemes=["x402"])
    async with Client(server, mode="legacy") as client:
        paying = PayingSession(client.session, shop.auth(shop.buyer(), ("x402",)), "weather")
        for _ in range(4):  # settling fails, then the breaker answers before the tool runs
            paid = await paying.call_tool("forecast", {"city": "Lisbon"})
            assert paid.is_error and paid.protocol is None
            problem = (paid.result.meta or {})["svcpay/problem"]
            assert problem["status"] == 503 and problem["retryAfter"], problem
    assert len(calls) < 4, "the breaker stops running a tool that cannot be paid for"
    assert shop.market.received() == 0


async def test_mpps_error_form_and_capability(shop: Shop) -> None:
    calls: list[str] = []
    server, _ = paid_server(shop.market, calls, answer="mpp")
    async with Client(server, mode="legacy") as client:
        caps = client.session.server_capabilities
        assert caps is not None and caps.experimental == {
            "payment": {"methods": {"solana": {"intents": ["charge"]}}}
        }
        with pytest.raises(MCPError) as asked:
            await client.session.call_tool("forecast", {"city": "Lisbon"})
        error = asked.value.error
        assert error.code == -32042 and error.data["httpStatus"] == 402
        assert {c["intent"] for c in error.data["challenges"]} == {"charge"}
        paying = PayingSession(client.session, shop.auth(shop.buyer(), ("mpp",)), "weather")
        paid = await paying.call_tool("forecast", {"city": "Lisbon"})
    assert paid.protocol == "mpp" and paid.receipt["challengeId"]
    assert calls == ["forecast Lisbon"] and shop.market.received() == PRICE


class LosesTheAnswer(X402FacilitatorClient):
    """svcpay's facilitator, whose answer to the first `lose` settles never arrives."""

    lose = 1

    async def settle(self, version: int, payload: Any, requirements: Any) -> Any:
        receipt = await super().settle(version, payload, requirements)
        if self.lose > 0:
            self.lose -= 1
            raise FacilitatorUnavailable("read timeout (the settle went through)")
        return receipt


async def test_a_settlement_without_an_answer_is_pending_then_reconciled(shop: Shop) -> None:
    """The tool ran, its settle got no answer: the result is delivered marked pending (no
    5xx, no exception), and the reconciler settles it once; the payment is not served again."""
    losing = LosesTheAnswer("http://fac", http=shop.market.fac.http)
    calls: list[str] = []
    server, paid = paid_server(shop.market, calls, x402_facilitator=losing, schemes=["x402"])
    async with Client(server, mode="legacy") as client:
        recording = Recording(client.session)
        paying = PayingSession(recording, shop.auth(shop.buyer(), ("x402",)), "weather")
        result = await paying.call_tool("forecast", {"city": "Lisbon"})
        assert not result.is_error and result.pending, result
        assert (result.amount, result.settled) == (PRICE, 0)  # signed, not yet known paid
        assert (result.result.meta or {})["svcpay/settlement"] == "pending"
        x402 = paid.core.x402
        assert x402 is not None and await x402.pending.count() == 1
        outcome = await x402.reconciler.run_once(now=time.time() + 60)
        assert outcome["settled"] == 1 and await x402.pending.count() == 0
        again = await client.session.call_tool(
            "forecast", {"city": "Lisbon"}, meta={"x402/payment": _without_id(recording)}
        )
        assert again.is_error  # the same payment: refused, the tool not run again
        await x402.reconciler.aclose()
    assert calls == ["forecast Lisbon"] and shop.market.received() == PRICE


def _without_id(recording: Recording) -> Any:
    payload = dict(recording.metas[-1]["x402/payment"])
    payload.pop("extensions", None)
    return payload


class DatabaseAway(MemoryReplayStore):
    """A replay store whose database went away."""

    async def claim(self, key: str, expires_at: float) -> bool:
        raise OSError("could not connect to the database")


@pytest.mark.parametrize("protocol", ["svcpay", "x402"])
async def test_the_database_away_is_a_problem_result(shop: Shop, protocol: str) -> None:
    calls: list[str] = []
    server, _ = paid_server(shop.market, calls, replay=DatabaseAway())
    async with Client(server, mode="legacy") as client:
        paying = PayingSession(client.session, shop.auth(shop.buyer(), (protocol,)), "weather")
        paid = await paying.call_tool("forecast", {"city": "Lisbon"})
    problem = (paid.result.meta or {})["svcpay/problem"]
    assert paid.is_error and problem["status"] == 503 and problem["retryAfter"], problem
    assert calls == [], "nothing is served that could not be checked"
