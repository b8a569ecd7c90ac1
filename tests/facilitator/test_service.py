"""The facilitator service end to end on the local validator, on SQLite and PostgreSQL:
settlement that survives duplicates and restarts, renewals as the clock passes a period,
metered usage reported by a provider, webhooks to a receiver that fails at first."""

from __future__ import annotations

import asyncio
import base64
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
from solders.keypair import Keypair
from solders.message import to_bytes_versioned
from solders.pubkey import Pubkey
from solders.transaction import VersionedTransaction

from svcpay.client import build_payment
from svcpay.facilitator.config import FacilitatorConfig
from svcpay.facilitator.service import Facilitator
from svcpay.facilitator.settlement import RateLimit
from svcpay.localnet.process import Localnet
from svcpay.program.client import BillingClient, Receipt, TransactionError, status_name
from svcpay.protocol.headers import NETWORK_MAINNET, SCHEME_EXACT
from svcpay.protocol.models import PaymentOption
from svcpay.webhooks import SIGNATURE_HEADER, verify_webhook
from tests.support.billing import DAY, USDC
from tests.support.chain import Chain
from tests.support.clock import Clock
from tests.support.facilitator import InProcessFacilitator, in_process_facilitator, index_all

pytestmark = pytest.mark.anyio
PRICE = USDC // 2


@dataclass
class Shop:
    fac: InProcessFacilitator
    provider: Keypair
    mint: Pubkey
    destination: Pubkey
    provider_id: str
    api_key: str
    database_url: str

    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"}

    async def plan(
        self, plan_id: int, *, period_secs: int = 30 * DAY, grace_secs: int = DAY,
        register: bool = True,
    ) -> Pubkey:  # fmt: skip
        """A plan at 1 USDC a period (30 days unless given) billed by the facilitator
        (registered to the provider unless `register` is False)."""
        service = self.fac.service
        plan = await service.billing.create_plan(
            self.provider, plan_id=plan_id, mint=self.mint, destination=self.destination,
            billing_authority=service.keypair.pubkey(), amount=USDC, period_secs=period_secs,
            grace_secs=grace_secs,
        )  # fmt: skip
        if register:
            await service.store.providers.add_resource(self.provider_id, "plan", str(plan))
        return plan

    async def metered_subscriber(self, chain: Chain, plan: Pubkey) -> tuple[Pubkey, Keypair]:
        """A subscription to `plan` with a 1 USDC allowance (its wallet holds 10 USDC), and
        the subscriber."""
        subscriber = chain.funded_keypair()
        chain.token_account(subscriber.pubkey(), self.mint, 10 * USDC)
        sub = await self.fac.service.billing.subscribe(plan, subscriber, max_overage=USDC)
        return sub, subscriber

    def another_instance(self, name: str = "second") -> Facilitator:
        """A second facilitator on the same database and key (close it: aclose())."""
        service = self.fac.service
        return Facilitator(
            FacilitatorConfig(
                keypair=service.keypair,
                rpc_url=service.config.rpc_url,
                database_url=self.database_url,
                instance=name,
            )
        )


@pytest.fixture
async def shop(validator: Localnet, chain: Chain, database_url: str) -> AsyncIterator[Shop]:
    provider, fee_payer = chain.funded_keypair(), chain.funded_keypair()
    mint = chain.create_mint()
    destination = chain.token_account(provider.pubkey(), mint)
    async with in_process_facilitator(validator.url, fee_payer, database_url=database_url) as fac:
        store = fac.service.store
        provider_id = await store.providers.create("acme")
        _, key = await store.api_keys.create(provider_id)
        await store.providers.add_resource(provider_id, "payTo", str(destination))
        yield Shop(fac, provider, mint, destination, provider_id, key, database_url)


def option(shop: Shop, memo: str) -> PaymentOption:
    return PaymentOption(
        scheme=SCHEME_EXACT,
        network=NETWORK_MAINNET,
        token=str(shop.mint),
        amount=str(PRICE),
        pay_to=str(shop.destination),
        memo=memo,
    )


