"""The facilitator's numbers (scripts/bench-facilitator), against the local validator:
POST /authorize latency (median, p99) one request at a time, settlements per second with
16 concurrent clients, webhook deliveries per second to a local receiver, and the
analytics chart's render time. The facilitator runs as a real HTTP server (uvicorn, in its
own process) on SQLite, or on --database. Prints numbers; asserts nothing."""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Confirmed

from svcpay.client import build_payment
from svcpay.facilitator import analytics
from svcpay.facilitator.store import Event, Store, new_id
from svcpay.facilitator.webhooks import Deliverer
from svcpay.keys import save_keypair
from svcpay.localnet.chain import Chain
from svcpay.localnet.process import localnet
from svcpay.protocol.headers import NETWORK_MAINNET, SCHEME_EXACT
from svcpay.protocol.models import PaymentOption

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def payments(chain: Chain, url: str, fee_payer: str, n: int) -> list[dict[str, object]]:
    """`n` signed one-time payments (distinct memos) from a few funded wallets."""
    mint = chain.create_mint()
    pay_to = chain.token_account(chain.funded_keypair().pubkey(), mint)
    wallets = [chain.funded_keypair() for _ in range(8)]
    for w in wallets:
        chain.token_account(w.pubkey(), mint, n * 1000)
    rpc = AsyncClient(url, commitment=Confirmed)
    from solders.pubkey import Pubkey

    bodies = []
    for i in range(n):
        option = PaymentOption(
            scheme=SCHEME_EXACT, network=NETWORK_MAINNET, token=str(mint), amount="1000",
            pay_to=str(pay_to), memo=f"bench-{i}",
        )  # fmt: skip
        tx = await build_payment(rpc, wallets[i % 8], option, Pubkey.from_string(fee_payer))
        signed = base64.b64encode(tx).decode()
        bodies.append({"signedPayment": signed, "paymentRequirements": option.to_json_dict()})
    await rpc.close()
    return bodies


def start_facilitator(url: str, keyfile: Path, database: str) -> tuple[subprocess.Popen[str], str]:
    env = {
        **os.environ,
        "SVCPAY_RPC_URL": url,
        "SVCPAY_FACILITATOR_KEYPAIR": str(keyfile),
        "SVCPAY_DATABASE_URL": database,
        "SVCPAY_CRANK_INTERVAL_SECS": "0",
        "SVCPAY_INDEXER_INTERVAL_SECS": "0",
        "SVCPAY_SETTLE_UNREGISTERED": "1",  # the benchmark's payTo is nobody's
        "SVCPAY_SETTLE_RATE": "100000",  # and its eight wallets pay as fast as they can
        "SVCPAY_SETTLE_BURST": "100000",
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "svcpay.cli", "facilitator", "serve", "--port", str(free_port())],
        env=env, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("svcpay facilitator ready"):
        proc.kill()
        raise SystemExit(f"the facilitator did not start: {line!r}")
    return proc, line.split()[3]


async def authorize_numbers(base: str, bodies: list[dict[str, object]]) -> None:
    async with httpx.AsyncClient(base_url=base, timeout=30) as http:
        half = len(bodies) // 2
        latencies = []
        for body in bodies[:half]:
            t0 = time.perf_counter()
            reply = await http.post("/authorize", json=body)
            latencies.append(time.perf_counter() - t0)
            assert reply.status_code == 200, reply.text
        latencies.sort()
        p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
        median = statistics.median(latencies) * 1000
        print(
            f"POST /authorize, one at a time ({half}): median {median:.1f} ms, "
            f"p99 {p99 * 1000:.1f} ms"
        )
        slots = asyncio.Semaphore(16)

        async def one(body: dict[str, object]) -> int:
            async with slots:
                return (await http.post("/authorize", json=body)).status_code

        t0 = time.perf_counter()
        codes = await asyncio.gather(*(one(b) for b in bodies[half:]))
        elapsed = time.perf_counter() - t0
        ok = codes.count(200)
        print(
            f"settlements, 16 concurrent ({len(codes)}): {ok / elapsed:,.0f}/s "
            f"({ok} settled, {len(codes) - ok} refused)"
        )


class Receiver(ThreadingHTTPServer):
    request_queue_size = 1024  # the default 5 refuses a burst of concurrent deliveries
    daemon_threads = True


class Sink(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as a production receiver would

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(204)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


async def webhook_numbers(database: str, n: int) -> None:
    server = Receiver(("127.0.0.1", 0), Sink)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    store = Store.open(database)
    provider = await store.providers.create("bench")
    await store.providers.add_resource(provider, "payTo", "BENCHPAYTO")
    await store.webhooks.create_endpoint(provider, f"http://127.0.0.1:{server.server_port}/", ["*"])
    for i in range(n):
        data = {"payTo": "BENCHPAYTO", "i": i}
        await store.events.add(Event(new_id("evt"), "payment.settled", int(time.time()), data))
    deliverer = Deliverer(store, batch=100, concurrency=32, allow_local=True)  # a local receiver
    t0 = time.perf_counter()
    while deliverer.delivered < n:
        if not await deliverer.run_once():
            break
    elapsed = time.perf_counter() - t0
    print(
        f"webhook deliveries ({n}, 32 concurrent): {deliverer.delivered / elapsed:,.0f}/s "
        f"({deliverer.delivered} delivered, {deliverer.failed} failed attempts)"
    )
    await deliverer.aclose()
    await store.close()
    server.shutdown()


def chart_numbers() -> None:
    days = [
        {"date": f"2026-01-{i % 28 + 1:02d}", "oneTime": str(i * 10**6),
         "subscription": str(5 * 10**6), "metered": str(i % 3 * 10**6), "volume": "0",
         "payments": 3, "newSubscriptions": i % 4, "churned": i % 2,
         "activeSubscriptions": 10 + i}
        for i in range(30)
    ]  # fmt: skip
    analytics.chart_png({"days": days}, title="warm-up")
    t0 = time.perf_counter()
    png = analytics.chart_png({"days": days}, title="30 days")
    print(
        f"analytics chart (30 days): {(time.perf_counter() - t0) * 1000:.0f} ms, {len(png):,} bytes"
    )


async def main(n: int, webhooks: int, database: str | None) -> None:
    with tempfile.TemporaryDirectory(prefix="svcpay-bench-") as tmp, localnet() as node:
        chain = Chain(node.url, node.can_time_travel)
        fee_payer = chain.funded_keypair(10**11)
        keyfile = save_keypair(fee_payer, Path(tmp) / "facilitator.json")
        db = database or f"sqlite:///{tmp}/facilitator.db"
        print(f"building {n} signed payments ...", flush=True)
        bodies = await payments(chain, node.url, str(fee_payer.pubkey()), n)
        proc, base = start_facilitator(node.url, keyfile, db)
        try:
            await authorize_numbers(base, bodies)
        finally:
            proc.terminate()
            proc.wait(20)
        await webhook_numbers(f"sqlite:///{tmp}/webhooks.db" if database is None else db, webhooks)
        chart_numbers()
    print(json.dumps({"database": "sqlite" if database is None else "given"}))


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=400, help="payments (half sequential)")
    parser.add_argument("--webhooks", type=int, default=2000)
    parser.add_argument("--database", help="a PostgreSQL URL (default: SQLite in a temp dir)")
    args = parser.parse_args()
    asyncio.run(main(args.n, args.webhooks, args.database))
