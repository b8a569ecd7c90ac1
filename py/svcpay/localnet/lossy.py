"""A JSON-RPC proxy that behaves like a real cluster's RPC provider, for tests and soaks
(issue 37): it drops sends, throttles, lags and takes its time.

    python -m svcpay.localnet.lossy --upstream http://127.0.0.1:8899 --port 0 \\
        --drop-sends 0.3 --throttle 0.2 --latency 0.05-0.3 --lag-blockhash 2 \\
        --lag-transactions 2 --seed 7

- `--drop-sends F`: a fraction F of `sendTransaction` calls is answered with the
  transaction's real signature and never forwarded (a leader that dropped it).
- `--throttle F`: a fraction F of all calls is answered HTTP 429 with `Retry-After: 1`.
- `--latency LO-HI`: each call waits a uniform LO..HI seconds first.
- `--lag-blockhash S`: `getLatestBlockhash` answers what the upstream answered S seconds ago
  (a node behind a load balancer that lags the others): the proxy reads the upstream's twice
  a second from the first request on, so a caller who asks once in two minutes gets a
  blockhash S seconds old too.
- `--lag-transactions S`: `getTransaction` answers null for a signature until S seconds
  after it was first asked for: a node that reports a transaction's status before it
  serves the transaction (agave writes it to the ledger after the bank confirms it; behind
  a load balancer, another node may answer).
- `--purging N`: each `getSignaturesForAddress` is answered -32602 "slot cleaned up" N times
  in a row, then forwarded once: a node whose ledger cleanup is purging the oldest slots a
  listing reaches (agave answers that until the purge is done).

Prints `svcpay lossy-rpc ready URL` once it listens; `GET /stats` answers its counters
as JSON. Starlette and uvicorn (the gate extra) serve it.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import collections
import json
import random
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
from solders.transaction import VersionedTransaction
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

SAMPLE_SECS = 0.5  # how often a lagging proxy reads the upstream's latest blockhash


@dataclass
class Faults:
    drop_sends: float = 0.0
    throttle: float = 0.0
    latency: tuple[float, float] = (0.0, 0.0)
    lag_blockhash: float = 0.0
    seed: int | None = None
    lag_transactions: float = 0.0
    purging: int = 0


@dataclass
class Stats:
    calls: collections.Counter[str] = field(default_factory=collections.Counter)
    dropped: int = 0
    throttled: int = 0
    forwarded: int = 0
    # Each copy of a transaction sent through the proxy, by signature: (seconds since the
    # proxy started, "dropped" | "throttled" | "forwarded"), to say why one landed late.
    sends: dict[str, list[tuple[float, str]]] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)

    def sent(self, signature: str | None, what: str) -> None:
        if signature is not None:
            at = round(time.monotonic() - self.started, 2)
            self.sends.setdefault(signature, []).append((at, what))

    def as_json(self) -> dict[str, Any]:
        return {
            "calls": dict(self.calls),
            "dropped": self.dropped,
            "throttled": self.throttled,
            "forwarded": self.forwarded,
            "sends": self.sends,
            "started": self.started,  # time.monotonic(): the same clock in every process
        }


def _signature(params: Any) -> str | None:
    """The first signature of a sendTransaction's transaction (base64 or base58)."""
    if not isinstance(params, list) or not params or not isinstance(params[0], str):
        return None
    encoding = "base58"
    if len(params) > 1 and isinstance(params[1], dict):
        encoding = str(params[1].get("encoding", "base58"))
    try:
        if encoding == "base64":
            raw = base64.b64decode(params[0])
        else:
            import base58

            raw = base58.b58decode(params[0])
        return str(VersionedTransaction.from_bytes(raw).signatures[0])
    except Exception:
        return None