async def payment(shop: Shop, chain: Chain, memo: str) -> tuple[dict[str, object], Keypair]:
    wallet = chain.funded_keypair()
    chain.token_account(wallet.pubkey(), shop.mint, 2 * USDC)
    opt = option(shop, memo)
    tx = await build_payment(shop.fac.rpc, wallet, opt, shop.fac.fee_payer.pubkey())
    body: dict[str, object] = {
        "signedPayment": base64.b64encode(tx).decode(),
        "paymentRequirements": opt.to_json_dict(),
    }
    return body, wallet


async def test_concurrent_duplicates_settle_once_with_one_proof(shop: Shop, chain: Chain) -> None:
    body, _ = await payment(shop, chain, "memo-dup")
    replies = await asyncio.gather(*(shop.fac.http.post("/authorize", json=body) for _ in range(5)))
    assert [r.status_code for r in replies] == [200] * 5
    assert len({r.text for r in replies}) == 1
    assert chain.token_state(shop.destination)["amount"] == PRICE
    settled = [
        e
        for e in await shop.fac.service.store.events.read(shop.provider_id)
        if e.type == "payment.settled"
    ]
    assert len(settled) == 1 and settled[0].data["amount"] == str(PRICE)


async def test_a_restart_between_sending_and_answering_loses_nothing(
    shop: Shop, chain: Chain, database_url: str
) -> None:
    body, _ = await payment(shop, chain, "memo-crash")
    service = shop.fac.service
    # What the facilitator does before it crashes: store, co-sign, send; no proof recorded.
    tx = VersionedTransaction.from_bytes(base64.b64decode(str(body["signedPayment"])))
    sigs = list(tx.signatures)
    sigs[0] = service.keypair.sign_message(to_bytes_versioned(tx.message))
    signed = VersionedTransaction.populate(tx.message, sigs)
    row = {
        "signature": str(sigs[0]),
        "network": NETWORK_MAINNET,
        "payer": "11111111111111111111111111111111",
        "pay_to": str(shop.destination),
        "token": str(shop.mint),
        "amount": PRICE,
        "memo": "memo-crash",
        "transaction": base64.b64encode(bytes(signed)).decode(),
        "status": "sending",
        "issued_at": 0,
        "created_at": 0,
    }
    await service.store.settlements.begin(row)
    await BillingClient(service.rpc).send_signed(signed)

    # A new instance on the same database: recovery records the payment (and its event),
    # and the client's retry of the same request gets the proof without a second transfer.
    restarted = shop.another_instance("restarted")
    try:
        await restarted.recover()
        option_ = PaymentOption.model_validate(body["paymentRequirements"])
        proof = await restarted.settler.authorize(
            base64.b64decode(str(body["signedPayment"])), option_
        )
        assert proof.transaction == str(sigs[0]) and proof.signature_valid()
        again = await shop.fac.http.post("/authorize", json=body)
        assert again.status_code == 200 and again.json()["transaction"] == str(sigs[0])
        assert chain.token_state(shop.destination)["amount"] == PRICE
        types = [e.type for e in await restarted.store.events.read(shop.provider_id)]
        assert types.count("payment.settled") == 1
    finally:
        await restarted.aclose()


