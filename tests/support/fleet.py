"""Several running facilitators, for fault tests (issue 28): `svcpay facilitator serve`
processes sharing one database and one keypair, on the session's validator, with a provider,
its plan and payTo registered and a webhook receiver that counts deliveries by event id.

The database is a PostgreSQL server of the test's own, durable (synchronous_commit=on), so a
kill of it loses no commit it acknowledged, or one SQLite file."""

from __future__ import annotations

import asyncio
import base64
import json
import sys
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from solana.rpc.commitment import Confirmed
from solders.keypair import Keypair
from solders.pubkey import Pubkey

from svcpay.client import build_payment
from svcpay.demo.children import Child
from svcpay.facilitator.db import crank_leases
from svcpay.facilitator.settlement import LAND_WAIT_SECS, SETTLE_WAIT_SECS
from svcpay.facilitator.store import Store
from svcpay.keys import save_keypair
from svcpay.localnet.process import Localnet
from svcpay.program.client import BillingClient
from svcpay.program.generated.accounts.subscription import Subscription
from svcpay.protocol.headers import NETWORK_MAINNET, SCHEME_EXACT
from svcpay.protocol.models import PaymentOption
from svcpay.schemes.svcpay_proof.client import SIGNINGS
from tests.support.billing import USDC
from tests.support.chain import Chain
from tests.support.processes import Processes

PRICE = USDC // 10
SignAgain = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]


