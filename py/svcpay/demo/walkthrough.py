"""The walkthrough: svcpay as separate processes, and a paying client going through the
spec's three flows against them, then a session. `Walkthrough` holds what the steps share
(the clients, balances, webhooks); each flow is a module of its own: `one_time` (1, 1b),
`mpp` (1c), `subscriptions` (2 to 4), `sessions` (5), `report` (6, 7). The chain's setup
is `world`, the processes `services`, the printing `output`.

With `token_2022` (`--token-2022`) the plans, so the subscription, its renewal and metered
billing, are priced in a PYUSD-like Token-2022 mint (6 decimals, a transfer hook, a
permanent delegate, a zero transfer fee); one-time payments and the session stay in USDC:
the example API sells its plans in one token and single calls in another.

Processes: the local validator (svcpay's drop-in, which can move its clock), the facilitator
(`svcpay facilitator serve`: settlement API, billing crank, webhooks, indexer, analytics; on
SQLite) and the example resource server (`python -m svcpay.examples.resource_server`). This
process plays the paying client and the provider's webhook endpoint. Each step prints what
crossed the wire and what changed on chain.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
import traceback
from collections.abc import Awaitable, Callable
from contextlib import ExitStack
from pathlib import Path

import httpx
from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Confirmed
from solders.pubkey import Pubkey

from svcpay import stopping
from svcpay.client import PaymentAuth
from svcpay.demo import DEFAULT_OUT, mpp, one_time, report, sessions, subscriptions
from svcpay.demo import serve as serving
from svcpay.demo.children import Child, DemoFailed
from svcpay.demo.output import expect, say, short, sol, step, usdc, when, wire
from svcpay.demo.receiver import WebhookReceiver
from svcpay.demo.services import Services, start_services
from svcpay.demo.world import Balances, World, chain_balance, set_up_chain, token_balance
from svcpay.examples.resource_server import DATA_PRICE
from svcpay.localnet.chain import Chain
from svcpay.localnet.process import LocalnetError, ProgramBinaryMissing, localnet
from svcpay.program.client import BillingClient, Receipt, status_name
from svcpay.program.generated.accounts.subscription import Subscription


# -- the walkthrough -------------------------------------------------------------------------
class Walkthrough:
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

    async def run(self) -> None:
        try:
            await self.register_webhooks()
            await one_time.one_time(self)
            await one_time.x402_exact(self)
            await mpp.charge(self)
            sub = await subscriptions.subscription(self)
            await subscriptions.renewal(self, sub)
            await subscriptions.metered(self)
            await sessions.session(self)
            await report.webhook_summary(self)
            await report.analytics(self)
        finally:
            await self.aclose()

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


# -- running it --------------------------------------------------------------------------------
class Demo:
    """One run. `children`, `validator_url` and `tmp` stay readable afterwards (tests check
    that nothing is left behind)."""

    def __init__(self, out_dir: Path, token_2022: bool = False, serve: bool = False) -> None:
        self.out_dir = out_dir
        self.token_2022 = token_2022  # the plans in a PYUSD-like Token-2022 mint
        self.serve = serve  # keep the services up for a browser until Ctrl-C (--serve)
        self.serving = False  # a Ctrl-C while serving is how a --serve run ends: exit 0
        self.children: list[Child] = []
        self.validator_url: str | None = None
        self.tmp: Path | None = None

    def run(self, stack: ExitStack) -> None:
        began = time.monotonic()
        stopping.check()  # a Ctrl-C during the imports
        print("svcpay demo: the product as separate processes, a paying client, the spec's flows")
        if self.token_2022:
            print("(--token-2022: the plans are priced in a PYUSD-like Token-2022 mint)")
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="svcpay-demo-")))
        self.tmp = tmp
        # $SVCPAY_VALIDATOR picks it (scripts/demo --validator); the drop-in by default.
        node = stack.enter_context(localnet(deploy=True))
        self.validator_url = node.url
        version = f", version {node.version}" if node.version else ""
        say(f"local validator ({node.kind}) at {node.url}{version}")
        chain = Chain(node.url, node.can_time_travel)
        wall_start = min(int(time.time()), chain.unix_timestamp())
        world = set_up_chain(chain, self.token_2022)
        services = start_services(stack, tmp, node.url, world, self.children)
        receiver = WebhookReceiver().start()
        stack.callback(receiver.close)
        walk = Walkthrough(chain, world, services, receiver, self.out_dir, wall_start)
        stopping.run(walk.run())
        step(f"Done in {time.monotonic() - began:.1f} s")
        if self.serve:
            left = usdc(token_balance(chain, world.client.pubkey(), world.mint))
            self.serving = True
            serving.serve(tmp, services, world, node.url, left, self.children)
        say("stopping the resource server, the facilitator and the validator")

    def failed(self, message: str, child: Child | None) -> None:
        print(f"\ndemo failed: {message}", file=sys.stderr)
        exited = [c for c in self.children if c.proc.poll() is not None]
        for c in [child] if child else exited or self.children:
            tail = c.stderr_tail()
            if tail:
                print(f"--- the {c.name}'s stderr (last lines):", file=sys.stderr)
                print(tail, file=sys.stderr)


def run(
    out_dir: Path = DEFAULT_OUT,
    demo: Demo | None = None,
    token_2022: bool = False,
    serve: bool = False,
) -> int:
    """Runs the walkthrough (`demo`, or a new one writing to `out_dir`, with the plans in a
    PYUSD-like Token-2022 mint if `token_2022`, the services kept up until Ctrl-C if
    `serve`): 0 when every step did what it should (and, serving, on Ctrl-C), 1 (the reason
    and the failing process's stderr on stderr) when one did not, 130 when interrupted."""
    demo = demo or Demo(out_dir, token_2022, serve)
    stack = ExitStack()
    code = 1
    with stopping.handling():
        try:
            demo.run(stack)
            stopping.check()  # a stop that came as the last step ended is still a stop
            code = 0
        except KeyboardInterrupt:  # stopping.Interrupted, raised at a checkpoint
            code = 0 if getattr(demo, "serving", False) else 130  # how --serve ends
        except BaseException as e:
            # Once a stop was asked, what it broke (a service's command killed by the
            # terminal's Ctrl-C, a cancelled read) is the stop, not a failure.
            if stopping.requested():
                code = 0 if getattr(demo, "serving", False) else 130
            elif isinstance(e, DemoFailed):
                demo.failed(str(e), e.child)
            elif isinstance(e, (ProgramBinaryMissing, LocalnetError)):
                demo.failed(str(e), None)
            elif isinstance(e, Exception):
                demo.failed(f"{type(e).__name__}: {e}\n{traceback.format_exc()}", None)
            else:
                raise
        finally:
            stack.close()  # a signal meanwhile only sets the flag: the cleanup runs to the end
    if code == 130:
        print(f"\ndemo interrupted ({stopping.signal_name()})", file=sys.stderr)
    elif code == 0:
        say("all stopped; temporary files removed")
    return code
