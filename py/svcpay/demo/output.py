"""What the demo prints: each step's title, lines, JSON and amounts, and each request and
response as it crosses the wire (`wire`, httpx event hooks). `step` is also a checkpoint: a
Ctrl-C whose cancellation something swallowed still stops the demo there (`svcpay.stopping`)."""

from __future__ import annotations

import json
import sys
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import httpx

from svcpay import stopping
from svcpay.amounts import format_amount
from svcpay.demo.children import Child, DemoFailed
from svcpay.protocol.headers import X_PAYMENT, X_SVC_SUB
from svcpay.schemes.x402_exact.wire import (
    PAYMENT_RESPONSE,
    PAYMENT_SIGNATURE,
)


# -- printing ----------------------------------------------------------------------------------
def step(title: str) -> None:
    stopping.check()  # a Ctrl-C whose cancellation was swallowed still stops the demo here
    print(f"\n── {title}", flush=True)


def say(text: str = "") -> None:
    print(f"   {text}", flush=True)


def show_json(value: object, indent: str = "     ") -> None:
    for line in json.dumps(value, indent=2).splitlines():
        print(indent + line)
    sys.stdout.flush()


def usdc(units: int) -> str:
    return format_amount(units)


def sol(lamports: int) -> str:
    return f"{lamports / 10**9:.6f} SOL"


def when(ts: int) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M UTC")


def short(value: str, keep: int = 16) -> str:
    return value if len(value) <= keep + 8 else f"{value[:keep]}…({len(value)} chars)"


def expect(condition: bool, message: str, child: Child | None = None) -> None:
    if not condition:
        raise DemoFailed(message, child)


def wire(name: str) -> dict[str, list[Callable[[Any], Awaitable[None]]]]:
    """httpx event hooks that print each request line (with its payment or key headers)
    and each response status, as they cross the wire."""

    async def request(req: httpx.Request) -> None:
        extras = [
            f"{h}: {short(v)}"
            for h in (X_PAYMENT, PAYMENT_SIGNATURE, X_SVC_SUB, "Authorization")
            if (v := req.headers.get(h))
        ]
        path = req.url.raw_path.decode()
        say(f"→ {name}  {req.method} {path}" + (f"   [{'; '.join(extras)}]" if extras else ""))

    async def response(resp: httpx.Response) -> None:
        extras = [
            f"{h}: {short(v)}"
            for h in (PAYMENT_RESPONSE, "Payment-Receipt")
            if (v := resp.headers.get(h))
        ]
        line = f"← {name}  {resp.status_code} {resp.reason_phrase}"
        say(line + (f"   [{'; '.join(extras)}]" if extras else ""))

    return {"request": [request], "response": [response]}
