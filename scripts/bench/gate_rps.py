"""Requests per second through the payment gate, in process on one core (scripts/bench-gate).

Calls the ASGI app directly (no sockets, no HTTP parsing), so the numbers are the gate's
own cost: a bare endpoint, the 402 path (a fresh body with a memo), a paid request verified
offline (signature, memo, replay claim; a distinct pre-signed proof each), and a
subscription request served from the warm cache. Prints numbers; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from dataclasses import dataclass
from typing import Any

from solders.keypair import Keypair
from solders.pubkey import Pubkey

from svcpay.gate import OneTime, Subscription, payment_gate
from svcpay.gate.pricing import Terms
from svcpay.protocol.memo import Memos, MemoTerms
from svcpay.protocol.proof import PaymentProof
from svcpay.protocol.replay import MemoryReplayStore

PLAN = str(Pubkey.new_unique())
SUB = str(Pubkey.new_unique())


async def bare_app(scope: Any, receive: Any, send: Any) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"application/json")],
        }
    )
    await send({"type": "http.response.body", "body": b'{"data":42}'})


@dataclass(frozen=True)
class State:
    plan: str = PLAN
    status: str = "Active"
    allowance_remaining: int | None = None


class WarmSubscriptions:
    """What ChainSubscriptions returns from its cache: no chain read on the hot path."""

    async def lookup(self, subscription_id: str) -> State | None:
        return State() if subscription_id == SUB else None

    def invalidate(self, subscription_id: str) -> None:
        pass


def scope(path: str, headers: list[tuple[bytes, bytes]]) -> dict[str, Any]:
    return {"type": "http", "method": "GET", "path": path, "headers": headers, "query_string": b""}


async def rate(app: Any, scopes: list[dict[str, Any]], want: int) -> float:
    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    statuses: list[int] = []

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            statuses.append(message["status"])

    start = time.perf_counter()
    for s in scopes:
        await app(s, receive, send)
    elapsed = time.perf_counter() - start
    assert all(code == want for code in statuses), f"unexpected statuses {set(statuses)}"
    return len(scopes) / elapsed


async def main(n: int) -> None:
    facilitator = Keypair()
    terms = Terms(pay_to=str(Pubkey.new_unique()), token=str(Pubkey.new_unique()))
    memos = Memos(b"bench-memo-secret-0123456789", ttl_secs=3600)
    gate = payment_gate(
        bare_app,
        pricing={"/paid": [OneTime(500_000)], "/sub": [Subscription(PLAN, 10_000_000, 2_592_000)]},
        terms=terms,
        memos=memos,
        trusted_facilitators={str(facilitator.pubkey())},
        replay=MemoryReplayStore(),
        subscriptions=WarmSubscriptions(),
    )
    memo = memos.issue(MemoTerms("GET /paid", "500000", terms.pay_to, terms.token))
    now = int(time.time())
    proofs = [
        PaymentProof(
            network="solana-mainnet", transaction=str(Keypair().sign_message(str(i).encode())),
            payer=str(Pubkey.new_unique()), pay_to=terms.pay_to, token=terms.token, amount="500000",
            memo=memo, issued_at=now, expires_at=now + 3600, facilitator=str(facilitator.pubkey()),
        ).signed_by(facilitator).to_header().encode()
        for i in range(n)
    ]  # fmt: skip
    results = {
        "bare endpoint": await rate(gate, [scope("/free", [])] * n, 200),
        "402 path (fresh terms)": await rate(gate, [scope("/paid", [])] * n, 402),
        "paid, verified offline": await rate(
            gate, [scope("/paid", [(b"x-payment", p)]) for p in proofs], 200
        ),
        "subscription, warm cache": await rate(
            gate, [scope("/sub", [(b"x-svc-sub", SUB.encode())])] * n, 200
        ),
    }
    print(f"{n} requests each, one core, in process")
    for name, rps in results.items():
        print(f"{name:<26} {rps:>10,.0f} req/s")
    print(f"paid / bare: {results['paid, verified offline'] / results['bare endpoint']:.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=5000)
    asyncio.run(main(parser.parse_args().n))
