"""Paid MCP tool calls per second, in one process (scripts/bench-mcp): an `MCPServer` with
`PaidTools` and an in-memory `mcp.Client`, the same tool unpaid, paid with a svcpay proof
(`_meta["svcpay/payment"]`, a distinct pre-signed proof each: signature, memo, replay
claim), paid with a session voucher (`_meta["org.paymentauth/credential"]`, a distinct
voucher each over 64 sessions from a warm cache) and with an x402 payment settled by a
facilitator that answers at once (`_meta["x402/payment"]`). Each call crosses MCP's
in-memory transport and the server's validation, so the ratios are what payment adds to a
call. Goal (issue 39): a call paid with a proof or a voucher at least 0.5 of the unpaid
rate. Prints numbers; asserts
nothing."""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
from mcp import Client
from mcp.server.mcpserver import MCPServer
from solders.keypair import Keypair

from scripts.bench.gate_rps import (
    InstantFacilitator,
    bench_terms,
    session_headers,
    session_keys,
    session_scheme,
    signed_proofs,
    x402_headers,
)
from svcpay.gate import OneTime, Session
from svcpay.gate.pricing import Terms
from svcpay.mcp import PaidTools, wire
from svcpay.mcp.server import tool_path
from svcpay.protocol.memo import Memos, MemoTerms
from svcpay.protocol.replay import MemoryReplayStore

PRICE = 500_000
Meta = dict[str, Any]


def server(terms: Terms, memos: Memos, facilitator: Keypair) -> tuple[MCPServer, PaidTools]:
    mcp = MCPServer("bench")
    paid = PaidTools(
        mcp,
        terms=terms,
        memos=memos,
        trusted_facilitators={str(facilitator.pubkey())},
        replay=MemoryReplayStore(),
        sessions=session_scheme(terms, session_keys()),
        x402_facilitator=InstantFacilitator(),
    )

    async def quote(city: str) -> str:
        return f"42 in {city}"

    mcp.tool(name="free")(quote)
    mcp.tool(name="paid")(quote)
    mcp.tool(name="metered")(quote)
    paid.price("paid", OneTime(PRICE))
    paid.price("metered", Session(1_000))
    return mcp, paid


def metas(name: str, headers: list[tuple[str, bytes]]) -> list[Meta]:
    """The `_meta` a paying client sends for each header value."""
    out = []
    for header, value in headers:
        request = httpx.Request("POST", f"mcp://bench{tool_path(name)}")
        request.headers[header] = value.decode()
        out.append(wire.payment_meta(request))
    return out


async def rate(call: Callable[[Meta | None], Awaitable[Any]], metas: list[Meta | None]) -> float:
    start = time.perf_counter()
    for meta in metas:
        await call(meta)
    return len(metas) / (time.perf_counter() - start)


async def main(n: int, rounds: int) -> None:
    facilitator, terms, memos = bench_terms()
    mcp, paid = server(terms, memos, facilitator)
    memo = memos.issue(MemoTerms(f"MCP {tool_path('paid')}", str(PRICE), terms.pay_to, terms.token))
    runs: dict[str, list[float]] = {}
    async with Client(mcp, mode="legacy") as client:

        def caller(name: str) -> Callable[[Meta | None], Awaitable[Any]]:
            async def call(meta: Meta | None) -> Any:
                result = await client.session.call_tool(name, {"city": "Lisbon"}, meta=meta)
                if result.is_error:
                    raise SystemExit(f"{name}: {result.model_dump(exclude_none=True)}")
                return result

            return call

        for round_ in range(rounds):
            proofs = signed_proofs(facilitator, terms, memo, n, PRICE)
            assert paid.core.sessions is not None
            # vouchers continue the last round's: each session's cumulative keeps rising
            vouchers = session_headers(paid.core.sessions, n * (round_ + 1))[-n:]
            x402 = x402_headers(paid, terms, memos, n, f"MCP {tool_path('paid')}")
            measured = {
                "unpaid call": await rate(caller("free"), [None] * n),
                "paid, svcpay proof": await rate(
                    caller("paid"), list(metas("paid", [("x-payment", p) for p in proofs]))
                ),
                "paid, session voucher": await rate(
                    caller("metered"),
                    list(metas("metered", [("authorization", v) for v in vouchers])),
                ),
                "paid, x402 (instant fac.)": await rate(
                    caller("paid"), list(metas("paid", [("payment-signature", h) for h in x402]))
                ),
            }
            for name, value in measured.items():
                runs.setdefault(name, []).append(value)
    print(f"{n} calls each, {rounds} rounds, one core, in process (median of the rounds)")
    for name, values in runs.items():
        print(f"{name:<27} {statistics.median(values):>9,.0f} calls/s")
    unpaid = runs["unpaid call"]
    for name in ("paid, svcpay proof", "paid, session voucher", "paid, x402 (instant fac.)"):
        ratios = [p / u for p, u in zip(runs[name], unpaid, strict=True)]
        goal = "" if "x402" in name else " (goal: at least 0.50)"
        print(f"{name} / unpaid: {statistics.median(ratios):.2f}{goal}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    asyncio.run(main(args.n, args.rounds))
