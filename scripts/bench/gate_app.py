"""The benchmark's server app: the gate over a trivial endpoint, configured by environment
variables that scripts/bench/gate_http.py sets (uvicorn imports `app` from here)."""

from __future__ import annotations

import os
from typing import Any

from scripts.bench.gate_rps import SESSION_PRICE, InstantFacilitator, session_keys, session_scheme
from svcpay.gate import OneTime, Session, Subscription, payment_gate
from svcpay.gate.pricing import Terms
from svcpay.protocol.memo import Memos
from svcpay.protocol.replay import MemoryReplayStore


async def bare(scope: Any, receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"application/json")],
        }
    )
    await send({"type": "http.response.body", "body": b'{"data":42}'})


class WarmSubscriptions:
    """A warm cache hit: what ChainSubscriptions serves between chain reads."""

    def __init__(self, plan: str, sub: str) -> None:
        from scripts.bench.gate_rps import State

        self.state, self.sub = State(plan=plan), sub

    async def lookup(self, subscription_id: str) -> Any:
        return self.state if subscription_id == self.sub else None

    def invalidate(self, subscription_id: str) -> None:
        pass


env = os.environ
terms = Terms(
    pay_to=env["BENCH_PAY_TO"],
    token=env["BENCH_TOKEN"],
    owner=env["BENCH_OWNER"],
    fee_payer=env["BENCH_FEE_PAYER"],
)
app = payment_gate(
    bare,
    pricing={
        "/paid": [OneTime(500_000)],
        "/sub": [Subscription(env["BENCH_PLAN"], 10_000_000, 2_592_000)],
        "/session": [Session(SESSION_PRICE)],
    },
    terms=terms,
    sessions=session_scheme(terms, session_keys()),
    memos=Memos(env["BENCH_SECRET"].encode(), ttl_secs=3600),
    trusted_facilitators={env["BENCH_FACILITATOR"]},
    replay=MemoryReplayStore(),
    subscriptions=WarmSubscriptions(env["BENCH_PLAN"], env["BENCH_SUB"]),
    x402_facilitator=InstantFacilitator(),  # the gate's own cost of an x402 payment
)
