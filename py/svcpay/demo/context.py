"""What the walkthrough's steps share (`Walkthrough`): the clients, balances, webhooks, and
the helpers each flow module (`one_time`, `mpp`, `subscriptions`, `sessions`, `report`)
calls. Here, below both the flows and `walkthrough` (which runs them in order), so no flow
imports the module that imports it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import httpx
from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Confirmed
from solders.pubkey import Pubkey

from svcpay import stopping
from svcpay.client import PaymentAuth
from svcpay.demo.children import Child, DemoFailed
from svcpay.demo.output import expect, say, short, sol, usdc, when, wire
from svcpay.demo.receiver import WebhookReceiver
from svcpay.demo.services import Services
from svcpay.demo.world import Balances, World, chain_balance, token_balance
from svcpay.examples.resource_server import DATA_PRICE
from svcpay.localnet.chain import Chain
from svcpay.program.client import BillingClient, Receipt, status_name
from svcpay.program.generated.accounts.subscription import Subscription
from svcpay.progress import Watch

T = TypeVar("T")
PROGRESS_EVERY = 15.0  # seconds between the lines a long wait prints


async def while_working(request: Awaitable[T], service: Child, what: str) -> T:
    """`request`'s result, waited on for as long as `service` (the process doing the work)
    runs and makes progress (`svcpay.progress.Watch`), not for a fixed time that a loaded machine
    overruns; a line every PROGRESS_EVERY seconds says what it is waiting for."""
    task = asyncio.ensure_future(request)
    watch, shown = Watch(service.pid), time.monotonic()
    try:
        while not (await asyncio.wait({task}, timeout=0.25))[0]:
            service.check_running()
            if why := watch.stalled():
                raise DemoFailed(f"{what}: the {service.name} {why}", service)
            if time.monotonic() - shown >= PROGRESS_EVERY:
                shown = time.monotonic()
                waited = shown - watch.began
                say(f"  still waiting for {what} ({waited:.0f} s; the {service.name} is busy)")
        return task.result()
    finally:
        task.cancel()


# -- what the steps share ---------------------------------------------------------------------
class Walkthrough:
    """What every flow's steps share: the chain, the world on it, the services, the webhook
    receiver, the clients, and the helpers that print balances, subscriptions and webhooks."""

    def __init__(
        self,
        chain: Chain,
        world: World,
        services: Services,
        receiver: WebhookReceiver,
        out_dir: Path,
        began: int,
    ) -> None:
        self.chain, self.world, self.services = chain, world, services
        self.receiver, self.out_dir, self.began = receiver, out_dir, began
        self.rpc = AsyncClient(chain.url, commitment=Confirmed)
        self.billing = BillingClient(self.rpc)
        bearer = {"Authorization": f"Bearer {services.api_key}"}
        self.api = httpx.AsyncClient(base_url=services.api_url, timeout=30, event_hooks=wire("api"))
        self.facilitator = httpx.AsyncClient(
            base_url=services.facilitator_url, timeout=60, event_hooks=wire("facilitator")
        )
        self.provider_api = httpx.AsyncClient(
            base_url=services.facilitator_url,
            headers=bearer,
            timeout=30,
            event_hooks=wire("facilitator"),
        )
        self.auth = PaymentAuth(
            world.client, rpc=self.rpc, facilitator=self.facilitator, max_per_request=DATA_PRICE
        )

    async def aclose(self) -> None:
        for http in (self.api, self.facilitator, self.provider_api):
            await http.aclose()
        await self.rpc.close()

    # -- helpers ---------------------------------------------------------------------------
    def check_children(self) -> None:
        for child in self.services.children:
            child.check_running()

    def balances(self) -> Balances:
        w, chain = self.world, self.chain
        plans_in = w.plans_in
        in_plan_token = (0, 0)
        if plans_in.token_2022:
            in_plan_token = (
                token_balance(chain, w.client.pubkey(), plans_in.mint, plans_in.program),
                int(chain.token_state(plans_in.pay_to)["amount"]),
            )
        return Balances(
            client_usdc=token_balance(chain, w.client.pubkey(), w.mint),
            client_sol=chain_balance(chain, w.client.pubkey()),
            provider_usdc=int(chain.token_state(w.pay_to)["amount"]),
            facilitator_sol=chain_balance(chain, w.facilitator.pubkey()),
            client_plan_token=in_plan_token[0],
            provider_plan_token=in_plan_token[1],
        )

    def plan_amount(self, units: int) -> str:
        """An amount of the plans' token (USDC, or PYUSD with --token-2022)."""
        return self.world.plans_in.amount(units)

    def show_balances(self, before: Balances, after: Balances) -> None:
        say("on chain:")
        rows = [
            ("client", usdc(before.client_usdc), usdc(after.client_usdc), ""),
            ("provider (payTo)", usdc(before.provider_usdc), usdc(after.provider_usdc), ""),
        ]
        if self.world.plans_in.token_2022:
            pyusd = self.plan_amount
            rows += [
                ("client", pyusd(before.client_plan_token), pyusd(after.client_plan_token), ""),
                ("provider (plans)", pyusd(before.provider_plan_token),
                 pyusd(after.provider_plan_token), ""),
            ]  # fmt: skip
        for who, lamports_was, lamports_now in (
            ("client", before.client_sol, after.client_sol),
            ("facilitator", before.facilitator_sol, after.facilitator_sol),
        ):
            change = lamports_now - lamports_was
            if change or (who == "client" and lamports_was == 0):
                note = f"  ({change:+,} lamports)" if change else "  (it needs none)"
                rows.append((who, sol(lamports_was), sol(lamports_now), note))
        for who, was, now, note in rows:
            say(f"  {who:<17} {was:>16} → {now}{note}")

    async def subscription_state(self, sub_id: Pubkey) -> Subscription:
        sub = await self.billing.fetch_subscription(sub_id)
        expect(sub is not None, f"subscription {sub_id} is not on chain")
        assert sub is not None
        return sub

    def show_subscription(self, sub: Subscription, label: str = "subscription") -> None:
        say(
            f"{label}: {status_name(sub)}, period {when(sub.current_period_start)} → "
            f"{when(sub.current_period_end)}, cycles billed {sub.cycles_billed}, "
            f"paid {self.plan_amount(sub.total_paid)}"
        )

    async def webhooks(self, expected: list[str], timeout: float = 15.0) -> None:
        """Waits (bounded) for the `expected` webhook types, then prints what arrived."""
        arrived = await asyncio.to_thread(self.receiver.wait_for, expected, timeout)
        for event in self.receiver.new_events():
            data = event["data"]
            # Plans' events are in the plans' token (PYUSD with --token-2022), the rest USDC.
            in_plan_token = str(event["type"]).startswith(("subscription.", "allowance."))
            money = self.plan_amount if in_plan_token else usdc
            amount = data.get("amount")
            extra = f", amount {money(int(amount))}" if amount is not None else ""
            if (
                amount is not None
                and data.get("fee") is not None
                and self.world.plans_in.token_2022
            ):
                extra += f", fee {money(int(data['fee']))}"
            say(f"⇠ webhook {event['type']} ({event['id']}{extra}): signature verified")
        missing = sorted(set(expected) - set(self.receiver.types()))
        expect(arrived, f"no {', '.join(missing)} webhook arrived within {timeout:.0f} s")

    async def poll(self, done: Callable[[], Awaitable[bool]], timeout: float, what: str) -> float:
        began = time.monotonic()
        while not await done():
            stopping.check()
            self.check_children()
            if time.monotonic() - began > timeout:
                raise DemoFailed(f"{what} did not happen within {timeout:.0f} s")
            await asyncio.sleep(0.2)
        return time.monotonic() - began

    # -- the steps -----------------------------------------------------------------------------
    async def register_webhooks(self) -> None:
        say(f"webhook receiver (in this process): {self.receiver.url}")
        reply = await self.provider_api.post("/v1/webhooks", json={"url": self.receiver.url})
        expect(reply.status_code == 201, f"POST /v1/webhooks answered {reply.status_code}")
        endpoint = reply.json()
        self.receiver.secret = endpoint["secret"]
        say(
            f"  endpoint {endpoint['id']}, events {endpoint.get('eventTypes', ['*'])}, "
            f"signing secret {short(endpoint['secret'], 10)}"
        )

    async def show_allowance(self, sub_id: Pubkey) -> None:
        allowance = await self.billing.fetch_allowance(sub_id)
        expect(allowance is not None, f"subscription {sub_id} has no allowance")
        assert allowance is not None
        used, cap = self.plan_amount(allowance.used), self.plan_amount(allowance.cap)
        say(f"  allowance on chain: used {used} of cap {cap}")

    def units(self, receipt: Receipt) -> str:
        return f"{receipt.compute_units:,} compute units"

    def fee_and_units(self, signature: str) -> tuple[int, int]:
        """The fee (lamports) and compute units of a confirmed transaction."""
        tx = self.chain.rpc(
            "getTransaction",
            signature,
            {"encoding": "json", "commitment": "confirmed", "maxSupportedTransactionVersion": 0},
        )
        meta = (tx or {}).get("meta") or {}
        return int(meta.get("fee") or 0), int(meta.get("computeUnitsConsumed") or 0)

    def compute_units(self, signature: str) -> int | None:
        tx = self.chain.rpc(
            "getTransaction",
            signature,
            {"encoding": "json", "commitment": "confirmed", "maxSupportedTransactionVersion": 0},
        )
        meta = (tx or {}).get("meta") or {}
        value = meta.get("computeUnitsConsumed")
        return int(value) if isinstance(value, int) else None