async def test_renewals_over_a_period_with_a_failure_and_recovery(
    shop: Shop, chain: Chain, clock: Clock
) -> None:
    service, billing = shop.fac.service, shop.fac.service.billing
    # On the real validator the period must outlast the runs below (the rich subscription
    # is not due again), and grace the few transactions before the recovery.
    period = clock.days(8)
    plan = await shop.plan(7, period_secs=period, grace_secs=clock.days(6))
    rich, poor = chain.funded_keypair(), chain.funded_keypair()
    chain.token_account(rich.pubkey(), shop.mint, 3 * USDC)
    poor_token = chain.token_account(poor.pubkey(), shop.mint, USDC)
    subs = [await billing.subscribe(plan, kp) for kp in (rich, poor)]

    clock.advance(period)
    summary = await service.crank_once()
    assert (summary.renewed, summary.renewal_failed) == (1, 1)
    assert status_name(await billing.fetch_subscription(subs[1])) == "PastDue"  # type: ignore[arg-type]
    lease = await service.store.crank.lease(str(subs[1]))
    assert lease and lease["attempts"] == 1 and "InsufficientFunds" in lease["last_error"]
    assert (await service.crank_once()).transactions == 0  # it waits for its retry time

    chain.mint_to(shop.mint, poor_token, USDC)  # the subscriber tops up
    clock.advance(clock.days(1))
    await service.store.crank.release(str(subs[1]))  # as if its retry time had come
    summary = await service.crank_once()
    assert summary.renewed == 1
    assert status_name(await billing.fetch_subscription(subs[1])) == "Active"  # type: ignore[arg-type]
    types = [e.type for e in await service.store.events.read(shop.provider_id)]
    assert types.count("subscription.renewed") == 2
    assert types.count("subscription.renewal_failed") == 1


