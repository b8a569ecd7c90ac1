"""The facilitators' soak (scripts/soak): several `svcpay facilitator serve` processes on one
durable PostgreSQL database and the drop-in validator, in real time, under a steady
/authorize load and renewals every period, with a fault every --fault-every seconds in turn:
kill -9 of an instance (restarted 5 s later), PostgreSQL killed for 4 s, the RPC node cut for
10 s. Prints, every 10 s, throughput and answers by status; after each fault, how long
payments and renewals took to recover; at the end, totals and a money check (every charge
and payment once). Exit status 1 if an answer was neither 200 nor a JSON 503 with
Retry-After, or the money does not add up.

    .venv/bin/python -m scripts.bench.soak --minutes 30
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import signal
import statistics
import tempfile
import threading
import time
import traceback
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

from svcpay.localnet.chain import Chain
from svcpay.localnet.process import localnet
from svcpay.program.client import BillingClient, status_name
from tests.support.fleet import PRICE, Fleet, Receiver, make_fleet
from tests.support.postgres import PostgresCluster
from tests.support.processes import Processes
from tests.support.switch import Switch


class ThreadedSwitch:
    """The RPC switch on an event loop of its own, so the load's blocking calls never stall
    the facilitators' link to the node."""

    def __init__(self, target: str) -> None:
        self.switch = Switch(target)
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        self.url = self.switch.url

    def _run(self, coro: Any) -> None:
        asyncio.run_coroutine_threadsafe(coro, self.loop).result(10)

    def on(self) -> None:
        self._run(self.switch.on())

    def off(self) -> None:
        self._run(self.switch.off())


class Soak:
    def __init__(self, fleet: Fleet, subs: list[Any], pg: PostgresCluster, rpc: ThreadedSwitch):
        self.fleet, self.subs, self.pg, self.rpc = fleet, subs, pg, rpc
        self.answers: Counter[str] = Counter()
        self.paid = 0
        self.unsettled: list[dict[str, Any]] = []  # 503'd, retried later
        self.last_ok = time.monotonic()
        self.recoveries: dict[str, list[tuple[float, float]]] = {}
        self.lag = 0.0
        self.stopping = False

    async def load(self, concurrency: int) -> None:
        """Distinct payments, posted round-robin `concurrency` at a time; a 503'd payment is
        posted again later, as the paying client does."""
        counter = itertools.count()
        async with httpx.AsyncClient(timeout=60) as http:

            async def worker() -> None:
                while not self.stopping:
                    try:
                        await one()
                    except Exception as e:  # the soak's own client failed: say so, go on
                        kind = f"client error: {type(e).__name__}"
                        if not self.answers[kind]:
                            traceback.print_exc()
                        self.answers[kind] += 1
                        await asyncio.sleep(0.5)

            async def one() -> None:
                if self.unsettled and self.answers["200"] % 5 == 0:
                    body = self.unsettled.pop(0)
                else:
                    body = (await self.fleet.payments(1))[0]
                url = self.fleet.urls[next(counter) % len(self.fleet.urls)]
                try:
                    reply = await http.post(f"{url}/authorize", json=body)
                except httpx.HTTPError as e:  # an instance killed mid-request
                    self.answers[f"connection: {type(e).__name__}"] += 1
                    self.unsettled.append(body)
                    return
                kind = _kind(reply)
                self.answers[kind] += 1
                if reply.status_code == 200:
                    self.paid += 1
                    self.last_ok = time.monotonic()
                elif kind == "503":
                    self.unsettled.append(body)
                    await asyncio.sleep(0.5)

            await asyncio.gather(*(worker() for _ in range(concurrency)))

    async def watch_renewals(self) -> None:
        """How far behind the renewals are: the oldest due period end, in seconds."""
        billing = BillingClient.connect(self.fleet.validator_url)
        try:
            while not self.stopping:
                now = await billing.chain_time()
                ends = [
                    s.current_period_end
                    for _, s in await billing.subscriptions()
                    if status_name(s) == "Active" and s.current_period_end <= now
                ]
                self.lag = float(now - min(ends)) if ends else 0.0
                await asyncio.sleep(0.5)
        finally:
            await billing.close()

    async def recovered(self, name: str, since: float, period: float) -> None:
        """Records how long after `since` payments were answered 200 again and renewals
        were less than a second late (within the period's own slack)."""
        paid_at = renewed_at = None
        while paid_at is None or renewed_at is None:
            if paid_at is None and self.last_ok > since:
                paid_at = self.last_ok - since
            if renewed_at is None and self.lag <= 1.0 and time.monotonic() > since + 1:
                renewed_at = time.monotonic() - since
            if time.monotonic() - since > 10 * period:
                break
            await asyncio.sleep(0.2)
        got = (paid_at or float("nan"), renewed_at or float("nan"))
        self.recoveries.setdefault(name, []).append(got)
        print(f"  recovered from {name}: payments {got[0]:.1f} s, renewals {got[1]:.1f} s")

    async def faults(self, every: float, period: float, restart: Any) -> None:
        for turn in itertools.count():
            await asyncio.sleep(every)
            if self.stopping:
                return
            kind = ("kill -9", "database", "rpc")[turn % 3]
            print(f"fault: {kind}")
            if kind == "kill -9":
                victim = self.fleet.children[turn % len(self.fleet.children)]
                victim.proc.send_signal(signal.SIGKILL)
                ended = time.monotonic()
                asyncio.get_running_loop().call_later(5, restart, victim)
            elif kind == "database":
                self.pg.kill()
                await asyncio.sleep(4)
                self.pg.restart()
                ended = time.monotonic()
            else:
                self.rpc.off()
                await asyncio.sleep(10)
                self.rpc.on()
                ended = time.monotonic()
            asyncio.create_task(self.recovered(kind, ended, period))


