"""The demo's processes: the facilitator (`svcpay facilitator serve`, on SQLite) and the
example resource server, each started with only the settings the demo gives it."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from svcpay.demo.children import Child, run_command
from svcpay.demo.output import say, short, step
from svcpay.demo.world import World
from svcpay.keys import save_keypair

PYTHON = sys.executable


@dataclass(frozen=True)
class Services:
    facilitator_url: str
    api_url: str
    api_key: str
    children: tuple[Child, ...]  # the facilitator, then the resource server

    @property
    def facilitator(self) -> Child:
        return self.children[0]


def child_env(extra: Mapping[str, str]) -> dict[str, str]:
    """This environment without any SVCPAY_* setting of the caller's, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SVCPAY_")}
    env["PYTHONUNBUFFERED"] = "1"
    return {**env, **extra}


def start_services(
    stack: ExitStack, tmp: Path, rpc_url: str, world: World, children: list[Child]
) -> Services:
    step("Starting the services (separate processes)")
    facilitator_key = save_keypair(world.facilitator, tmp / "facilitator.json")
    server_key = save_keypair(world.server_authority, tmp / "resource-server.json")
    say(f"keypairs (Solana CLI format) in {tmp}: {facilitator_key.name}, {server_key.name}")
    database = f"sqlite:///{tmp / 'facilitator.db'}"
    facilitator_env = child_env(
        {
            "SVCPAY_RPC_URL": rpc_url,
            "SVCPAY_DATABASE_URL": database,
            "SVCPAY_FACILITATOR_KEYPAIR": str(facilitator_key),
            "SVCPAY_CRANK_INTERVAL_SECS": "1",
            "SVCPAY_WEBHOOK_INTERVAL_SECS": "0.5",
            "SVCPAY_WEBHOOK_ALLOW_LOCAL": "1",  # the demo's receiver listens on loopback
            "SVCPAY_INDEXER_INTERVAL_SECS": "0.5",
            "SVCPAY_SESSION_INTERVAL_SECS": "0.5",
            # A session is redeemed once 1.00 USDC of vouchers is unredeemed (the default),
            # or 300 s after its first report: the demo's 1,000 calls make one redeem.
        }
    )
    cli = [PYTHON, "-m", "svcpay.cli", "facilitator"]
    create = [
        "provider", "create", "demo-provider", "--plan", str(world.plan),
        "--plan", str(world.metered_plan), "--pay-to", str(world.pay_to), "--json",
    ]  # fmt: skip
    if world.plans_in.token_2022:  # the provider's PYUSD account is its too
        create[-1:] = ["--pay-to", str(world.plans_in.pay_to), "--json"]
    say(f"$ svcpay facilitator {' '.join(create[:3])} --plan … --plan … --pay-to … --json")
    created = json.loads(run_command("svcpay facilitator provider create", [*cli, *create],
                                     facilitator_env, tmp))  # fmt: skip
    api_key = str(created["apiKey"])
    say(f"  provider {created['provider']}, API key {short(api_key, 12)} (database {database})")

    say("$ svcpay facilitator serve --port 0")
    facilitator = Child("facilitator", [*cli, "serve", "--port", "0"], facilitator_env, tmp)
    children.append(facilitator)
    stack.callback(facilitator.stop)
    ready = facilitator.wait_ready("svcpay facilitator ready ")
    facilitator_url = ready.split()[3]
    say(f"  pid {facilitator.pid}: {ready}")

    server_env = child_env(
        {
            "SVCPAY_RPC_URL": rpc_url,
            "SVCPAY_FACILITATOR_URL": facilitator_url,
            "SVCPAY_PAY_TO": str(world.pay_to),
            "SVCPAY_MINT": str(world.mint),
            "SVCPAY_SUBSCRIPTION_PLAN": str(world.plan),
            "SVCPAY_METERED_PLAN": str(world.metered_plan),
            "SVCPAY_BILLING_AUTHORITY": str(server_key),
            "SVCPAY_STATE_DB": str(tmp / "resource-server.db"),
            "SVCPAY_FACILITATOR_API_KEY": api_key,  # it reports session vouchers
            "SVCPAY_TOKEN_SYMBOL": "USDC",  # the demo's USDC, as its paywall names it
        }
    )
    if world.plans_in.token_2022:  # the plans are in PYUSD, one-time payments in USDC
        server_env["SVCPAY_PLAN_MINT"] = str(world.plans_in.mint)
    say("$ python -m svcpay.examples.resource_server --port 0")
    server = Child(
        "resource server",
        [PYTHON, "-m", "svcpay.examples.resource_server", "--port", "0"],
        server_env,
        tmp,
    )
    children.append(server)
    stack.callback(server.stop)  # stopped first: it flushes its metered usage to the chain
    ready = server.wait_ready("svcpay resource server ready ")
    say(f"  pid {server.pid}: {ready}")
    return Services(facilitator_url, ready.split()[-1], api_key, (facilitator, server))
