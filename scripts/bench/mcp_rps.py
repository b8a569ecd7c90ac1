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
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import httpx
from mcp import Client
from mcp.server.mcpserver import MCPServer
from solders.keypair import Keypair

from scripts.bench.gate_http import ROOT, free_port, sdk_python, wait_ready
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
from svcpay.schemes.x402_exact.facilitator_client import X402FacilitatorClient
from svcpay.schemes.x402_exact.wire import CAIP2, decode_json

PRICE = 500_000
WARMUP = 100  # uncounted calls before the first timed ones, on both sides
UNPAID, OURS = "unpaid call", "paid, x402 (instant fac.)"
PROOF, VOUCHER = "paid, svcpay proof", "paid, session voucher"
OURS_HTTP = "paid, x402 (instant fac., HTTP)"
SDK, SDK_UNPAID = "x402 SDK wrapper, x402 (instant fac.)", "x402 SDK's FastMCP 1.x, unpaid"
SDK_HTTP = "x402 SDK wrapper, x402 (instant fac., HTTP)"
Meta = dict[str, Any]


def server(
    terms: Terms, memos: Memos, facilitator: Keypair, x402_url: str | None = None
) -> tuple[MCPServer, PaidTools]:
    """The MCP server selling `paid` and `metered`; x402 through `x402_url` (the instant
    facilitator over HTTP) when given, else through one in process."""
    mcp = MCPServer("bench")
    paid = PaidTools(
        mcp,
        terms=terms,
        memos=memos,
        trusted_facilitators={str(facilitator.pubkey())},
        replay=MemoryReplayStore(),
        sessions=session_scheme(terms, session_keys()),
        x402_facilitator=X402FacilitatorClient(x402_url) if x402_url else InstantFacilitator(),
    )

    async def quote(city: str) -> str:
        return f"42 in {city}"

    mcp.tool(name="free")(quote)
    mcp.tool(name="paid")(quote)
    mcp.tool(name="metered")(quote)
    paid.price("paid", OneTime(PRICE))
    paid.price("metered", Session(1_000))
    return mcp, paid


def metas(name: str, headers: list[tuple[str, bytes]]) -> list[Meta | None]:
    """The `_meta` a paying client sends for each header value."""
    out: list[Meta | None] = []
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


@contextlib.contextmanager
def http_facilitator(terms: Terms) -> Iterator[str]:
    """scripts/bench/instant_facilitator.py served by uvicorn in a process of its own: an
    x402 facilitator that answers at once, reached over HTTP as a real one is."""
    assert terms.fee_payer
    port = free_port()
    env = dict(os.environ, BENCH_NETWORK=CAIP2[terms.network], BENCH_FEE_PAYER=terms.fee_payer)
    process = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "scripts.bench.instant_facilitator:app",
         "--port", str(port), "--log-level", "warning", "--no-access-log"],
        cwd=ROOT, env=env,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url + "/supported", process, "the instant facilitator")
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)


async def main(n: int, rounds: int, with_sdk: bool = True) -> None:
    sdk = sdk_python() if with_sdk else None
    if with_sdk and sdk is None:
        print("bench-mcp: the x402 SDK's environment is missing (scripts/x402-sdk)")
    facilitator, terms, memos = bench_terms()
    with http_facilitator(terms) as fac_url:
        await measure(n, rounds, sdk, facilitator, terms, memos, fac_url)


def caller(client: Client, name: str) -> Callable[[Meta | None], Awaitable[Any]]:
    async def call(meta: Meta | None) -> Any:
        result = await client.session.call_tool(name, {"city": "Lisbon"}, meta=meta)
        if result.is_error:
            raise SystemExit(f"{name}: {result.model_dump(exclude_none=True)}")
        return result

    return call


