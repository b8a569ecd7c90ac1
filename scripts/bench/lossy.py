"""svcpay through a lossy RPC (scripts/bench-lossy; issue 37's "Tests and numbers"): the
public entry points, each a process or a real client, with JSON-RPC proxies
(`python -m svcpay.localnet.lossy`) between them and the drop-in validator:

- `svcpay facilitator serve` on SQLite, its RPC through the "facilitator" proxy;
- the example API (`python -m svcpay.examples.resource_server`), its gate's RPC through the
  "gate" proxy, paid to the facilitator's registered payTo;
- `PaymentAuth` clients, one wallet each, their RPC through the "payers" proxy: N svcpay
  one-time payments, M x402 payments and M MPP charges spread over --seconds;
- K subscriptions to a plan with a short --period, billed by the facilitator's crank, each
  subscriber GETting the subscription route every 5 s (RPC through the "subscribers" proxy).

Each role has a proxy of its own (same faults, its own seed), so its `GET /stats` counts
that role's calls. After --seconds of load and a --drain, each wallet's balance and each
subscription are read from the validator itself, and one column per setting is printed
with the issue's goals and pass/fail words. Timings are printed, never asserted.

    .venv/bin/python -m scripts.bench.lossy --setting combined
    .venv/bin/python -m scripts.bench.lossy --svcpay 100 --x402 20 --mpp 20 \\
        --subscriptions 20 --period 120 --seconds 300 --drain 120     # the issue's sizes
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import math
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from solders.keypair import Keypair
from solders.pubkey import Pubkey

from scripts.bench import lossy_load as load
from scripts.bench.lossy_table import Column, print_table
from svcpay.localnet.chain import Chain
from svcpay.localnet.process import Localnet, localnet
from svcpay.program.client import BillingClient
from tests.support.fleet import PRICE, Fleet, Receiver, make_fleet
from tests.support.processes import Processes

LATENCY = ("--latency", "0.05-0.3")
SETTINGS = {
    "latency": ("latency 50-300 ms", LATENCY),
    "drops": ("+ 30% sends dropped", (*LATENCY, "--drop-sends", "0.3")),
    "throttle": ("+ 20% calls 429", (*LATENCY, "--throttle", "0.2")),
    "combined": (
        "all + blockhash 5 s behind",
        (*LATENCY, "--drop-sends", "0.3", "--throttle", "0.2", "--lag-blockhash", "5"),
    ),
}
ROLES = ("facilitator", "gate", "payers", "subscribers")
# The facilitator as an operator runs it: the product's defaults, not the fault tests' 1 s.
DEFAULTS = {
    "SVCPAY_CRANK_INTERVAL_SECS": "60",
    "SVCPAY_INDEXER_INTERVAL_SECS": "2",
    "SVCPAY_WEBHOOK_INTERVAL_SECS": "1",
    "SVCPAY_WEBHOOK_RETRY_SECS": "30",
    "SVCPAY_SETTLE_RATE": "5",
    "SVCPAY_SETTLE_BURST": "20",
}
API_STARTS = 10  # the example API reads the chain once at start: a 429 there stops it


@dataclass
class Stack:
    """One setting's services: the proxies by role, the facilitator and the example API."""

    processes: Processes
    fleet: Fleet
    proxies: dict[str, str]
    api: str
    api_failed_starts: int

    def stats(self) -> dict[str, dict[str, object]]:
        return {role: httpx.get(url + "/stats").json() for role, url in self.proxies.items()}

    def log(self, name: str) -> str:
        child = next(c for c in self.processes.children if c.name.startswith(name))
        return child.stderr_path.read_text(errors="replace")


def start_proxy(processes: Processes, upstream: str, role: str, flags: tuple[str, ...]) -> str:
    seed = str(37 + ROLES.index(role))
    argv = [sys.executable, "-m", "svcpay.localnet.lossy", "--upstream", upstream, *flags]
    return processes.start(f"lossy {role}", [*argv, "--seed", seed], "svcpay lossy-rpc ready ")


