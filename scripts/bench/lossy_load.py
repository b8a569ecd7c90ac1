"""The load of the lossy-RPC benchmark (scripts/bench/lossy.py): one-time payers (svcpay
proofs, x402, MPP charge) through `PaymentAuth`, subscribers reading the subscription route,
and a watcher of the renewals on chain; then each wallet's balance, read from the validator
itself, says what was really paid."""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx
from solders.keypair import Keypair
from solders.pubkey import Pubkey

from svcpay.client import PaymentAuth
from svcpay.examples.resource_server import DATA_PRICE
from svcpay.program.client import BillingClient, status_name
from svcpay.rpc import connect
from tests.support.chain import Chain

KINDS = ("svcpay", "x402", "mpp")
# The payment whose client is running in this task (for Answers.hook's timeline).
_paying: contextvars.ContextVar[Payment | None] = contextvars.ContextVar("paying", default=None)


@dataclass
class Payment:
    """One one-time payment: its own wallet, funded with two prices so that a payment made
    twice shows on chain."""

    kind: str
    wallet: Keypair
    account: Pubkey
    funded: int
    status: int | None = None
    error: str = ""
    seconds: float = 0.0
    paid: int = 0  # base units the wallet lost, read from the chain at the end
    # Each HTTP answer its client got: (seconds since it began, service, path, status), to
    # say where the slowest payments spent their time.
    steps: list[tuple[float, str, str, int]] = field(default_factory=list)
    began: float = 0.0
    began_at: float = 0.0  # time.time() when it began
    # Its account's transactions, read at the end: (signature, blockTime).
    signatures: list[tuple[str, int | None]] = field(default_factory=list)

    @property
    def served(self) -> bool:
        return self.status == 200


@dataclass
class Answers:
    """Every HTTP answer the clients got, by (service, path, status)."""

    counts: Counter[tuple[str, str, int]] = field(default_factory=Counter)
    services: dict[str, str] = field(default_factory=dict)  # host:port -> its name

    async def hook(self, response: httpx.Response) -> None:
        url = response.request.url
        service = self.services.get(f"{url.host}:{url.port}", str(url.host))
        self.counts[(service, url.path, response.status_code)] += 1
        paying = _paying.get()
        if paying is not None:
            at = time.monotonic() - paying.began
            paying.steps.append((at, service, url.path, response.status_code))

    def fivexx(self, service: str, *, retry_later: bool) -> int:
        """5xx answers of `service`: the 503/504s that say 'retry' or every other one."""
        return sum(
            n
            for (s, _, status), n in self.counts.items()
            if s == service and status >= 500 and (status in (503, 504)) == retry_later
        )


