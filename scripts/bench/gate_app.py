"""The benchmark's server app: a FastAPI API (the same handler on every route) behind the gate,
configured by environment variables that scripts/bench/gate_http.py sets (uvicorn imports
`app` from here). BENCH_NO_GATE=1 serves the API bare; BENCH_FACILITATOR_URL sends x402 and MPP
payments and MPP charges to that HTTP facilitator (else to one in process that answers at
once)."""

from __future__ import annotations

import gc
import os
from typing import Any

from fastapi import FastAPI

from scripts.bench.gate_rps import (
    SESSION_PRICE,
    InstantCharges,
    InstantFacilitator,
    session_keys,
    session_scheme,
)
from svcpay.gate import OneTime, Session, Subscription, payment_gate
from svcpay.gate.pricing import Terms
from svcpay.protocol.memo import Memos
from svcpay.protocol.replay import MemoryReplayStore
from svcpay.schemes.mpp_charge.facilitator_client import ChargeFacilitatorClient
from svcpay.schemes.x402_exact.facilitator_client import X402FacilitatorClient

api = FastAPI()


@api.get("/free")
@api.get("/paid")
@api.get("/sub")
@api.get("/session")
async def answer() -> dict[str, int]:
    return {"data": 42}


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
facilitator_url = env.get("BENCH_FACILITATOR_URL")
app: Any = api
if not env.get("BENCH_NO_GATE"):
    app = payment_gate(
        api,
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
        x402_facilitator=(
            X402FacilitatorClient(facilitator_url) if facilitator_url else InstantFacilitator()
        ),
        mpp_facilitator=(
            ChargeFacilitatorClient(facilitator_url) if facilitator_url else InstantCharges()
        ),
    )

# As the example resource server does once started (and the bench asks the x402 SDK's server
# to do too): the heap loaded so far out of the collector's sight (docs/adr/0027).
# BENCH_GC=collect leaves it in, as a server that does not do this has it.
if env.get("BENCH_GC") != "collect":
    gc.collect()
    gc.freeze()