class Receiver:
    """A webhook receiver on loopback: refuses the first try of every third event (a 500),
    acknowledges the rest, and counts each event id's acknowledged deliveries."""

    def __init__(self) -> None:
        self.tries: Counter[str] = Counter()
        self.acknowledged: Counter[str] = Counter()
        self.types: dict[str, str] = {}
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with receiver.lock:
                    event = body["id"]
                    receiver.tries[event] += 1
                    receiver.types[event] = body["type"]
                    refuse = receiver.tries[event] == 1 and len(receiver.tries) % 3 == 0
                    if not refuse:
                        receiver.acknowledged[event] += 1
                self.send_response(500 if refuse else 200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        # A listen queue deeper than socketserver's 5: the fleet's facilitators deliver at once.
        server = type("Server", (ThreadingHTTPServer,), {"request_queue_size": 128})
        self.server = server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()


@dataclass
class Fleet:
    """Facilitator processes on one database and keypair, and the provider they serve."""

    chain: Chain
    rpc: str  # what the facilitators reach the validator by (the validator, or a switch)
    validator_url: str
    database_url: str
    fee_payer: Keypair
    keypair_file: Path
    provider: Keypair
    mint: Pubkey
    destination: Pubkey
    provider_id: str
    api_key: str
    receiver: Receiver
    processes: Processes
    urls: list[str] = field(default_factory=list)
    children: list[Child] = field(default_factory=list)
    started: int = 0  # instance names are f1, f2, ... in start order, never reused
    # Who signed each payment body `payments` and `sign_again` made, and for what. Each
    # wallet holds PRICE: a payment signed again after a wrong BlockhashExpired, whose first
    # transaction then landed, is refused InsufficientFunds, never paid twice.
    signers: dict[str, tuple[Keypair, PaymentOption]] = field(default_factory=dict)
    signed_again: int = 0

    async def start(self, n: int, **env: str) -> None:
        """Starts `n` more instances, one after another. Waiting for each one's ready line
        happens in a thread: the test's event loop runs the switches the instances reach
        the RPC node through, and a blocked loop would stall the instances already up
        (their requests time out, and read as an RPC outage)."""
        for _ in range(n):
            self.started += 1
            name = f"f{self.started}"
            argv = [
                sys.executable, "-m", "svcpay.cli", "facilitator", "serve", "--port", "0",
                "--url", self.rpc, "-k", str(self.keypair_file), "--database",
                self.database_url, "--log-level", "info",
            ]  # fmt: skip
            config = {
                "SVCPAY_INSTANCE": name,
                "SVCPAY_NETWORK": NETWORK_MAINNET,
                "SVCPAY_WEBHOOK_ALLOW_LOCAL": "1",
                "SVCPAY_WEBHOOK_INTERVAL_SECS": "0.2",
                "SVCPAY_WEBHOOK_RETRY_SECS": "1",
                # The drop-in's clock jumps: look every second (real time needs no such
                # setting: a pass is asked for when the first period ends).
                "SVCPAY_CRANK_INTERVAL_SECS": "1",
                "SVCPAY_INDEXER_INTERVAL_SECS": "1",
                "SVCPAY_SETTLE_RATE": "1000",
                "SVCPAY_SETTLE_BURST": "1000",
                **env,
            }
            self.urls.append(
                await asyncio.to_thread(
                    self.processes.start,
                    f"facilitator {name}", argv, "svcpay facilitator ready", config,
                )
            )  # fmt: skip
            self.children.append(self.processes.children[-1])

    def log(self, i: int) -> str:
        return self.children[i].stderr_path.read_text(errors="replace")

    async def plan(
        self, plan_id: int, period: int, subscribers: int, periods: int = 3
    ) -> tuple[Pubkey, list[Pubkey]]:
        """A plan billed by the facilitators' key, registered, with `subscribers` who can pay
        `periods` periods."""
        billing = BillingClient.connect(self.validator_url)
        try:
            plan = await billing.create_plan(
                self.provider, plan_id=plan_id, mint=self.mint, destination=self.destination,
                billing_authority=self.fee_payer.pubkey(), amount=PRICE, period_secs=period,
                grace_secs=period,
            )  # fmt: skip
            store = Store.open(self.database_url, migrate=False)
            try:
                await store.providers.add_resource(self.provider_id, "plan", str(plan))
            finally:
                await store.close()
            wallets = [self.chain.funded_keypair() for _ in range(subscribers)]
            for kp in wallets:
                self.chain.token_account(kp.pubkey(), self.mint, periods * PRICE)
            subs = await asyncio.gather(*(billing.subscribe(plan, kp) for kp in wallets))
        finally:
            await billing.close()
        return plan, list(subs)

    async def cycles(self, subs: list[Pubkey]) -> list[int]:
        """Each subscription's cycles billed (-1: none), read in one getMultipleAccounts: the
        tests poll this every 0.2 s, and a request per subscription (24 connections a poll)
        starved the test's own event loop at load 40 until a connect timed out (cold run 11)."""
        billing = BillingClient.connect(self.validator_url)
        try:
            found = await Subscription.fetch_multiple(
                billing.rpc, subs, commitment=Confirmed, program_id=billing.program_id
            )
        finally:
            await billing.close()
        return [s.cycles_billed if s else -1 for s in found]

    async def payments(self, n: int) -> list[dict[str, Any]]:
        """`n` signed svcpay payments of PRICE to the registered payTo, each from its own
        wallet, as POST /authorize bodies. The wallets are funded first and the payments
        signed together after, so every blockhash is as young as the last one: a busy
        machine takes about a second a wallet, and a payment signed a minute before it is
        sent has outlived its blockhash (150 blocks at 400 ms)."""
        # The chain's payer pays each new token account's rent: a long soak spends it all.
        if self.chain.balance(self.chain.payer.pubkey()) < (n + 10) * 3_000_000:
            self.chain.fund(self.chain.payer, 1_000 * 10**9)
        wallets = []
        for _ in range(n):
            wallet = self.chain.funded_keypair()
            self.chain.token_account(wallet.pubkey(), self.mint, PRICE)
            wallets.append(wallet)
        options = [
            PaymentOption(
                scheme=SCHEME_EXACT,
                network=NETWORK_MAINNET,
                token=str(self.mint),
                amount=str(PRICE),
                pay_to=str(self.destination),
                memo=f"fault-{i}",
            )
            for i in range(n)
        ]
        return await self._sign(list(zip(wallets, options, strict=True)))

    async def sign_again(self, body: dict[str, Any]) -> dict[str, Any]:
        """`body`'s payment signed again with a fresh blockhash, as the paying client does
        when the facilitator answers BlockhashExpired (svcpay_proof/client.py)."""
        self.signed_again += 1
        return (await self._sign([self.signers[body["signedPayment"]]]))[0]

    async def _sign(self, payments: list[tuple[Keypair, PaymentOption]]) -> list[dict[str, Any]]:
        billing = BillingClient.connect(self.validator_url)
        try:
            return list(await asyncio.gather(*(self._body(billing, w, o) for w, o in payments)))
        finally:
            await billing.close()

    async def _body(
        self, billing: BillingClient, wallet: Keypair, option: PaymentOption
    ) -> dict[str, Any]:
        tx = await build_payment(billing.rpc, wallet, option, self.fee_payer.pubkey())
        body = {
            "signedPayment": base64.b64encode(tx).decode(),
            "paymentRequirements": option.to_json_dict(),
        }
        self.signers[body["signedPayment"]] = (wallet, option)
        return body

    def received(self) -> int:
        return int(self.chain.token_state(self.destination)["amount"])

    def lease_holders(self) -> set[str]:
        """Instances holding a live crank lease now."""
        engine = sa.create_engine(sync_url(self.database_url))
        try:
            with engine.connect() as conn:
                rows = conn.execute(
                    sa.select(crank_leases.c.owner).where(crank_leases.c.lease_until > time.time())
                )
                return {r.owner for r in rows}
        finally:
            engine.dispose()


def answer_kinds(replies: list[httpx.Response]) -> Counter[str]:
    """'200', '503 json retry-after', or anything else as it is."""
    kinds: Counter[str] = Counter()
    for r in replies:
        if r.status_code == 503 and r.headers.get("retry-after") and r.json().get("error"):
            kinds["503 json retry-after"] += 1
        else:
            kinds[str(r.status_code)] += 1
    return kinds


async def settle_all(
    urls: list[str], bodies: list[dict[str, Any]], *, concurrency: int = 8
) -> list[httpx.Response]:
    """Posts each body once to the instances in turn, `concurrency` at a time."""
    slots = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(timeout=60) as http:

        async def one(i: int, body: dict[str, Any]) -> httpx.Response:
            async with slots:
                return await http.post(f"{urls[i % len(urls)]}/authorize", json=body)

        return await asyncio.gather(*(one(i, b) for i, b in enumerate(bodies)))


async def until_paid(
    urls: list[str], body: dict[str, Any], sign_again: SignAgain | None = None
) -> tuple[httpx.Response, dict[str, Any]]:
    """Posts `body` until a final answer, as the paying client does: again after a 503 or a
    504 `SettlementPending` (sent, not yet confirmed: under load the first resend after an
    outage can find the transaction still in flight), and signed again (`sign_again`) after
    `BlockhashExpired` (it never landed and never will: a retry came after its blockhash's
    60 s here; svcpay_proof/client.py). A pending payment is decided within the
    facilitator's own bound (LAND_WAIT_SECS: landed, or its blockhash expired by block
    height), so that bound, not a guess, ends the wait for each signing; the caller asserts
    the final answer (200). Returns it and the body it answers."""
    deadline = time.monotonic() + LAND_WAIT_SECS + SETTLE_WAIT_SECS
    signings = 1
    async with httpx.AsyncClient(timeout=60) as http:
        i = 0
        while True:
            reply = await http.post(f"{urls[i % len(urls)]}/authorize", json=body)
            json_error = reply.status_code >= 400 and "json" in reply.headers.get(
                "content-type", ""
            )
            error = reply.json().get("error") if json_error else None
            pending = reply.status_code == 504 and error == "SettlementPending"
            if error == "BlockhashExpired" and sign_again is not None and signings < SIGNINGS:
                body, signings = await sign_again(body), signings + 1
                deadline = time.monotonic() + LAND_WAIT_SECS + SETTLE_WAIT_SECS
            elif not (reply.status_code == 503 or pending) or time.monotonic() > deadline:
                return reply, body
            i += 1
            await asyncio.sleep(0.5)


async def until_all_paid(
    urls: list[str],
    bodies: list[dict[str, Any]],
    *,
    sign_again: SignAgain | None = None,
    concurrency: int = 8,
) -> list[tuple[httpx.Response, dict[str, Any]]]:
    """`until_paid` for each body, `concurrency` at a time (as `settle_all`): each is joined
    by every instance it reaches, and all 49 at once (up to 3 flights each, rebroadcasting)
    flooded a drop-in node starved of CPU (load 13) until their blockhashes expired unlanded
    (cold run 8). The final answers and the bodies they answer, in order."""
    slots = asyncio.Semaphore(concurrency)

    async def one(body: dict[str, Any]) -> tuple[httpx.Response, dict[str, Any]]:
        async with slots:
            return await until_paid(urls, body, sign_again)

    return list(await asyncio.gather(*(one(b) for b in bodies)))


async def wait_for(condition: Any, timeout: float, step: float = 0.1) -> float:
    """Seconds until `condition()` (awaitable or not) holds; fails after `timeout`."""
    began = time.monotonic()
    while True:
        got = condition()
        if asyncio.iscoroutine(got):
            got = await got
        if got:
            return time.monotonic() - began
        if time.monotonic() - began > timeout:
            pytest.fail(f"not within {timeout:.0f} s")
        await asyncio.sleep(step)


async def make_fleet(
    validator: Localnet,
    chain: Chain,
    database_url: str,
    receiver: Receiver,
    processes: Processes,
    tmp: Path,
    rpc: str = "",
) -> Fleet:
    fee_payer, provider = chain.funded_keypair(100 * 10**9), chain.funded_keypair()
    mint = chain.create_mint()
    destination = chain.token_account(provider.pubkey(), mint)
    store = Store.open(database_url)
    try:
        provider_id = await store.providers.create("faults")
        _, key = await store.api_keys.create(provider_id)
        await store.providers.add_resource(provider_id, "payTo", str(destination))
        await store.webhooks.create_endpoint(provider_id, receiver.url, ["*"])
    finally:
        await store.close()
    return Fleet(
        chain=chain, rpc=rpc or validator.url, validator_url=validator.url,
        database_url=database_url, fee_payer=fee_payer,
        keypair_file=save_keypair(fee_payer, tmp / "facilitator.json"), provider=provider,
        mint=mint, destination=destination, provider_id=provider_id, api_key=key,
        receiver=receiver, processes=processes,
    )  # fmt: skip


def sync_url(url: str) -> str:
    return url.replace("postgresql://", "postgresql+psycopg://", 1)