async def measure(
    n: int, rounds: int, sdk: str | None, facilitator: Keypair, terms: Terms, memos: Memos,
    fac_url: str,
) -> None:  # fmt: skip
    mcp, paid = server(terms, memos, facilitator)
    mcp_http, paid_http = server(terms, memos, facilitator, fac_url)
    subject = f"MCP {tool_path('paid')}"
    memo = memos.issue(MemoTerms(subject, str(PRICE), terms.pay_to, terms.token))
    runs: dict[str, list[float]] = {}
    async with Client(mcp, mode="legacy") as client, Client(mcp_http, mode="legacy") as via:
        warm = x402_headers(paid, terms, memos, WARMUP, subject)
        await rate(caller(client, "free"), [None] * WARMUP)
        await rate(caller(client, "paid"), metas("paid", [("payment-signature", h) for h in warm]))
        warm = x402_headers(paid_http, terms, memos, WARMUP, subject)
        await rate(caller(via, "paid"), metas("paid", [("payment-signature", h) for h in warm]))
        for round_ in range(rounds):
            proofs = signed_proofs(facilitator, terms, memo, n, PRICE)
            assert paid.core.sessions is not None
            # vouchers continue the last round's: each session's cumulative keeps rising
            vouchers = session_headers(paid.core.sessions, n * (round_ + 1))[-n:]
            x402 = x402_headers(paid, terms, memos, n, subject)
            x402_http = x402_headers(paid_http, terms, memos, n, subject)
            measured = {
                UNPAID: await rate(caller(client, "free"), [None] * n),
                PROOF: await rate(
                    caller(client, "paid"), metas("paid", [("x-payment", p) for p in proofs])
                ),
                VOUCHER: await rate(
                    caller(client, "metered"),
                    metas("metered", [("authorization", v) for v in vouchers]),
                ),
                OURS: await rate(
                    caller(client, "paid"), metas("paid", [("payment-signature", h) for h in x402])
                ),
                OURS_HTTP: await rate(
                    caller(via, "paid"),
                    metas("paid", [("payment-signature", h) for h in x402_http]),
                ),
            }
            if sdk is not None:
                measured |= sdk_rates(sdk, paid, terms, memos, n, fac_url)
            for name, value in measured.items():
                runs.setdefault(name, []).append(value)
    report(runs, n, rounds)


def sdk_rates(
    python: str, paid: PaidTools, terms: Terms, memos: Memos, n: int, fac_url: str
) -> dict[str, float]:
    """The SDK's wrapper's paid and unpaid rates over `n` calls (scripts/bench/mcp_sdk.py in
    the SDK's environment), paid with distinct transactions signed as ours are, to the same
    payee, in the same mint and amount, with the same fee payer."""
    assert terms.owner and terms.fee_payer
    headers = x402_headers(paid, terms, memos, n + WARMUP, f"MCP {tool_path('paid')}")
    spec = {
        "network": CAIP2[terms.network], "pay_to": terms.owner, "mint": terms.token,
        "fee_payer": terms.fee_payer, "price": PRICE, "warmup": WARMUP,
        "transactions": [decode_json(h)["payload"]["transaction"] for h in headers],
        "facilitator_url": fac_url,
    }  # fmt: skip
    done = subprocess.run(
        [python, str(ROOT / "scripts/bench/mcp_sdk.py")],
        input=json.dumps(spec), capture_output=True, text=True, cwd=ROOT,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"bench-mcp: the SDK's side failed:\n{done.stderr}")
    out = json.loads(done.stdout)
    return {SDK_UNPAID: out["unpaid"], SDK: out["paid"], SDK_HTTP: out["paid_http"]}


def report(runs: dict[str, list[float]], n: int, rounds: int) -> None:
    print(f"{n} calls each, {rounds} rounds, one core, in process (median of the rounds)")
    for name, values in runs.items():
        print(f"{name:<44} {statistics.median(values):>9,.0f} calls/s")
    ratios = [  # (label, numerator, denominator, goal)
        ("svcpay proof / unpaid", PROOF, UNPAID, 0.5),
        ("session voucher / unpaid", VOUCHER, UNPAID, 0.5),
        ("x402 / unpaid", OURS, UNPAID, None),
        ("x402, HTTP facilitator / unpaid", OURS_HTTP, UNPAID, None),
    ]
    if SDK in runs:
        ratios += [
            ("SDK wrapper, x402 / its unpaid", SDK, SDK_UNPAID, None),
            ("ours, x402 / SDK wrapper, x402", OURS, SDK, None),
            ("ours, x402 / SDK, both over HTTP", OURS_HTTP, SDK_HTTP, None),
            ("ours, proof / SDK x402 over HTTP", PROOF, SDK_HTTP, 5.0),
            ("ours, voucher / SDK x402 over HTTP", VOUCHER, SDK_HTTP, 5.0),
        ]
    print("ratios, each within one round (median of the rounds; each round's):")
    for label, top, bottom, goal in ratios:
        each = [t / b for t, b in zip(runs[top], runs[bottom], strict=True)]
        listed = " ".join(f"{r:.2f}" for r in each)
        wanted = f"  goal: at least {goal:.2f}" if goal else ""
        print(f"  {label:<36} {statistics.median(each):>6.2f}  ({listed}){wanted}")
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
