"""Paid MCP tool calls per second, in one process (scripts/bench-mcp): an `MCPServer` with
`PaidTools` and an in-memory `mcp.Client`, the same tool unpaid, paid with a svcpay proof
(`_meta["svcpay/payment"]`, a distinct pre-signed proof each: signature, memo, replay
claim), paid with a session voucher (`_meta["org.paymentauth/credential"]`, a distinct
voucher each over 64 sessions from a warm cache) and with an x402 payment settled by a
facilitator that answers at once (`_meta["x402/payment"]`). Each call crosses MCP's
in-memory transport and the server's validation, so the ratios are what payment adds to a
call. Goal (issue 39): a call paid with a proof or a voucher at least 0.5 of the unpaid
rate.

Beside it, when the x402 SDK's environment is there (scripts/x402-sdk; `--no-sdk` skips it),
each round runs scripts/bench/mcp_sdk.py in it: the same tool sold by the SDK's MCP wrapper
(`x402.mcp.create_payment_wrapper` on FastMCP, mcp 1.x) on the same terms, its facilitator
answering at once too, called in process over mcp 1.x's in-memory session, the same number
of calls, each paid with a distinct x402 payment signed here; that file says what is
stubbed. Its x402 row against ours is issue 39's other goal: at least 5 times its rate.
Prints numbers and each round's ratios; asserts nothing."""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
from mcp import Client
from mcp.server.mcpserver import MCPServer
from solders.keypair import Keypair

from scripts.bench.gate_http import ROOT, sdk_python
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
from svcpay.schemes.x402_exact.wire import CAIP2, decode_json

PRICE = 500_000
WARMUP = 100  # uncounted calls before the first timed ones, on both sides
UNPAID, OURS = "unpaid call", "paid, x402 (instant fac.)"
SDK, SDK_UNPAID = "x402 SDK wrapper, x402 (instant fac.)", "x402 SDK's FastMCP 1.x, unpaid"
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


async def main(n: int, rounds: int, with_sdk: bool = True) -> None:
    sdk = sdk_python() if with_sdk else None
    if with_sdk and sdk is None:
        print("bench-mcp: the x402 SDK's environment is missing (scripts/x402-sdk)")
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

        warm = x402_headers(paid, terms, memos, WARMUP, f"MCP {tool_path('paid')}")
        await rate(caller("free"), [None] * WARMUP)
        await rate(caller("paid"), list(metas("paid", [("payment-signature", h) for h in warm])))
        for round_ in range(rounds):
            proofs = signed_proofs(facilitator, terms, memo, n, PRICE)
            assert paid.core.sessions is not None
            # vouchers continue the last round's: each session's cumulative keeps rising
            vouchers = session_headers(paid.core.sessions, n * (round_ + 1))[-n:]
            x402 = x402_headers(paid, terms, memos, n, f"MCP {tool_path('paid')}")
            measured = {
                UNPAID: await rate(caller("free"), [None] * n),
                "paid, svcpay proof": await rate(
                    caller("paid"), list(metas("paid", [("x-payment", p) for p in proofs]))
                ),
                "paid, session voucher": await rate(
                    caller("metered"),
                    list(metas("metered", [("authorization", v) for v in vouchers])),
                ),
                OURS: await rate(
                    caller("paid"), list(metas("paid", [("payment-signature", h) for h in x402]))
                ),
            }
            if sdk is not None:
                measured |= sdk_rates(sdk, paid, terms, memos, n)
            for name, value in measured.items():
                runs.setdefault(name, []).append(value)
    report(runs, n, rounds)


def sdk_rates(python: str, paid: PaidTools, terms: Terms, memos: Memos, n: int) -> dict[str, float]:
    """The SDK's wrapper's paid and unpaid rates over `n` calls (scripts/bench/mcp_sdk.py in
    the SDK's environment), paid with distinct transactions signed as ours are, to the same
    payee, in the same mint and amount, with the same fee payer."""
    assert terms.owner and terms.fee_payer
    headers = x402_headers(paid, terms, memos, n + WARMUP, f"MCP {tool_path('paid')}")
    spec = {
        "network": CAIP2[terms.network], "pay_to": terms.owner, "mint": terms.token,
        "fee_payer": terms.fee_payer, "price": PRICE, "warmup": WARMUP,
        "transactions": [decode_json(h)["payload"]["transaction"] for h in headers],
    }  # fmt: skip
    done = subprocess.run(
        [python, str(ROOT / "scripts/bench/mcp_sdk.py")],
        input=json.dumps(spec), capture_output=True, text=True, cwd=ROOT,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"bench-mcp: the SDK's side failed:\n{done.stderr}")
    out = json.loads(done.stdout)
    return {SDK_UNPAID: out["unpaid"], SDK: out["paid"]}


def report(runs: dict[str, list[float]], n: int, rounds: int) -> None:
    print(f"{n} calls each, {rounds} rounds, one core, in process (median of the rounds)")
    for name, values in runs.items():
        print(f"{name:<36} {statistics.median(values):>9,.0f} calls/s")
    ratios = [  # (label, numerator, denominator, goal)
        ("svcpay proof / unpaid", "paid, svcpay proof", UNPAID, 0.5),
        ("session voucher / unpaid", "paid, session voucher", UNPAID, 0.5),
        ("x402 / unpaid", OURS, UNPAID, None),
    ]
    if SDK in runs:
        ratios += [
            ("SDK wrapper, x402 / its unpaid", SDK, SDK_UNPAID, None),
            ("ours, x402 / SDK wrapper, x402", OURS, SDK, 5.0),
        ]
    print("ratios, each within one round (median of the rounds; each round's):")
    for label, top, bottom, goal in ratios:
        each = [t / b for t, b in zip(runs[top], runs[bottom], strict=True)]
        listed = " ".join(f"{r:.2f}" for r in each)
        wanted = f"  goal: at least {goal:.2f}" if goal else ""
        print(f"  {label:<32} {statistics.median(each):>6.2f}  ({listed}){wanted}")
    if SDK in runs:
        ours = added(runs[OURS], runs[UNPAID])
        sdk = added(runs[SDK], runs[SDK_UNPAID])
        print(
            f"what x402 payment adds to a call (median): ours {ours:.0f} us, the SDK's {sdk:.0f} us"
        )


def added(paid: list[float], unpaid: list[float]) -> float:
    """Microseconds a paid call takes beyond an unpaid one, the median of the rounds."""
    return statistics.median(1e6 / p - 1e6 / u for p, u in zip(paid, unpaid, strict=True))


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-sdk", action="store_true", help="skip the x402 SDK's wrapper")
    args = parser.parse_args()
    asyncio.run(main(args.n, args.rounds, not args.no_sdk))