def _kind(reply: httpx.Response) -> str:
    if reply.status_code == 503:
        try:
            ok = bool(reply.json().get("error")) and bool(reply.headers.get("retry-after"))
        except ValueError:
            ok = False
        return "503" if ok else "503 without JSON or Retry-After"
    return str(reply.status_code)


async def main(args: argparse.Namespace) -> int:
    with (
        localnet() as node,
        PostgresCluster(durable=True) as pg,
        tempfile.TemporaryDirectory(prefix="svcpay-soak-") as tmp,
    ):
        chain = Chain(node.url, node.can_time_travel)
        receiver, processes = Receiver(), Processes(Path(tmp))
        rpc = ThreadedSwitch(node.url)
        rpc.on()
        fleet = await make_fleet(node, chain, pg.url, receiver, processes, Path(tmp), rpc=rpc.url)
        periods = int(args.minutes * 60 / args.period) + 3
        _, subs = await fleet.plan(1, args.period, args.subscribers, periods=periods)
        real_time = {"SVCPAY_CRANK_INTERVAL_SECS": "60", "SVCPAY_INDEXER_INTERVAL_SECS": "2"}
        fleet.start(args.instances, **real_time)
        print(
            f"soak: {args.instances} facilitators on PostgreSQL, {args.subscribers} "
            f"subscriptions renewing every {args.period} s, {args.concurrency} paying "
            f"clients, a fault every {args.fault_every} s, for {args.minutes} min"
        )
        soak = Soak(fleet, subs, pg, rpc)

        def restart(child: Any) -> None:
            i = fleet.children.index(child)
            fleet.start(1, **real_time)  # a new process in the dead one's place
            fleet.urls[i] = fleet.urls.pop()
            fleet.children[i] = fleet.children.pop()

        tasks = [
            asyncio.create_task(soak.load(args.concurrency)),
            asyncio.create_task(soak.watch_renewals()),
            asyncio.create_task(soak.faults(args.fault_every, args.period, restart)),
        ]
        began = time.monotonic()
        paid_before = 0
        try:
            while (elapsed := time.monotonic() - began) < args.minutes * 60:
                await asyncio.sleep(10)
                rate = (soak.paid - paid_before) / 10
                paid_before = soak.paid
                print(
                    f"{elapsed:6.0f} s  {rate:6.1f} payments/s  renewals {soak.lag:4.0f} s "
                    f"behind  answers {dict(soak.answers)}",
                    flush=True,
                )
        finally:
            soak.stopping = True
            await asyncio.wait(tasks, timeout=30)
        billing = BillingClient.connect(node.url)
        cycles = [s.cycles_billed for _, s in await billing.subscriptions()]
        await billing.close()
        processes.stop()
        receiver.close()
        expected = (sum(cycles) + soak.paid) * PRICE
        received = fleet.received()
        print("\nrecovery after each fault (payments / renewals, seconds; median, max):")
        for name, times in soak.recoveries.items():
            pays = [p for p, _ in times]
            renews = [r for _, r in times]
            print(
                f"  {name:9} x{len(times)}: {statistics.median(pays):.1f} / "
                f"{statistics.median(renews):.1f}, max {max(pays):.1f} / {max(renews):.1f}"
            )
        # A killed instance answers nothing: its connections are refused (a load balancer's
        # health check takes it out); every answer that was given must be 200 or 503.
        bad = {
            k: v
            for k, v in soak.answers.items()
            if k not in ("200", "503") and not k.startswith(("connection", "client error"))
        }
        print(f"answers: {dict(soak.answers)}")
        print(
            f"money: {soak.paid} payments and {sum(cycles)} subscription charges = "
            f"{expected} base units; the provider received {received}: "
            f"{'exact' if expected == received else 'MISMATCH'}"
        )
        dupes = sum(1 for n in receiver.acknowledged.values() if n > 1)
        print(
            f"webhooks: {len(receiver.acknowledged)} events, {dupes} acknowledged twice "
            "(an instance killed between sending a delivery and recording it)"
        )
        return 0 if expected == received and not bad else 1


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=30.0)
    p.add_argument("--instances", type=int, default=3)
    p.add_argument("--subscribers", type=int, default=30)
    p.add_argument("--period", type=int, default=30, help="the plan's period, seconds")
    p.add_argument("--concurrency", type=int, default=8, help="paying clients at once")
    p.add_argument("--fault-every", type=float, default=60.0, help="seconds between faults")
    return p.parse_args()


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main(parse())))