def start_api(
    processes: Processes, fleet: Fleet, plans: list[str], rpc: str, tmp: Path
) -> tuple[str, int]:
    """The example API, started again while its start-up reads fail (a 429 stops it: a
    finding the table reports as the number of failed starts)."""
    env = {
        "SVCPAY_RPC_URL": rpc,
        "SVCPAY_FACILITATOR_URL": fleet.urls[0],
        "SVCPAY_PAY_TO": str(fleet.destination),
        "SVCPAY_MINT": str(fleet.mint),
        "SVCPAY_SUBSCRIPTION_PLAN": plans[0],
        "SVCPAY_METERED_PLAN": plans[1],
        "SVCPAY_BILLING_AUTHORITY": str(fleet.keypair_file),
        "SVCPAY_STATE_DB": str(tmp / "resource-server.db"),
    }
    argv = [sys.executable, "-m", "svcpay.examples.resource_server", "--port", "0"]
    for failed in range(API_STARTS):
        try:
            url = processes.start("gate", argv, "svcpay resource server ready", env)
            return url, failed
        except pytest.fail.Exception:
            processes.children.pop()
    raise SystemExit(f"bench-lossy: the example API did not start in {API_STARTS} tries")


async def make_stack(node: Localnet, chain: Chain, flags: tuple[str, ...], tmp: Path) -> Stack:
    processes = Processes(tmp)
    proxies = {role: start_proxy(processes, node.url, role, flags) for role in ROLES}
    database = f"sqlite:///{tmp / 'facilitator.db'}"
    fleet = await make_fleet(
        node, chain, database, Receiver(), processes, tmp, rpc=proxies["facilitator"]
    )
    return Stack(processes, fleet, proxies, "", 0)


async def run_setting(node: Localnet, chain: Chain, name: str, args: argparse.Namespace) -> Column:
    label, flags = SETTINGS[name]
    print(f"\n== {name}: {label} (proxy flags: {' '.join(flags)})", flush=True)
    with tempfile.TemporaryDirectory(prefix="svcpay-bench-lossy-") as tmp_name:
        tmp = Path(tmp_name)
        stack = await make_stack(node, chain, flags, tmp)
        fleet = stack.fleet
        try:
            window = args.idle + args.seconds + args.drain
            periods = math.ceil(window / args.period) + 3
            plan, _ = await fleet.plan(1, args.period, 0)
            metered, _ = await fleet.plan(2, args.period, 0)
            counts = {"svcpay": args.svcpay, "x402": args.x402, "mpp": args.mpp}
            payments = load.wallets(chain, fleet.mint, counts)
            subscribers = [chain.funded_keypair(10**9) for _ in range(args.subscriptions)]
            for kp in subscribers:
                chain.token_account(kp.pubkey(), fleet.mint, periods * PRICE)
            # Subscribed on the validator itself before the facilitator starts: its first
            # crank pass knows them and wakes when the first is due. (One made later is
            # seen by the next pass only, up to SVCPAY_CRANK_INTERVAL_SECS = 60 s on.)
            subs = await subscribe_all(node, plan, subscribers)
            await fleet.start(1, **DEFAULTS)
            stack.api, stack.api_failed_starts = start_api(
                stack.processes, fleet, [str(plan), str(metered)], stack.proxies["gate"], tmp
            )
            riders = dict(zip(subscribers, subs, strict=True))
            return await measure(stack, node, chain, plan, payments, riders, args)
        finally:
            stack.processes.stop()
            fleet.receiver.close()
            if args.logs:
                shutil.copytree(tmp, Path(args.logs) / name, dirs_exist_ok=True)


async def subscribe_all(node: Localnet, plan: Pubkey, wallets: list[Keypair]) -> list[Pubkey]:
    billing = BillingClient.connect(node.url)
    try:
        return list(await asyncio.gather(*(billing.subscribe(plan, kp) for kp in wallets)))
    finally:
        await billing.close()


