"""Sessions through the facilitator (docs/adr/0025), on the local validator, on SQLite and
PostgreSQL: a gate takes vouchers, its reporter hands the served ones to the facilitator,
whose redeemer pays the provider on chain, several sessions per transaction, each voucher
once even with two instances and a crash mid-redeem; webhooks and analytics see it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from svcpay.facilitator import analytics
from svcpay.facilitator.config import FacilitatorConfig
from svcpay.facilitator.service import Facilitator
from svcpay.gate import Session, payment_gate
from svcpay.gate.chain import session_scheme
from svcpay.gate.pricing import Terms
from svcpay.localnet.process import Localnet
from svcpay.program import sessions as ix
from svcpay.program.session_client import Sessions
from svcpay.protocol import mpp
from svcpay.protocol.memo import Memos
from svcpay.protocol.replay import MemoryReplayStore
from svcpay.protocol.voucher import SignedVoucher
from svcpay.schemes.session.client import SessionOffer, Tab
from svcpay.schemes.session.ledger import SqliteVoucherLedger
from svcpay.schemes.session.reporter import VoucherReporter
from tests.support.billing import USDC
from tests.support.chain import Chain
from tests.support.facilitator import InProcessFacilitator, in_process_facilitator, index_all

pytestmark = pytest.mark.anyio
PRICE = 1_000


async def served(request: Request) -> JSONResponse:
    return JSONResponse({"ok": True})


@dataclass
class Shop:
    fac: InProcessFacilitator
    chain: Chain
    mint: Pubkey
    provider: Keypair
    recipient: Pubkey
    provider_id: str
    api_key: str
    database_url: str
    ledger: SqliteVoucherLedger

    def reporter(self) -> VoucherReporter:
        return VoucherReporter(self.ledger, "http://facilitator", self.api_key,
                               http=self.fac.http, interval=0.05)  # fmt: skip

    def gate(self, reporter: VoucherReporter | None) -> httpx.AsyncClient:
        terms = Terms(pay_to=str(self.recipient), token=str(self.mint))
        scheme = session_scheme(terms, self.fac.service.billing, b"x" * 32, self.ledger,
                                reporter=reporter)  # fmt: skip
        app = payment_gate(
            Starlette(routes=[Route("/v1/data", served)]),
            pricing={"/v1/data": [Session(PRICE)]},
            terms=terms,
            memos=Memos(b"gate-memo-secret-0123456789"),
            trusted_facilitators=set(),
            replay=MemoryReplayStore(),
            sessions=scheme,
        )
        return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api")

    async def open(self, deposit: int = 100 * PRICE) -> Tab:
        payer, key = self.chain.funded_keypair(), Keypair()
        self.chain.token_account(payer.pubkey(), self.mint, 10 * USDC)
        channel = await Sessions(self.fac.service.billing).open(
            payer, mint=self.mint, recipient=self.recipient, deposit=deposit, price=PRICE,
            expires_at=self.chain.unix_timestamp() + 3600, dispute_secs=120, signer=key.pubkey(),
        )  # fmt: skip
        return Tab(channel, key, deposit)

    def balance(self) -> int:
        return int(self.chain.token_state(self.recipient)["amount"])

    def another_instance(self, name: str) -> Facilitator:
        service = self.fac.service
        return Facilitator(
            FacilitatorConfig(
                keypair=service.keypair,
                rpc_url=service.config.rpc_url,
                database_url=self.database_url,
                instance=name,
                session_redeem_secs=0,
            )  # fmt: skip
        )


@pytest.fixture
async def shop(
    validator: Localnet, chain: Chain, database_url: str, tmp_path: Path
) -> AsyncIterator[Shop]:
    provider, fee_payer = chain.funded_keypair(), chain.funded_keypair()
    mint = chain.create_mint()
    recipient = chain.token_account(provider.pubkey(), mint)
    async with in_process_facilitator(validator.url, fee_payer, database_url=database_url) as fac:
        store = fac.service.store
        provider_id = await store.providers.create("acme")
        _, key = await store.api_keys.create(provider_id)
        await store.providers.add_resource(provider_id, "payTo", str(recipient))
        fac.service.sessions.redeem_secs = 0  # every reported voucher is due at once
        ledger = SqliteVoucherLedger(tmp_path / "gate.db")
        yield Shop(fac, chain, mint, provider, recipient, provider_id, key, database_url, ledger)


async def calls(http: httpx.AsyncClient, tab: Tab, n: int) -> None:
    r = await http.get("/v1/data")
    challenge = mpp.parse_challenges(r.headers.get_list("www-authenticate"))[0]
    offer = SessionOffer.parse(challenge)
    assert offer is not None
    for _ in range(n):
        r = await http.get(
            "/v1/data", headers={"authorization": tab.credential(offer, tab.sign(PRICE))}
        )
        assert r.status_code == 200, r.text
        tab.accepted(mpp.Receipt.parse(r.headers["payment-receipt"]))


async def test_served_vouchers_are_reported_and_redeemed_in_one_transaction(shop: Shop) -> None:
    tabs = [await shop.open() for _ in range(3)]
    reporter = shop.reporter()
    async with shop.gate(reporter) as http:
        for n, tab in enumerate(tabs, start=1):
            await calls(http, tab, 10 * n)
    await reporter.aclose()
    assert await shop.ledger.unreported() == []
    held = await shop.fac.service.store.sessions.of_provider(shop.provider_id)
    assert sorted(h.cumulative for h in held) == [10 * PRICE, 20 * PRICE, 30 * PRICE]
    summary = await shop.fac.service.redeem_once()
    assert (summary.redeemed, summary.transactions, summary.amount) == (3, 1, 60 * PRICE)
    assert shop.balance() == 60 * PRICE
    # Nothing left to do: a second pass sends nothing.
    again = await shop.fac.service.redeem_once()
    assert (again.pending, again.transactions) == (0, 0)
    # The redeems are lifecycle events of this provider, counted as session revenue.
    await index_all(shop.fac.service)
    events = await shop.fac.service.store.events.read(shop.provider_id, limit=500)
    kinds = [e.type for e in events]
    assert kinds.count("session.opened") == 3 and kinds.count("session.redeemed") == 3
    report = await analytics.report(shop.fac.service.store, provider_id=shop.provider_id,
                                    start=0, end=int(time.time()) + 86400 * 365)  # fmt: skip
    assert report["totals"]["byMode"]["session"] == {
        "volume": str(60 * PRICE),
        "fees": "0",
        "net": str(60 * PRICE),
        "payments": 3,
    }


async def test_reports_are_checked(shop: Shop) -> None:
    tab = await shop.open()
    http = shop.fac.http
    auth = {"authorization": f"Bearer {shop.api_key}"}

    async def report(*vouchers: SignedVoucher) -> list[dict[str, str]]:
        body = {"vouchers": [v.to_json_dict() for v in vouchers]}
        r = await http.post("/v1/sessions/vouchers", json=body, headers=auth)
        assert r.status_code == 200, r.text
        return r.json()["vouchers"]

    good = SignedVoucher.sign(tab.key, tab.channel, 5 * PRICE)
    forged = SignedVoucher.sign(Keypair(), tab.channel, 6 * PRICE)
    over = SignedVoucher.sign(tab.key, tab.channel, 101 * PRICE)
    nowhere = SignedVoucher.sign(tab.key, Keypair().pubkey(), PRICE)
    answers = await report(good, forged, over, nowhere)
    assert [a["status"] for a in answers] == ["kept", "refused", "refused", "refused"]
    assert "signer" in answers[1]["reason"] and "deposit" in answers[2]["reason"]
    assert "no svc_billing session" in answers[3]["reason"]
    assert [a["status"] for a in await report(good)] == ["stale"]  # not above what is kept
    # Another provider cannot report (nor redeem into) this provider's sessions.
    other = await shop.fac.service.store.providers.create("other")
    _, other_key = await shop.fac.service.store.api_keys.create(other)
    theirs = {"vouchers": [SignedVoucher.sign(tab.key, tab.channel, 7 * PRICE).to_json_dict()]}
    other_auth = {"authorization": f"Bearer {other_key}"}
    r = await http.post("/v1/sessions/vouchers", headers=other_auth, json=theirs)
    assert r.json()["vouchers"][0]["status"] == "refused"
    # Bad input is a 400 naming it; no key is a 401.
    for body in ({}, {"vouchers": []}, {"vouchers": [{"voucher": 1}]}, {"vouchers": "x"}):
        r = await http.post("/v1/sessions/vouchers", json=body, headers=auth)
        assert r.status_code == 400 and r.json()["message"], body
    assert (await http.post("/v1/sessions/vouchers", json={})).status_code == 401
    listed = (await http.get("/v1/sessions", headers=auth)).json()["sessions"]
    assert [(s["session"], s["cumulative"]) for s in listed] == [(str(tab.channel), str(5 * PRICE))]


async def test_two_instances_redeem_each_voucher_once(shop: Shop) -> None:
    tabs = [await shop.open() for _ in range(6)]
    for tab in tabs:
        voucher = SignedVoucher.sign(tab.key, tab.channel, 7 * PRICE)
        assert (await shop.fac.service.sessions.report(shop.provider_id, [voucher]))[0][
            "status"
        ] == "kept"
    second = shop.another_instance("second")
    try:
        a, b = await asyncio.gather(shop.fac.service.redeem_once(), second.redeem_once())
    finally:
        await second.aclose()
    assert a.redeemed + b.redeemed == 6 and a.failed + b.failed == 0
    assert shop.balance() == 6 * 7 * PRICE


async def test_a_redeem_that_landed_before_a_crash_is_recorded_not_resent(shop: Shop) -> None:
    """The first instance sent the redeem and died before recording it, its lease held."""
    tab = await shop.open()
    voucher = SignedVoucher.sign(tab.key, tab.channel, 9 * PRICE)
    store, billing = shop.fac.service.store, shop.fac.service.billing
    await shop.fac.service.sessions.report(shop.provider_id, [voucher])
    assert await store.sessions.claim("crashed", [str(tab.channel)], lease_secs=1) == [
        str(tab.channel)
    ]
    state = await Sessions(billing).fetch(tab.channel)
    assert state is not None
    await billing.send(ix.redeem_many([(state, tab.channel, voucher)]), [shop.fac.fee_payer])
    # The chain is the record: the next pass (the lease notwithstanding) finds it redeemed.
    summary = await shop.fac.service.redeem_once()
    assert (summary.already, summary.transactions) == (1, 0)
    assert shop.balance() == 9 * PRICE
    assert (await shop.fac.service.redeem_once()).pending == 0