class LossyRpc:
    """The proxy's state: the faults it injects, what it counted, the blockhash history."""

    def __init__(self, upstream: str, faults: Faults) -> None:
        self.upstream, self.faults = upstream, faults
        self.random = random.Random(faults.seed)
        self.stats = Stats()
        # Per kind of getLatestBlockhash request, what the upstream answered when.
        self.blockhashes: dict[str, collections.deque[tuple[float, dict[str, Any]]]] = {}
        self.samplers: list[asyncio.Task[None]] = []
        self.first_asked: dict[str, float] = {}  # getTransaction's signature -> when
        self.purged_in_a_row = 0  # getSignaturesForAddress answered "slot cleaned up"
        self.http = httpx.AsyncClient(timeout=30)
        self.app = Starlette(
            routes=[
                Route("/", self.rpc, methods=["POST"]),
                Route("/stats", self.stats_route, methods=["GET"]),
            ],
        )

    async def stats_route(self, request: Request) -> Response:
        return JSONResponse(self.stats.as_json())

    async def rpc(self, request: Request) -> Response:
        raw = await request.body()
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        method = body.get("method") if isinstance(body, dict) else "(batch)"
        self.stats.calls[str(method)] += 1
        signature = None
        if method == "sendTransaction" and isinstance(body, dict):
            signature = _signature(body.get("params"))
        low, high = self.faults.latency
        if high > 0:
            await asyncio.sleep(self.random.uniform(low, high))
        if self.faults.throttle and self.random.random() < self.faults.throttle:
            self.stats.throttled += 1
            self.stats.sent(signature, "throttled")
            return JSONResponse(
                {"jsonrpc": "2.0", "error": {"code": 429, "message": "Too many requests"},
                 "id": body.get("id") if isinstance(body, dict) else None},
                status_code=429, headers={"Retry-After": "1"},
            )  # fmt: skip
        dropped = method == "sendTransaction" and self.random.random() < self.faults.drop_sends
        if dropped and isinstance(body, dict) and signature is not None:
            self.stats.dropped += 1
            self.stats.sent(signature, "dropped")
            return JSONResponse({"jsonrpc": "2.0", "result": signature, "id": body.get("id")})
        if method == "getLatestBlockhash" and self.faults.lag_blockhash and isinstance(body, dict):
            return await self._lagging_blockhash(raw, body)
        if method == "getTransaction" and self.faults.lag_transactions and isinstance(body, dict):
            params = body.get("params")
            asked = str(params[0]) if isinstance(params, list) and params else ""
            first = self.first_asked.setdefault(asked, time.monotonic())
            if time.monotonic() - first < self.faults.lag_transactions:
                self.stats.calls["getTransaction (not served yet)"] += 1
                return JSONResponse({"jsonrpc": "2.0", "result": None, "id": body.get("id")})
        if method == "getSignaturesForAddress" and self.faults.purging and isinstance(body, dict):
            if self.purged_in_a_row < self.faults.purging:
                self.purged_in_a_row += 1
                self.stats.calls["getSignaturesForAddress (slot cleaned up)"] += 1
                return JSONResponse(
                    {"jsonrpc": "2.0", "error": {"code": -32602, "message": "slot cleaned up"},
                     "id": body.get("id")}
                )  # fmt: skip
            self.purged_in_a_row = 0
        self.stats.sent(signature, "forwarded")
        return await self._forward(raw)

    async def _forward(self, raw: bytes) -> Response:
        self.stats.forwarded += 1
        try:
            reply = await self.http.post(
                self.upstream, content=raw, headers={"Content-Type": "application/json"}
            )
        except httpx.HTTPError as e:
            return JSONResponse({"error": f"upstream: {e}"}, status_code=502)
        return Response(reply.content, reply.status_code, media_type="application/json")

    async def _lagging_blockhash(self, raw: bytes, body: dict[str, Any]) -> Response:
        """What the upstream answered `lag_blockhash` seconds ago: a node that far behind.
        From the first request of a kind (its params: a commitment) on, the proxy asks the
        upstream that twice a second, and answers the newest answer at least
        `lag_blockhash` old (the oldest, in the first seconds)."""
        key = json.dumps(body.get("params"), sort_keys=True)
        history = self.blockhashes.get(key)
        if history is None:
            reply = await self._forward(raw)
            result = _result(bytes(reply.body))
            if result is None:
                return reply
            history = collections.deque([(time.monotonic(), result)], maxlen=8192)
            self.blockhashes[key] = history
            self.samplers.append(asyncio.create_task(self._sample(raw, history)))
        now = time.monotonic()
        chosen = history[0][1]
        for at, result in history:
            if at > now - self.faults.lag_blockhash:
                break
            chosen = result
        return JSONResponse({"jsonrpc": "2.0", "result": chosen, "id": body.get("id")})

    async def _sample(
        self, raw: bytes, history: collections.deque[tuple[float, dict[str, Any]]]
    ) -> None:
        while True:
            await asyncio.sleep(SAMPLE_SECS)
            try:
                reply = await self.http.post(
                    self.upstream, content=raw, headers={"Content-Type": "application/json"}
                )
            except httpx.HTTPError:
                continue
            result = _result(reply.content)
            if result is not None:
                history.append((time.monotonic(), result))


def _result(raw: bytes) -> dict[str, Any] | None:
    """A JSON-RPC answer's `result`, if it has one."""
    try:
        answer = json.loads(raw)
    except ValueError:
        return None
    result = answer.get("result") if isinstance(answer, dict) else None
    return result if isinstance(result, dict) else None


def parse_latency(text: str) -> tuple[float, float]:
    low, _, high = text.partition("-")
    try:
        pair = (float(low), float(high or low))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: give seconds as LO-HI, e.g. 0.05-0.3"
        ) from None
    if not 0 <= pair[0] <= pair[1]:
        raise argparse.ArgumentTypeError(f"{text!r}: 0 <= LO <= HI")
    return pair


def fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"{text!r}: a fraction from 0 to 1")
    return value


def main(argv: list[str] | None = None) -> int:
    import uvicorn

    from svcpay import stopping

    parser = argparse.ArgumentParser(prog="python -m svcpay.localnet.lossy", description=__doc__)
    parser.add_argument("--upstream", required=True, help="the validator's JSON-RPC URL")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--drop-sends", type=fraction, default=0.0)
    parser.add_argument("--throttle", type=fraction, default=0.0)
    parser.add_argument("--latency", type=parse_latency, default=(0.0, 0.0))
    parser.add_argument("--lag-blockhash", type=float, default=0.0, metavar="SECONDS")
    parser.add_argument("--lag-transactions", type=float, default=0.0, metavar="SECONDS")
    parser.add_argument("--purging", type=int, default=0, metavar="N")
    parser.add_argument("--seed", type=int)
    args = parser.parse_args(argv)
    faults = Faults(
        args.drop_sends, args.throttle, args.latency, args.lag_blockhash, args.seed,
        args.lag_transactions, args.purging,
    )  # fmt: skip
    proxy = LossyRpc(args.upstream, faults)
    server = uvicorn.Server(
        uvicorn.Config(proxy.app, host=args.host, port=args.port, log_level="warning")
    )

    def ready(port: int) -> None:
        print(f"svcpay lossy-rpc ready http://{args.host}:{port}", flush=True)

    return 0 if stopping.serve(server, ready) else 1


if __name__ == "__main__":
    sys.exit(main())