async def measure(
    stack: Stack, node: Localnet, chain: Chain, plan: Pubkey, payments: list[load.Payment],
    riders: dict[Keypair, Pubkey], args: argparse.Namespace,
) -> Column:  # fmt: skip
    fleet = stack.fleet
    subs = list(riders.values())
    answers = load.Answers(
        services={_hostport(fleet.urls[0]): "facilitator", _hostport(stack.api): "gate"}
    )
    renewals = load.Renewals(list(subs), args.period)
    watcher = asyncio.create_task(renewals.watch(node.url))
    began = time.monotonic()
    at_start = stack.stats()
    await asyncio.sleep(args.idle)  # the facilitator's own calls while nothing is paid
    after_idle = stack.stats()
    until = time.monotonic() + args.seconds + args.drain
    riding = asyncio.create_task(
        load.subscribers(riders, plan, stack.api, stack.proxies["subscribers"], answers, until)
    )
    print(f"load: {len(payments)} one-time payments over {args.seconds:.0f} s, "
          f"{len(subs)} subscriptions every {args.period} s", flush=True)  # fmt: skip
    paying = asyncio.create_task(
        load.pay_all(
            payments, stack.api, fleet.urls[0], stack.proxies["payers"], answers, args.seconds
        )
    )
    await asyncio.wait({paying}, timeout=max(0.0, until - time.monotonic()))
    await asyncio.sleep(max(0.0, until - time.monotonic()))
    if not paying.done():
        print("drain over with payments still in flight: they count as failed", flush=True)
        paying.cancel()
    await asyncio.gather(riding, return_exceptions=True)
    renewals.stopping = True
    await watcher
    minutes = (time.monotonic() - began) / 60
    load.settle_from_chain(chain, payments)
    return Column(
        name="", payments=payments, answers=answers, renewals=renewals, minutes=minutes,
        idle_minutes=args.idle / 60, stats=(at_start, after_idle, stack.stats()),
        logs={"facilitator": stack.log("facilitator"), "gate": stack.log("gate")},
        api_failed_starts=stack.api_failed_starts, received=fleet.received(),
        subscription_charges=sum(c for c in await fleet.cycles(list(subs))) * PRICE,
    )  # fmt: skip


def _hostport(url: str) -> str:
    parsed = httpx.URL(url)
    return f"{parsed.host}:{parsed.port}"


async def main(args: argparse.Namespace) -> int:
    # The drop-in stands in for mainnet, as in the test suite (tests/conftest.py, ADR 0038).
    os.environ.setdefault("SVCPAY_LOCALNET_AS", "solana-mainnet")
    client_logs = load.LogLines()
    logging.getLogger().addHandler(client_logs)
    logging.getLogger().setLevel(logging.INFO)
    names = list(SETTINGS) if args.setting == "all" else [args.setting]
    columns = []
    with localnet() as node:
        chain = Chain(node.url, node.can_time_travel)
        for name in names:
            column = await run_setting(node, chain, name, args)
            column.name = name
            columns.append(column)
            print_table(columns, SETTINGS, args)  # so far, after each setting
    print(f"\n(the clients' own log lines, all settings: {client_logs.count})")
    return 0


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--setting", choices=[*SETTINGS, "all"], default="all")
    p.add_argument("--svcpay", type=int, default=20, help="svcpay one-time payments")
    p.add_argument("--x402", type=int, default=6, help="x402 payments")
    p.add_argument("--mpp", type=int, default=6, help="MPP charge payments")
    p.add_argument("--subscriptions", type=int, default=5)
    # Not under SVCPAY_CRANK_INTERVAL_SECS (60): a pass that renews every due subscription
    # asks for no sooner pass, so shorter periods are billed a whole interval late.
    p.add_argument("--period", type=int, default=60, help="the plan's period, seconds")
    p.add_argument("--seconds", type=float, default=90.0, help="seconds of load")
    p.add_argument("--drain", type=float, default=45.0, help="seconds after the load")
    p.add_argument("--idle", type=float, default=10.0, help="seconds of no load first")
    p.add_argument("--logs", help="a directory to keep each setting's service logs in")
    return p.parse_args(argv)


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main(parse())))