class LogLines(logging.Handler):
    """Counts this process's log records (the clients' own), printing none."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        if record.name.startswith("svcpay"):  # not httpx's line a request
            self.count += 1


def wallets(chain: Chain, mint: Pubkey, counts: dict[str, int]) -> list[Payment]:
    out = []
    for kind in KINDS:
        for _ in range(counts[kind]):
            wallet = chain.funded_keypair(10**9)
            account = chain.token_account(wallet.pubkey(), mint, 2 * DATA_PRICE)
            out.append(Payment(kind, wallet, account, 2 * DATA_PRICE))
    return out


async def pay_all(
    payments: list[Payment], api: str, facilitator: str, rpc: str, answers: Answers, secs: float
) -> None:
    """Each payment started at its own moment, spread evenly over `secs` (interleaving the
    kinds), as a client that keeps retrying: PaymentAuth waits out the facilitator's 503s
    and pending answers with the same signed transfer."""
    # The wallets come grouped by kind: every 7th first, so the kinds interleave.
    order = [p for _, p in sorted(enumerate(payments), key=lambda ip: (ip[0] % 7, ip[0]))]
    step = secs / max(1, len(order))
    hooks = {"response": [answers.hook]}
    async with httpx.AsyncClient(base_url=facilitator, timeout=60, event_hooks=hooks) as fac:
        await asyncio.gather(
            *(_pay(p, i * step, api, fac, rpc, hooks) for i, p in enumerate(order))
        )


async def _pay(
    p: Payment, delay: float, api: str, fac: httpx.AsyncClient, rpc_url: str, hooks: Any
) -> None:
    await asyncio.sleep(delay)
    rpc = connect(rpc_url)
    auth = PaymentAuth(
        p.wallet, rpc=rpc, max_per_request=DATA_PRICE, facilitator=fac, protocols=(p.kind,),
        sessions=False,
    )  # fmt: skip
    began = p.began = time.monotonic()
    p.began_at = time.time()
    _paying.set(p)
    try:
        async with httpx.AsyncClient(timeout=150, event_hooks=hooks) as http:
            p.status = (await http.get(f"{api}/v1/data", auth=auth)).status_code
    except Exception as e:  # the client was told it failed: how, in one line
        p.error = f"{type(e).__name__}: {str(e)[:160]}"
    finally:
        p.seconds = time.monotonic() - began
        await rpc.close()


async def subscribers(
    subs: dict[Keypair, Pubkey], plan: Pubkey, api: str, rpc_url: str, answers: Answers,
    until: float, every: float = 5.0,
) -> None:  # fmt: skip
    """Each subscriber GETs the subscription route every `every` seconds until `until`."""

    async def one(wallet: Keypair, sub: Pubkey) -> None:
        rpc = connect(rpc_url)
        auth = PaymentAuth(
            wallet, rpc=rpc, max_per_request=0, subscriptions={str(plan): str(sub)},
            sessions=False,
        )  # fmt: skip
        hooks = {"response": [answers.hook]}
        try:
            async with httpx.AsyncClient(timeout=60, event_hooks=hooks) as http:
                while time.monotonic() < until:
                    try:
                        await http.get(f"{api}/v1/resource", auth=auth)
                    except Exception as e:
                        answers.counts[("gate", f"/v1/resource {type(e).__name__}", 0)] += 1
                    await asyncio.sleep(every)
        finally:
            await rpc.close()

    await asyncio.gather(*(one(w, s) for w, s in subs.items()))


@dataclass
class Renewals:
    """Renewals as the chain shows them, watched every second on the validator itself."""

    subs: list[Pubkey]
    period: int
    lateness: list[float] = field(default_factory=list)
    done: int = 0
    due: int = 0
    stopping: bool = False

    async def watch(self, validator: str) -> None:
        billing = BillingClient.connect(validator)
        seen: dict[Pubkey, tuple[int, int]] = {}  # cycles billed, period end
        try:
            while not self.stopping:
                now = await billing.chain_time()
                for key in self.subs:
                    sub = await billing.fetch_subscription(key)
                    if sub is None:
                        continue
                    before = seen.get(key)
                    if before is not None and sub.cycles_billed > before[0]:
                        self.lateness.append(max(0.0, float(now - before[1])))
                    seen[key] = (sub.cycles_billed, sub.current_period_end)
                await asyncio.sleep(1.0)
            await self._count(billing, await billing.chain_time())
        finally:
            await billing.close()

    async def _count(self, billing: BillingClient, now: int) -> None:
        """Done: renewals after the first charge; due: those plus the periods that ended and
        are not billed (each still late by now - its end)."""
        for key in self.subs:
            sub = await billing.fetch_subscription(key)
            if sub is None:
                continue
            self.done += sub.cycles_billed - 1
            self.due += sub.cycles_billed - 1
            end = sub.current_period_end
            if end <= now and status_name(sub) in ("Active", "PastDue"):
                behind = (now - end) // self.period + 1
                self.due += int(behind)
                self.lateness.append(float(now - end))


def settle_from_chain(chain: Chain, payments: list[Payment]) -> None:
    for p in payments:
        p.paid = p.funded - int(chain.token_state(p.account)["amount"])
        if p.paid:
            found = chain.rpc("getSignaturesForAddress", str(p.account))
            p.signatures = [(row["signature"], row.get("blockTime")) for row in found]
