"""scripts/bench/mpp_e2e.py's svcpay server: a FastAPI handler behind the gate, one-time
priced, its x402 and MPP payments settled by the svcpay facilitator at BENCH_FACILITATOR_URL
(uvicorn imports `app` from here)."""

from __future__ import annotations

import gc
import os
from typing import Any

from fastapi import FastAPI

from svcpay.gate import OneTime, payment_gate
from svcpay.gate.pricing import Terms
from svcpay.protocol.memo import Memos
from svcpay.protocol.replay import MemoryReplayStore

api = FastAPI()


@api.get("/free")
@api.get("/paid")
async def answer() -> dict[str, str]:
    return {"answer": "paid content"}


env = os.environ
terms = Terms(
    pay_to=env["BENCH_PAY_TO"],
    token=env["BENCH_TOKEN"],
    facilitator=env["BENCH_FACILITATOR_URL"],
    owner=env["BENCH_OWNER"],
    fee_payer=env["BENCH_FEE_PAYER"],
)
app: Any = payment_gate(
    api,
    pricing={"/paid": [OneTime(int(env["BENCH_PRICE"]))]},
    terms=terms,
    memos=Memos(os.urandom(32), ttl_secs=3600),
    trusted_facilitators=set(),
    replay=MemoryReplayStore(),
)
gc.collect()
gc.freeze()  # as the example resource server does once started (docs/adr/0027)
