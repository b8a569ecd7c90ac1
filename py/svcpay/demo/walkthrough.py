"""The walkthrough: svcpay as separate processes, and a paying client going through the
spec's three flows against them, then a session (demo/sessions.py).

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
import base64
import json
import os
import signal
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Confirmed
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from solders.system_program import TransferParams, transfer
from spl.token.constants import TOKEN_PROGRAM_ID
from spl.token.instructions import get_associated_token_address

from svcpay.amounts import format_amount, to_base_units
from svcpay.client import PaymentAuth
from svcpay.demo import DEFAULT_OUT, mpp, sessions
from svcpay.demo import serve as serving
from svcpay.demo.children import Child, DemoFailed, run_command
from svcpay.demo.receiver import WebhookReceiver
from svcpay.examples.resource_server import DATA_PRICE, PROCESS_PRICE
from svcpay.keys import save_keypair
from svcpay.localnet import test_hook
from svcpay.localnet.chain import Chain
from svcpay.localnet.process import LocalnetError, ProgramBinaryMissing, localnet
from svcpay.program import instructions, pda
from svcpay.program.client import BillingClient, Receipt, status_name
from svcpay.program.generated.accounts.subscription import Subscription
from svcpay.protocol.headers import X_PAYMENT, X_SVC_SUB
from svcpay.protocol.programs import TOKEN_2022_PROGRAM
from svcpay.schemes.x402_exact import client as x402
from svcpay.schemes.x402_exact.wire import (
    PAYMENT_REQUIRED,
    PAYMENT_RESPONSE,
    PAYMENT_SIGNATURE,
    PaymentRequired,
)

DAY = 86_400


def plan_times(can_time_travel: bool) -> tuple[int, int]:
    """(period, grace) of the demo's plans: a month and three days where the validator can
    travel in time (the drop-in); on solana-test-validator, whose clock only runs, 20 and
    5 seconds, so the renewal step waits a few seconds instead of a month."""
    return (30 * DAY, 3 * DAY) if can_time_travel else (20, 5)


def format_period(secs: int) -> str:
    return f"{secs // DAY} days" if secs >= DAY else f"{secs} seconds"


SUBSCRIPTION_PRICE = to_base_units("10")  # the plan that opens GET /v1/resource
METERED_PLAN_PRICE = to_base_units("1")  # the plan whose allowance POST /v1/process uses
MAX_OVERAGE = to_base_units("0.30")  # the client's metered cap: three calls
RAISE_BY = to_base_units("0.20")
CLIENT_FUNDS = to_base_units("50")
CLIENT_SOL = 50_000_000  # lamports, for the client's own transactions (subscribe, cap)
GATE_CACHE_SECS = 2.0  # the gate caches a subscription's on-chain state this long
PYTHON = sys.executable


# Set by Ctrl-C or SIGTERM while the demo runs (see `signals_for_cleanup`).
INTERRUPTED = threading.Event()


# -- printing ----------------------------------------------------------------------------------
def step(title: str) -> None:
    if INTERRUPTED.is_set():  # a Ctrl-C that something swallowed still stops the demo here
        raise KeyboardInterrupt
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


# -- the chain as the demo sets it up ------------------------------------------------------
@dataclass(frozen=True)
class PlanToken:
    """The token the plans are priced in: the demo's USDC, or with --token-2022 a PYUSD-like
    Token-2022 mint, its program, and the provider's account of it (the plans' destination)."""

    mint: Pubkey
    symbol: str
    program: Pubkey
    pay_to: Pubkey
    hooked: bool = False  # its transfers call the test hook

    @property
    def token_2022(self) -> bool:
        return self.program == TOKEN_2022_PROGRAM

    def amount(self, units: int) -> str:
        return format_amount(units, symbol=self.symbol)


@dataclass(frozen=True)
class World:
    mint: Pubkey  # USDC: one-time payments and the session
    provider: Keypair
    pay_to: Pubkey
    plan: Pubkey  # 10 USDC every 30 days: GET /v1/resource
    metered_plan: Pubkey  # 1 USDC every 30 days + allowance: POST /v1/process
    facilitator: Keypair
    server_authority: Keypair  # the metered plan's billing authority (the resource server)
    client: Keypair
    plans_in: PlanToken  # USDC, or the PYUSD-like mint with --token-2022


@dataclass(frozen=True)
class Balances:
    client_usdc: int
    client_sol: int
    provider_usdc: int
    facilitator_sol: int
    client_plan_token: int = 0  # with --token-2022: the PYUSD-like mint's balances
    provider_plan_token: int = 0


def pyusd_like(chain: Chain, provider: Keypair) -> PlanToken:
    """A mint as PYUSD is on mainnet: Token-2022, 6 decimals, a transfer hook (the test hook,
    where the validator loaded it), a permanent delegate and a transfer fee of zero."""
    hooked = test_hook.loaded(chain)
    mint = test_hook.pyusd_like(chain, hook=hooked)
    say(f"PYUSD: a PYUSD-like Token-2022 mint {mint}: 6 decimals, a transfer fee of 0 bps,")
    say(f"   permanent delegate {chain.payer.pubkey()} (the issuer: it can move anyone's PYUSD),")
    if hooked:
        say(f"   transfer hook {test_hook.HOOK_PROGRAM} (svc_test_hook: it counts transfers)")
    else:
        say("   no transfer hook: the test hook is not built (target/deploy/svc_test_hook.so)")
    pay_to = chain.token_account(provider.pubkey(), mint, program_id=TOKEN_2022_PROGRAM)
    return PlanToken(mint, "PYUSD", TOKEN_2022_PROGRAM, pay_to, hooked)


def set_up_chain(chain: Chain, token_2022: bool = False) -> World:
    step("Setup on chain")
    mint = chain.create_mint(decimals=6)
    say(f"USDC: a 6-decimal mint {mint}")
    provider, facilitator = chain.funded_keypair(), chain.funded_keypair()
    server_authority = chain.funded_keypair(10**9)
    pay_to = chain.token_account(provider.pubkey(), mint)
    plans_in = PlanToken(mint, "USDC", TOKEN_PROGRAM_ID, pay_to)
    if token_2022:
        plans_in = pyusd_like(chain, provider)
    plan, metered_plan = (pda.plan_address(provider.pubkey(), n) for n in (1, 2))
    period, grace = plan_times(chain.can_time_travel)
    token, to, program = plans_in.mint, plans_in.pay_to, plans_in.program
    created = chain.send_ok(
        [
            instructions.create_plan(
                provider.pubkey(), 1, token, to, facilitator.pubkey(),
                SUBSCRIPTION_PRICE, period, grace, token_program=program,
            ),
            instructions.create_plan(
                provider.pubkey(), 2, token, to, server_authority.pubkey(),
                METERED_PLAN_PRICE, period, grace, token_program=program,
            ),
        ],
        [provider],
    )  # fmt: skip
    say(f"provider {provider.pubkey()}, payTo (its USDC account) {pay_to}")
    if plans_in.token_2022:
        say(f"   its PYUSD account {plans_in.pay_to} receives the plans' payments")
    price = plans_in.amount
    say(f"plan {plan}: {price(SUBSCRIPTION_PRICE)} every 30 days (GET /v1/resource)")
    say(f"   billing authority: the facilitator's key {facilitator.pubkey()}")
    say(
        f"plan {metered_plan}: {price(METERED_PLAN_PRICE)} every 30 days + "
        f"{price(PROCESS_PRICE)} per POST /v1/process from an allowance"
    )
    say(f"   billing authority: the resource server's key {server_authority.pubkey()}")
    say(f"both plans in one transaction: {created.compute_units:,} compute units")
    if plans_in.token_2022:
        say("one-time payments (1, 1b, 1c) and the session (5) stay in USDC: the example API")
        say("   sells its plans in one token (--plan-mint) and single calls in another; both")
        say("   work in PYUSD (docs/adr/0030, 0031)")
    client = Keypair()
    chain.token_account(client.pubkey(), mint, amount=CLIENT_FUNDS)
    funds = usdc(CLIENT_FUNDS)
    if plans_in.token_2022:
        chain.token_account(client.pubkey(), plans_in.mint, CLIENT_FUNDS, program_id=program)
        funds += f" and {plans_in.amount(CLIENT_FUNDS)}"
    say(f"client {client.pubkey()}: {funds} and no SOL")
    say(f"facilitator: {sol(chain_balance(chain, facilitator.pubkey()))} (it pays the fees)")
    return World(
        mint, provider, pay_to, plan, metered_plan, facilitator, server_authority, client, plans_in
    )


def chain_balance(chain: Chain, address: Pubkey) -> int:
    return int(chain.rpc("getBalance", str(address), {"commitment": "confirmed"})["value"])


def token_balance(
    chain: Chain, owner: Pubkey, mint: Pubkey, program: Pubkey = TOKEN_PROGRAM_ID
) -> int:
    return int(chain.token_state(get_associated_token_address(owner, mint, program))["amount"])


# -- the processes ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Services:
    facilitator_url: str
    api_url: str
    api_key: str
    children: tuple[Child, ...]


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
                                     facilitator_env))  # fmt: skip
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
            await self.one_time()
            await self.x402()
            await mpp.charge(self)
            sub = await self.subscription()
            await self.renewal(sub)
            await self.metered()
            await sessions.session(self)
            await self.webhook_summary()
            await self.analytics()
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

    async def one_time(self) -> None:
        step(f"1. One-time payment: GET /v1/data, {usdc(DATA_PRICE)} per request (X-PAYMENT)")
        unpaid = await self.api.get("/v1/data")
        expect(unpaid.status_code == 402, f"unpaid GET /v1/data answered {unpaid.status_code}")
        say("the 402 body (payment terms):")
        show_json(unpaid.json())
        before = self.balances()
        say("the client pays (PaymentAuth): it signs a TransferChecked + memo as token owner,")
        say("leaving the fee payer's signature to the facilitator, which co-signs, sends,")
        say("waits for confirmation and answers a signed proof; then the client retries:")
        paid = await self.api.get("/v1/data", auth=self.auth)
        expect(
            paid.status_code == 200,
            f"the paid GET /v1/data answered {paid.status_code}: {paid.text[:300]}",
        )
        header = paid.request.headers[X_PAYMENT]
        say(f"X-PAYMENT ({len(header)} base64 characters) decoded, the facilitator's proof:")
        show_json(json.loads(base64.b64decode(header)))
        say("the 200 body:")
        show_json(paid.json())
        self.show_balances(before, self.balances())
        say("the same proof again (a replay):")
        replay = await self.api.get("/v1/data", headers={X_PAYMENT: header})
        refusal = replay.json()
        say(f"  {replay.status_code} {refusal.get('error')}: {refusal.get('message')}")
        expect(
            replay.status_code == 402 and refusal.get("error") == "InvalidPaymentProof",
            f"the replayed proof was not refused: {replay.status_code} {replay.text[:200]}",
        )
        await self.webhooks(["payment.settled"])

    async def x402(self) -> None:
        step(f"1b. x402: an x402 client pays GET /v1/data ({usdc(DATA_PRICE)}, PAYMENT-SIGNATURE)")
        say("The same 402 also carries x402's terms, in the PAYMENT-REQUIRED header, for agents")
        say("built on the x402 SDKs (tests/interop runs the PyPI x402 SDK against this server):")
        unpaid = await self.api.get("/v1/data")
        required = x402.payment_required(unpaid)
        expect(
            unpaid.status_code == 402 and isinstance(required, PaymentRequired),
            f"the 402 carries no x402 v2 terms: {unpaid.status_code} {unpaid.headers}",
        )
        assert isinstance(required, PaymentRequired)
        say(f"{PAYMENT_REQUIRED} decoded (extension schemas left out):")
        shown = required.to_json_dict()
        shown["extensions"] = {name: "…" for name in shown.get("extensions", {})}
        show_json(shown)
        option = required.accepts[0]
        say("the x402 client signs [SetComputeUnitLimit, SetComputeUnitPrice, TransferChecked to")
        say("ATA(payTo), Memo(extra.memo)] as token owner, leaves the fee payer's signature to")
        say("the facilitator, and retries with the payment; it calls no facilitator itself:")
        before = self.balances()
        payload = await x402.ExactSvmClient(self.world.client, self.rpc).payload(option, required)
        name, value = x402.payment_header(payload)
        expect(name == PAYMENT_SIGNATURE, f"a v2 payment goes in {PAYMENT_SIGNATURE}, not {name}")
        paid = await self.api.get("/v1/data", headers={name: value})
        settled = x402.settlement(paid)
        expect(
            paid.status_code == 200 and settled is not None and settled.success,
            f"the x402 payment answered {paid.status_code}: {paid.text[:300]}",
        )
        assert settled is not None
        say("the gate checked the transaction itself, ran the handler, then had the facilitator")
        say(f"settle it with POST /settle (one call); {PAYMENT_RESPONSE} decoded:")
        show_json(settled.to_json_dict())
        say("the 200 body:")
        show_json(paid.json())
        self.show_balances(before, self.balances())
        say("the same payment again (a replay):")
        replay = await self.api.get("/v1/data", headers={name: value})
        say(f"  {replay.status_code} {replay.json().get('error')}: {replay.json().get('message')}")
        expect(
            replay.status_code == 402, f"the replayed x402 payment answered {replay.status_code}"
        )
        await self.webhooks(["payment.settled"])

    async def subscription(self) -> Pubkey:
        w = self.world
        price = self.plan_amount(SUBSCRIPTION_PRICE)
        step(f"2. Subscription: GET /v1/resource ({price} every 30 days)")
        unpaid = await self.api.get("/v1/resource")
        expect(unpaid.status_code == 402, f"unpaid GET /v1/resource: {unpaid.status_code}")
        option = unpaid.json()["accepts"][0]
        say("402 without X-Svc-Sub; the option it lists:")
        show_json(option)
        expect(option.get("svc", {}).get("planId") == str(w.plan), "the 402 names another plan")
        expect(option.get("token") == str(w.plans_in.mint), "the 402 names another token")
        if w.plans_in.token_2022:
            say(f"the plan's option names its own token, {w.plans_in.symbol}, and destination;")
            say("/v1/data's one-time options name USDC and payTo")
        self.chain.send_ok(
            [transfer(TransferParams(from_pubkey=self.chain.payer.pubkey(),
                                     to_pubkey=w.client.pubkey(), lamports=CLIENT_SOL))],
            [self.chain.payer],
        )  # fmt: skip
        say(f"the client gets {sol(CLIENT_SOL)}: subscribing is its own transaction (fee, rent)")
        before = self.balances()
        sub_id = await self.billing.subscribe(w.plan, w.client)
        say(f"BillingClient.subscribe(planId) on chain → subscription id {sub_id}")
        sub = await self.subscription_state(sub_id)
        self.show_subscription(sub)
        expect(status_name(sub) == "Active" and sub.cycles_billed == 1, "not subscribed")
        self.show_balances(before, self.balances())
        served = await self.api.get("/v1/resource", headers={X_SVC_SUB: str(sub_id)})
        expect(served.status_code == 200, f"GET /v1/resource with X-Svc-Sub: {served.text}")
        show_json(served.json())
        await self.webhooks(["subscription.created"])
        return sub_id

    async def renewal(self, sub_id: Pubkey) -> None:
        period = format_period(plan_times(self.chain.can_time_travel)[0])
        step(f"3. {period} later: the facilitator's crank renews the subscription")
        sub = await self.subscription_state(sub_id)
        before = self.balances()
        was = self.chain.unix_timestamp()
        self.chain.advance_to(sub.current_period_end)
        how = "surfnet_timeTravel" if self.chain.can_time_travel else "waited for the cluster"
        say(
            f"validator clock {when(was)} → {when(self.chain.unix_timestamp())} "
            f"({how}): the period has ended"
        )
        say("waiting for the crank (it runs every second in the facilitator process) …")

        async def renewed() -> bool:
            now = await self.subscription_state(sub_id)
            return now.cycles_billed > sub.cycles_billed

        took = await self.poll(renewed, 30, "the renewal")
        after = await self.subscription_state(sub_id)
        say(f"renewed on chain after {took:.1f} s:")
        self.show_subscription(sub, "  before")
        self.show_subscription(after, "  after ")
        charged = after.total_paid - sub.total_paid
        amount = self.plan_amount(charged)
        say(f"charged {amount} for the period ending {when(after.current_period_end)}")
        expect(charged == SUBSCRIPTION_PRICE, f"the renewal charged {amount}")
        self.show_balances(before, self.balances())
        served = await self.api.get("/v1/resource", headers={X_SVC_SUB: str(sub_id)})
        expect(served.status_code == 200, f"GET /v1/resource after renewal: {served.text}")
        await self.webhooks(["subscription.renewed"])

    async def metered(self) -> None:
        w = self.world
        per_call = self.plan_amount(PROCESS_PRICE)
        step(f"4. Metered: POST /v1/process, {per_call} per call from an allowance")
        sub_id = await self.billing.subscribe(w.metered_plan, w.client, max_overage=MAX_OVERAGE)
        say(
            f"the client subscribes to plan {w.metered_plan} with maxOverage "
            f"{self.plan_amount(MAX_OVERAGE)} → subscription {sub_id}"
        )
        await self.show_allowance(sub_id)
        before = self.balances()
        exhausted_at = 0.0
        for call in range(1, 11):
            reply = await self.api.post(
                "/v1/process",
                headers={X_SVC_SUB: str(sub_id)},
                json={"text": f"document number {call} to analyze"},
            )
            if reply.status_code == 402:
                body = reply.json()
                say(f"  call {call}: 402 {body.get('error')}: {body.get('message')}")
                expect(body.get("error") == "AllowanceExhausted", f"unexpected 402: {body}")
                exhausted_at = time.monotonic()
                break
            expect(reply.status_code == 200, f"POST /v1/process: {reply.status_code}")
            say(f"  call {call}: {json.dumps(reply.json())}")
        expect(exhausted_at > 0, "the allowance was never exhausted")
        cap = await self.billing.increase_allowance(sub_id, RAISE_BY, w.client)
        raised = self.plan_amount(RAISE_BY)
        say(f"the client raises its cap by {raised} on chain: {self.units(cap)}")
        await self.show_allowance(sub_id)
        # The gate reads the new cap once its cached view of the subscription lapses.
        await asyncio.sleep(max(0.0, exhausted_at + GATE_CACHE_SECS + 0.1 - time.monotonic()))
        for _ in range(10):
            reply = await self.api.post(
                "/v1/process",
                headers={X_SVC_SUB: str(sub_id)},
                json={"text": "one more document after raising the cap"},
            )
            if reply.status_code != 402:
                break
            await asyncio.sleep(0.5)
        expect(reply.status_code == 200, f"not served after raising the cap: {reply.text}")
        say(f"  served again: {json.dumps(reply.json())}")
        served = MAX_OVERAGE // PROCESS_PRICE + 1
        say("the resource server deducts usage in batches (every 5 s); waiting for the chain …")

        async def deducted() -> bool:
            allowance = await self.billing.fetch_allowance(sub_id)
            return allowance is not None and allowance.used >= served * PROCESS_PRICE

        took = await self.poll(deducted, 30, "the metered deduction")
        say(f"deducted after {took:.1f} s:")
        await self.show_allowance(sub_id)
        self.show_balances(before, self.balances())
        await self.webhooks(["allowance.deducted", "allowance.raised"])
        if w.plans_in.hooked:
            seen = test_hook.transfers(self.chain, w.plans_in.mint)
            say(f"the transfer hook ran in each of the {seen} PYUSD payments so far (its counter")
            say("   on chain): subscribe, the crank's renewal and the resource server's deduction")
            say("   each resolved the hook's extra accounts and passed them through svc_billing")

    async def show_allowance(self, sub_id: Pubkey) -> None:
        allowance = await self.billing.fetch_allowance(sub_id)
        expect(allowance is not None, f"subscription {sub_id} has no allowance")
        assert allowance is not None
        used, cap = self.plan_amount(allowance.used), self.plan_amount(allowance.cap)
        say(f"  allowance on chain: used {used} of cap {cap}")

    def units(self, receipt: Receipt) -> str:
        return f"{receipt.compute_units:,} compute units"

    async def webhook_summary(self) -> None:
        step("6. Webhooks received (every Svcpay-Signature verified, deduplicated by id)")
        r = self.receiver
        expected = ["payment.settled", "subscription.created", "subscription.renewed"]
        expect(r.wait_for(expected, 0), f"webhooks missing: {expected} vs {r.types()}")
        units: dict[str, int | None] = {}
        say(f"{'event':<22} {'id':<28} {'transaction':<14} {'compute units':>13}")
        for event in r.snapshot():
            sig = event["data"].get("transaction")
            cu: int | None = None
            if isinstance(sig, str):
                if sig not in units:
                    units[sig] = self.compute_units(sig)
                cu = units[sig]
            shown = f"{sig[:10]}…" if isinstance(sig, str) else "-"
            say(f"{event['type']:<22} {event['id']:<28} {shown:<14} {f'{cu:,}' if cu else '-':>13}")
        say(
            f"{r.deliveries} deliveries, {len(r.events)} distinct events, "
            f"{r.duplicates} duplicates ignored, {r.refused} refused signatures"
        )

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

    async def analytics(self) -> None:
        step("7. Analytics (the facilitator's provider API)")
        # The chain's clock is 30 days ahead of this machine's: cover both.
        start = min(self.began, self.chain.unix_timestamp())
        end = max(int(time.time()), self.chain.unix_timestamp()) + 1
        params = {"from": str(start - start % DAY), "to": str(end - end % DAY + DAY)}
        reply = await self.provider_api.get("/v1/analytics", params=params)
        expect(reply.status_code == 200, f"GET /v1/analytics: {reply.status_code} {reply.text}")
        data = reply.json()
        totals = data["totals"]
        mixed = self.world.plans_in.token_2022  # PYUSD plans, USDC one-time and session
        volume = int(totals["volume"])
        say(
            f"volume {format_amount(volume, symbol='') if mixed else usdc(volume)} in "
            f"{totals['payments']} payments, {data['from']} to {data['to']}"
            + (" (base units of both tokens, 6 decimals each):" if mixed else ":")
        )
        for mode, figures in totals["byMode"].items():
            money = usdc if mode in ("oneTime", "session") else self.plan_amount
            say(f"  {mode:<13} {money(int(figures['volume'])):>12}  ({figures['payments']})")
        subs = data["subscriptions"]
        say(
            f"subscriptions: {subs['active']} active, {subs['new']} new, "
            f"{subs['churned']} churned; recurring revenue "
            f"{self.plan_amount(int(data['recurringRevenue']['monthly']))} per 30 days"
        )
        chart = await self.provider_api.get("/v1/analytics/chart.png", params=params)
        expect(
            chart.status_code == 200 and chart.content.startswith(b"\x89PNG\r\n\x1a\n"),
            f"GET /v1/analytics/chart.png: {chart.status_code}",
        )
        self.out_dir.mkdir(parents=True, exist_ok=True)
        path = self.out_dir / "analytics.png"
        path.write_bytes(chart.content)
        say(f"chart: {path} ({len(chart.content):,} bytes, PNG)")


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
        asyncio.run(walk.run())
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


def _interrupt(signum: int, frame: object) -> None:
    INTERRUPTED.set()
    raise KeyboardInterrupt


@contextmanager
def signals_for_cleanup() -> Iterator[None]:
    """While the demo runs, Ctrl-C and SIGTERM interrupt it (so its `finally` stops the
    children); while it cleans up, further Ctrl-Cs are ignored.

    The handler is our own, not Python's default one, so `asyncio.run` keeps its hands off
    it: asyncio turns a Ctrl-C into a cancellation of the main task, which a coroutine can
    swallow (Python 3.11's `wait_for` does when its inner task finishes at the same moment),
    and the demo then ran to the end and exited 0. Here the KeyboardInterrupt is raised where
    the program is, and `INTERRUPTED` stops it at the next step if even that is swallowed."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    INTERRUPTED.clear()
    previous = signal.signal(signal.SIGINT, _interrupt), signal.signal(signal.SIGTERM, _interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous[0])
        signal.signal(signal.SIGTERM, previous[1])


@contextmanager
def uninterrupted() -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM))
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous[0])
        signal.signal(signal.SIGTERM, previous[1])


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
    with signals_for_cleanup():
        try:
            demo.run(stack)
            code = 130 if INTERRUPTED.is_set() else 0
            if code:
                print("\ndemo interrupted", file=sys.stderr)
        except DemoFailed as e:
            demo.failed(str(e), e.child)
        except (ProgramBinaryMissing, LocalnetError) as e:
            demo.failed(str(e), None)
        except KeyboardInterrupt:
            if getattr(demo, "serving", False):  # a Ctrl-C is how --serve ends
                code = 0
            else:
                print("\ndemo interrupted", file=sys.stderr)
                code = 130
        except Exception as e:
            demo.failed(f"{type(e).__name__}: {e}\n{traceback.format_exc()}", None)
        finally:
            with uninterrupted():
                stack.close()
    if code == 0:
        say("all stopped; temporary files removed")
    return code