async def test_metered_usage_is_deducted_once_per_key_up_to_the_cap(
    shop: Shop, chain: Chain
) -> None:
    service, billing, http = shop.fac.service, shop.fac.service.billing, shop.fac.http
    plan = await shop.plan(8, register=False)
    sub, subscriber = await shop.metered_subscriber(chain, plan)
    report = {"subscription": str(sub), "amount": str(USDC // 2), "idempotencyKey": "u-1"}

    assert (await http.post("/v1/usage", json=report)).status_code == 401
    forbidden = await http.post("/v1/usage", json=report, headers=shop.auth())
    assert forbidden.status_code == 403  # the plan is not registered to this provider
    await service.store.providers.add_resource(shop.provider_id, "plan", str(plan))

    first = await http.post("/v1/usage", json=report, headers=shop.auth())
    again = await http.post("/v1/usage", json=report, headers=shop.auth())
    assert first.status_code == again.status_code == 200
    assert first.json()["transaction"] == again.json()["transaction"]
    assert first.json()["remaining"] == str(USDC // 2)
    clash = await http.post("/v1/usage", json={**report, "amount": "1"}, headers=shop.auth())
    assert clash.status_code == 409 and clash.json()["error"] == "IdempotencyKeyReused"

    second = await http.post(
        "/v1/usage", json={**report, "idempotencyKey": "u-2"}, headers=shop.auth()
    )
    assert second.json()["remaining"] == "0"
    over = await http.post(
        "/v1/usage", json={**report, "idempotencyKey": "u-3"}, headers=shop.auth()
    )
    assert (over.status_code, over.json()["error"]) == (402, "AllowanceExhausted")

    await billing.set_allowance(sub, 2 * USDC, subscriber)
    raised = await http.post(
        "/v1/usage", json={**report, "idempotencyKey": "u-4"}, headers=shop.auth()
    )
    assert raised.status_code == 200
    await index_all(service)  # the subscriber's own cap change reaches the event log
    types = [e.type for e in await service.store.events.read(shop.provider_id)]
    assert types.count("allowance.deducted") == 3
    assert "allowance.exhausted" in types and "allowance.raised" in types


class Receiver:
    """A real HTTP webhook receiver that answers 500 to the first `failures` deliveries."""

    def __init__(self, secret: str = "", failures: int = 2) -> None:
        self.secret, self.failures = secret, failures
        self.received: list[dict[str, object]] = []
        self.attempts = 0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.attempts += 1
                if receiver.attempts <= receiver.failures:
                    self.send_response(500)
                else:
                    event = verify_webhook(receiver.secret, body, self.headers[SIGNATURE_HEADER])
                    if event["id"] not in {e["id"] for e in receiver.received}:
                        receiver.received.append(event)
                    self.send_response(204)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hooks"

    def __enter__(self) -> Receiver:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver() as r:
        yield r


async def test_webhooks_reach_a_receiver_that_fails_at_first(
    shop: Shop, chain: Chain, receiver: Receiver
) -> None:
    http, service = shop.fac.http, shop.fac.service
    created = await http.post(
        "/v1/webhooks",
        json={"url": receiver.url, "eventTypes": ["payment.settled"]},
        headers=shop.auth(),
    )
    assert created.status_code == 201
    receiver.secret = created.json()["secret"]
    body, _ = await payment(shop, chain, "memo-hook")
    assert (await http.post("/authorize", json=body)).status_code == 200

    service.deliverer.first_retry_secs = 1
    for _ in range(20):
        await service.deliverer.run_once()
        if receiver.received:
            break
        await asyncio.sleep(0.5)
    assert receiver.attempts == 3  # two failures, then delivered
    [event] = receiver.received
    assert event["type"] == "payment.settled"
    deliveries = await http.get(
        f"/v1/webhooks/{created.json()['id']}/deliveries", headers=shop.auth()
    )
    [row] = deliveries.json()["deliveries"]
    assert (row["status"], row["attempts"]) == ("delivered", 3)


async def test_two_instances_crank_together_without_double_work(
    shop: Shop, chain: Chain, clock: Clock, database_url: str
) -> None:
    service, billing = shop.fac.service, shop.fac.service.billing
    period = clock.days(6)
    plan = await shop.plan(9, period_secs=period)
    wallets = [chain.funded_keypair() for _ in range(12)]
    for kp in wallets:
        chain.token_account(kp.pubkey(), shop.mint, 2 * USDC)
    # Subscribed together: on the real validator their periods end within a second or so,
    # and none is due again before both runs are over.
    await asyncio.gather(*(billing.subscribe(plan, kp) for kp in wallets))
    other = shop.another_instance()
    try:
        clock.advance(period)
        one, two = await asyncio.gather(service.crank_once(), other.crank_once())
    finally:
        await other.aclose()
    assert one.renewed + two.renewed == 12  # each subscription renewed exactly once
    # whatever one instance saw due and did not renew, it left to the other's lease
    assert one.skipped + two.skipped == one.due + two.due - 12
    assert chain.token_state(shop.destination)["amount"] == 24 * USDC
    renewed = [
        e
        for e in await service.store.events.read(shop.provider_id)
        if e.type == "subscription.renewed"
    ]
    assert len(renewed) == 12


async def test_one_usage_report_sent_to_two_instances_deducts_once(
    shop: Shop, chain: Chain, database_url: str
) -> None:
    service, billing = shop.fac.service, shop.fac.service.billing
    plan = await shop.plan(10)
    sub, _ = await shop.metered_subscriber(chain, plan)
    other = shop.another_instance()
    try:
        results = await asyncio.gather(
            *(
                instance.usage.report(shop.provider_id, str(sub), USDC // 4, "same-key")
                for instance in (service, other, service, other)
            )
        )
    finally:
        await other.aclose()
    assert len({r["transaction"] for r in results}) == 1  # one transaction for the report
    allowance = await billing.fetch_allowance(sub)
    assert allowance is not None and allowance.used == USDC // 4  # deducted once


async def test_a_deduction_confirmed_late_names_its_transaction(
    shop: Shop, chain: Chain, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The deduction lands but its confirmation is not seen in time (a loaded node): the
    report is still answered as deducted, naming the transaction that landed."""
    service, billing = shop.fac.service, shop.fac.service.billing
    plan = await shop.plan(12)
    sub, _ = await shop.metered_subscriber(chain, plan)
    send_signed = billing.send_signed

    async def landed_unconfirmed(tx: VersionedTransaction) -> Receipt:
        await send_signed(tx)  # it lands ...
        raise TransactionError("not confirmed in time")  # ... but the wait gives up

    monkeypatch.setattr(billing, "send_signed", landed_unconfirmed)
    result = await service.usage.report(shop.provider_id, str(sub), 1000, "late-confirmation")
    assert result["status"] == "deducted"
    allowance = await billing.fetch_allowance(sub)
    assert allowance is not None and allowance.used == 1000
    stored = await service.store.usage.get(result["id"])
    assert stored is not None and result["transaction"] == stored["signature"] is not None


async def test_a_usage_report_left_pending_is_completed_by_recovery(
    shop: Shop, chain: Chain
) -> None:
    """A report stored, then the facilitator died before signing it: the periodic recovery
    deducts it without the provider asking again (usage is never lost)."""
    service, billing = shop.fac.service, shop.fac.service.billing
    plan = await shop.plan(11)
    sub, _ = await shop.metered_subscriber(chain, plan)
    row, created = await service.store.usage.begin(shop.provider_id, "crashed", str(sub), 1000)
    assert created  # ... and here the process died

    assert await service.usage.recover(older_than_secs=0) == 1
    stored = await service.store.usage.get(row["id"])
    assert stored is not None and stored["status"] == "deducted" and stored["signature"]
    allowance = await billing.fetch_allowance(sub)
    assert allowance is not None and allowance.used == 1000
    assert await service.usage.recover(older_than_secs=0) == 0  # nothing left to do


async def test_a_payer_beyond_its_rate_gets_429_and_pays_nothing(shop: Shop, chain: Chain) -> None:
    shop.fac.service.settler.rate_limit = RateLimit(rate=0.001, burst=1)
    first, wallet = await payment(shop, chain, "memo-rate-1")
    assert (await shop.fac.http.post("/authorize", json=first)).status_code == 200
    opt = option(shop, "memo-rate-2")
    tx = await build_payment(shop.fac.rpc, wallet, opt, shop.fac.fee_payer.pubkey())
    second = {
        "signedPayment": base64.b64encode(tx).decode(),
        "paymentRequirements": opt.to_json_dict(),
    }
    refused = await shop.fac.http.post("/authorize", json=second)
    assert (refused.status_code, refused.json()["error"]) == (429, "RateLimited")
    assert chain.token_state(shop.destination)["amount"] == PRICE  # only the first was paid


async def test_usage_errors_say_whether_to_retry(shop: Shop, chain: Chain) -> None:
    """Permanent errors are 4xx with a reason (a retry cannot help); 503 with Retry-After
    only for a transient one (the RPC down), so providers' clients know when to stop."""
    import dataclasses

    import httpx

    from svcpay.facilitator.app import create_app
    from tests.cli.conftest import free_port

    http = shop.fac.http
    plan = await shop.plan(9)
    plain = chain.funded_keypair()  # subscribed without an allowance: nothing to deduct
    chain.token_account(plain.pubkey(), shop.mint, 10 * USDC)
    no_allowance = await shop.fac.service.billing.subscribe(plan, plain)
    metered, _ = await shop.metered_subscriber(chain, plan)

    def report(sub: object, key: str) -> dict[str, str]:
        return {"subscription": str(sub), "amount": "1000", "idempotencyKey": key}

    for sub, key in ((Keypair().pubkey(), "unknown"), (no_allowance, "no-allowance")):
        for _ in range(2):  # the same answer when retried
            reply = await http.post("/v1/usage", json=report(sub, key), headers=shop.auth())
            assert 400 <= reply.status_code < 500, (key, reply.status_code, reply.text)
            assert reply.json()["error"] and reply.json()["message"], reply.text
            assert "retry-after" not in reply.headers

    config = shop.fac.service.config
    down = Facilitator(
        dataclasses.replace(config, rpc_url=f"http://127.0.0.1:{free_port()}", instance="down")
    )
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=create_app(down, background=False)),
        base_url="http://facilitator",
    ) as broken:
        reply = await broken.post("/v1/usage", json=report(metered, "rpc"), headers=shop.auth())
    await down.aclose()
    assert reply.status_code == 503, reply.text
    assert int(reply.headers["retry-after"]) > 0 and reply.json()["error"] == "RpcUnavailable"
