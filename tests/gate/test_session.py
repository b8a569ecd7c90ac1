"""The gate's session path (docs/adr/0025) against the local validator: a real session opened
on chain, vouchers in MPP's `Authorization: Payment`, checked offline, taken in the ledger
before the handler runs, redeemed on chain afterwards for exactly what was served."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from solana.rpc.async_api import AsyncClient
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from svcpay.client import PaymentAuth
from svcpay.gate import OneTime, Session, payment_gate
from svcpay.gate.chain import session_scheme
from svcpay.gate.pricing import Terms
from svcpay.localnet.process import Localnet
from svcpay.program.client import BillingClient
from svcpay.program.generated.accounts.session import Session as Session_
from svcpay.program.session_client import Sessions
from svcpay.protocol import mpp
from svcpay.protocol.memo import Memos
from svcpay.protocol.programs import TOKEN_2022_PROGRAM
from svcpay.protocol.replay import MemoryReplayStore
from svcpay.protocol.voucher import SignedVoucher
from svcpay.schemes.session.client import SessionOffer, Tab, Tabs
from svcpay.schemes.session.ledger import MemoryVoucherLedger, SqliteVoucherLedger, VoucherLedger
from svcpay.schemes.session.server import SessionPolicy
from tests.cli.conftest import serve
from tests.support.billing import USDC
from tests.support.chain import Chain
from tests.support.token2022 import t22_mint

pytestmark = pytest.mark.anyio
PRICE = 1_000  # 0.001 USDC a call
DEPOSIT = 1_000 * PRICE
SECRET = b"session-challenge-secret-0123456789"


async def handler(request: Request) -> JSONResponse:
    return JSONResponse({"served": request.url.path})


async def broken(request: Request) -> JSONResponse:
    return JSONResponse({"error": "upstream failed"}, status_code=500)


async def slow(request: Request) -> JSONResponse:
    await asyncio.sleep(0.2)
    return JSONResponse({"served": "slow"})


@dataclass
class World:
    chain: Chain
    client: BillingClient
    mint: Pubkey
    provider: Keypair
    recipient: Pubkey
    payer: Keypair
    ledger: VoucherLedger

    def gate(
        self, ledger: VoucherLedger | None = None, *, chain_clock: bool = False, **policy: int
    ) -> httpx.AsyncClient:
        """`chain_clock`: expiries against the validator's clock (which tests move)."""
        terms = Terms(pay_to=str(self.recipient), token=str(self.mint))
        clock = self.chain.unix_timestamp if chain_clock else time.time
        scheme = session_scheme(
            terms,
            self.client,
            SECRET,
            ledger or self.ledger,
            policy=SessionPolicy(**policy),
            ttl=0.5,
            clock=clock,
        )
        app = Starlette(
            routes=[
                Route("/v1/data", handler),
                Route("/v1/broken", broken),
                Route("/v1/slow", slow),
                Route("/v1/bulk", handler),
                Route("/v1/once", handler),
            ]
        )
        gate = payment_gate(
            app,
            pricing={
                "/v1/data": [Session(PRICE)],
                "/v1/broken": [Session(PRICE)],
                "/v1/slow": [Session(PRICE)],
                "/v1/bulk": [
                    Session(PRICE, unit="row", units=lambda r: int(r.headers.get(b"x-rows", b"1")))
                ],
                "/v1/once": [OneTime(PRICE)],
            },
            terms=terms,
            memos=Memos(b"gate-memo-secret-0123456789"),
            trusted_facilitators=set(),
            replay=MemoryReplayStore(),
            sessions=scheme,
        )
        transport = httpx.ASGITransport(app=gate, raise_app_exceptions=False)
        return httpx.AsyncClient(transport=transport, base_url="http://api")

    async def open(
        self,
        deposit: int = DEPOSIT,
        *,
        expires_in: int = 3600,
        dispute: int = 120,
        key: Keypair | None = None,
    ) -> Tab:
        key = key or Keypair()
        channel = await Sessions(self.client).open(
            self.payer,
            mint=self.mint,
            recipient=self.recipient,
            deposit=deposit,
            price=PRICE,
            expires_at=self.chain.unix_timestamp() + expires_in,
            dispute_secs=dispute,
            signer=key.pubkey(),
        )
        return Tab(channel, key, deposit)


@pytest.fixture
async def world(chain: Chain, client: BillingClient, tmp_path: Path) -> AsyncIterator[World]:
    provider, payer = chain.funded_keypair(), chain.funded_keypair()
    mint = chain.create_mint()
    recipient = chain.token_account(provider.pubkey(), mint)
    chain.token_account(payer.pubkey(), mint, 100 * USDC)
    yield World(
        chain,
        client,
        mint,
        provider,
        recipient,
        payer,
        SqliteVoucherLedger(tmp_path / "vouchers.db"),
    )


async def offer(http: httpx.AsyncClient, path: str = "/v1/data") -> SessionOffer:
    r = await http.get(path)
    assert r.status_code == 402
    challenges = mpp.parse_challenges(r.headers.get_list("www-authenticate"))
    assert len(challenges) == 1
    found = SessionOffer.parse(challenges[0])
    assert found is not None
    return found


async def pay(
    http: httpx.AsyncClient,
    tab: Tab,
    found: SessionOffer,
    path: str = "/v1/data",
    price: int = PRICE,
    rows: int | str | None = None,
) -> httpx.Response:
    headers = {"authorization": tab.credential(found, tab.sign(price))}
    if rows is not None:
        headers["x-rows"] = str(rows)
    r = await http.get(path, headers=headers)
    if r.status_code == 200:
        tab.accepted(mpp.Receipt.parse(r.headers["payment-receipt"]))
    return r


async def test_the_402_offers_a_session_challenge_bound_to_the_terms(world: World) -> None:
    async with world.gate() as http:
        found = await offer(http)
    request = found.challenge.request_json
    assert request["amount"] == str(PRICE) and request["currency"] == str(world.mint)
    assert request["suggestedDeposit"] == str(1000 * PRICE)
    assert found.recipient_token == world.recipient and found.program == world.client.program_id
    assert len(found.challenge.header()) < mpp.MAX_CHALLENGE_BYTES
    assert mpp.parse_rfc3339(found.challenge.expires) is not None
    # The id is the HMAC of the slots: changing any one of them is refused.
    issuer = mpp.ChallengeIssuer(SECRET, "svcpay")
    assert issuer.recognises(found.challenge)
    tampered = mpp.Challenge(
        found.challenge.id,
        "svcpay",
        "solana",
        "session",
        mpp.encode_json({**request, "amount": "1"}),
        found.challenge.expires,
    )
    assert not issuer.recognises(tampered)


async def test_vouchers_pay_per_call_and_redeem_once_for_what_was_served(world: World) -> None:
    tab = await world.open()
    async with world.gate() as http:
        found = await offer(http)
        for _ in range(25):
            r = await pay(http, tab, found)
            assert r.status_code == 200, r.text
        receipt = mpp.Receipt.parse(r.headers["payment-receipt"])
        assert (receipt.intent, receipt.reference) == ("session", str(tab.channel))
        assert receipt.extra["acceptedCumulative"] == str(25 * PRICE)
    served = await world.ledger.unreported()
    assert [(v.channel, v.cumulative) for v in served] == [(tab.channel, 25 * PRICE)]
    sessions = Sessions(world.client)
    await sessions.redeem(served, world.provider)
    assert int(world.chain.token_state(world.recipient)["amount"]) == 25 * PRICE


async def test_a_replay_and_a_stale_voucher_get_402_with_the_accepted_count(world: World) -> None:
    tab = await world.open()
    async with world.gate() as http:
        found = await offer(http)
        voucher = tab.sign(PRICE)
        header = tab.credential(found, voucher)
        assert (await http.get("/v1/data", headers={"authorization": header})).status_code == 200
        again = await http.get("/v1/data", headers={"authorization": header})
        assert again.status_code == 402
        problem = again.json()
        assert problem["type"] == mpp.PROBLEM_BASE + "payment-insufficient"
        assert problem["acceptedCumulative"] == str(PRICE)
        assert again.headers["content-type"] == "application/problem+json"
        assert mpp.parse_challenges(again.headers.get_list("www-authenticate"))  # fresh terms
        # A voucher adding less than the price is refused too; resyncing from the problem
        # lets the client go on.
        assert tab.resync(problem)
        short = tab.sign(PRICE - 1)
        r = await http.get("/v1/data", headers={"authorization": tab.credential(found, short)})
        assert r.status_code == 402
        assert (await pay(http, tab, found)).status_code == 200


async def test_concurrent_copies_of_one_voucher_are_served_once(
    world: World, tmp_path: Path
) -> None:
    """Two workers (two gates, one ledger file) get the same voucher at once."""
    tab = await world.open()
    shared = tmp_path / "shared.db"
    async with (
        world.gate(SqliteVoucherLedger(shared)) as a,
        world.gate(SqliteVoucherLedger(shared)) as b,
    ):
        found = await offer(a, "/v1/slow")
        header = tab.credential(found, tab.sign(PRICE))
        results = await asyncio.gather(
            *(g.get("/v1/slow", headers={"authorization": header}) for g in (a, b, a, b))
        )
    assert sorted(r.status_code for r in results) == [200, 402, 402, 402]


async def test_a_failed_handler_is_not_charged(world: World) -> None:
    tab = await world.open()
    async with world.gate() as http:
        found = await offer(http, "/v1/broken")
        voucher = tab.sign(PRICE)
        header = tab.credential(found, voucher)
        r = await http.get("/v1/broken", headers={"authorization": header})
        assert r.status_code == 500 and "payment-receipt" not in r.headers
        assert await world.ledger.highest(str(tab.channel)) == 0
        # The same voucher pays for the next call, which succeeds.
        data = await offer(http)
        r = await http.get("/v1/data", headers={"authorization": tab.credential(data, voucher)})
        assert r.status_code == 200
    assert await world.ledger.highest(str(tab.channel)) == PRICE


async def test_per_unit_pricing_and_the_deposit_ceiling(world: World) -> None:
    tab = await world.open(deposit=10 * PRICE)
    async with world.gate() as http:
        found = await offer(http, "/v1/bulk")
        # 4 rows cost 4 * PRICE: a voucher adding one price is refused.
        r = await pay(http, tab, found, "/v1/bulk", PRICE, rows=4)
        assert r.status_code == 402
        assert (await pay(http, tab, found, "/v1/bulk", 4 * PRICE, rows=4)).status_code == 200
        # Units the provider's function cannot count are a 400, not a 500.
        r = await pay(http, tab, found, "/v1/bulk", PRICE, rows="many")
        assert r.status_code == 400 and r.json()["error"] == "InvalidUnits"
        # Past the deposit: 402 payment-insufficient naming it.
        r = await pay(http, tab, found, "/v1/bulk", 7 * PRICE, rows=7)
        assert r.status_code == 402
        assert r.json()["type"].endswith("payment-insufficient") and r.json()["deposit"] == str(
            10 * PRICE
        )
        # A top-up is seen (the gate rereads a session a voucher overshoots, at most once a
        # second per session).
        await Sessions(world.client).top_up(tab.channel, world.payer, 10 * PRICE)
        tab.deposit += 10 * PRICE
        await asyncio.sleep(1.1)
        assert (await pay(http, tab, found, "/v1/bulk", 7 * PRICE, rows=7)).status_code == 200


async def test_forged_foreign_and_unfit_sessions_are_refused(world: World, chain: Chain) -> None:
    tab = await world.open()
    short = await world.open(dispute=10)
    async with world.gate() as http:
        found = await offer(http)
        forged = Tab(tab.channel, Keypair(), DEPOSIT)  # not the session's key
        r = await pay(http, forged, found)
        assert r.status_code == 402 and "signer" in r.json()["detail"]
        nowhere = Tab(Keypair().pubkey(), tab.key, DEPOSIT)
        r = await pay(http, nowhere, found)
        assert r.status_code == 402 and "no open session" in r.json()["detail"]
        r = await pay(http, short, found)
        assert r.status_code == 402 and "dispute window" in r.json()["detail"]
        # A challenge from another gate (another secret) is refused.
        other = mpp.ChallengeIssuer(b"another-gate-secret-0123456789", "svcpay")
        alien = other.issue(
            "solana", "session", found.challenge.request_json, expires=chain.unix_timestamp() + 60
        )
        alien_offer = SessionOffer.parse(alien)
        assert alien_offer is not None
        r = await pay(http, tab, alien_offer)
        assert r.status_code == 402 and r.json()["type"].endswith("invalid-challenge")
        # Garbage, and other actions, are answered with their problem, never a 500.
        for value, status in [
            ("Payment !!!", 402),
            ("Payment " + mpp.encode_json({"challenge": found.challenge.echo()}), 402),
            (mpp.Credential(found.challenge, {"action": "open"}).header(), 400),
            (mpp.Credential(found.challenge, {"action": "voucher", "voucher": 3}).header(), 402),
        ]:
            r = await http.get("/v1/data", headers={"authorization": value})
            assert r.status_code == status, (value, r.text)
            assert r.json()["type"].startswith(mpp.PROBLEM_BASE)
        # Other Authorization schemes are the app's business: a plain 402.
        r = await http.get("/v1/data", headers={"authorization": "Bearer abc"})
        assert r.status_code == 402 and "www-authenticate" in r.headers
        # A Payment credential on a route without sessions is a 400.
        r = await http.get(
            "/v1/once", headers={"authorization": tab.credential(found, tab.sign(1))}
        )
        assert r.status_code == 400


async def test_a_session_expiring_mid_stream_gets_402(world: World, chain: Chain) -> None:
    # Ten minutes where the clock can travel; on solana-test-validator, 8 s of waiting.
    ttl = 600 if chain.can_time_travel else 8
    opened = chain.unix_timestamp()
    tab = await world.open(expires_in=ttl)
    async with world.gate(chain_clock=True, challenge_secs=3600) as http:
        found = await offer(http)
        assert (await pay(http, tab, found)).status_code == 200
        chain.advance_to(opened + ttl + 2)
        r = await pay(http, tab, found)
        assert r.status_code == 402 and "expired" in r.json()["detail"]


async def test_a_voucher_expiring_before_it_can_be_redeemed_is_refused(
    world: World, chain: Chain
) -> None:
    tab = await world.open()
    async with world.gate(chain_clock=True) as http:
        found = await offer(http)
        soon = SignedVoucher.sign(tab.key, tab.channel, PRICE, chain.unix_timestamp() + 10)
        r = await http.get("/v1/data", headers={"authorization": tab.credential(found, soon)})
        assert r.status_code == 402 and r.json()["type"].endswith("payment-expired")


async def test_payment_auth_opens_a_session_and_pays_each_call_with_a_voucher(
    world: World, client: BillingClient, tmp_path: Path
) -> None:
    tabs = Tabs(tmp_path / "tabs.json")
    auth = PaymentAuth(world.payer, rpc=client.rpc, billing=client, max_per_request=DEPOSIT,
                       session_deposit=50 * PRICE, tabs=tabs)  # fmt: skip
    terms = Terms(pay_to=str(world.recipient), token=str(world.mint))
    gate = world.gate()
    gate.auth = auth
    async with gate as http:
        for _ in range(60):  # past the first deposit: one top-up
            r = await http.get("/v1/data")
            assert r.status_code == 200, r.text
    [(_, tab)] = tabs.items()
    state = await Sessions(client).fetch(tab.channel)
    assert state is not None and (state.deposit, tab.cumulative) == (100 * PRICE, 60 * PRICE)
    assert await world.ledger.highest(str(tab.channel)) == 60 * PRICE
    # The file keeps the tab (a later run goes on with it); closing asks to close on chain.
    assert Tabs(tmp_path / "tabs.json").get(tab_key_of(terms, client)) is not None
    await auth.aclose()
    state = await Sessions(client).fetch(tab.channel)
    assert state is not None and type(state.status).__name__ == "Closing"
    assert tabs.items() == []


async def test_payment_auth_in_a_fee_mint_keeps_what_the_vault_received(
    chain: Chain, client: BillingClient, tmp_path: Path
) -> None:
    """A transfer-fee mint (1%) withholds part of every deposit: the tab counts what the
    vault received, so the calls past it top up instead of failing (issue 38: the tab kept
    2,000 sent, the vault held 1,980, and the 20th call failed)."""
    mint = t22_mint(chain, transfer_fee=(100, USDC))
    provider, payer = chain.funded_keypair(), chain.funded_keypair()
    recipient = chain.token_account(provider.pubkey(), mint, program_id=TOKEN_2022_PROGRAM)
    chain.token_account(payer.pubkey(), mint, 100 * USDC, program_id=TOKEN_2022_PROGRAM)
    world = World(chain, client, mint, provider, recipient, payer, MemoryVoucherLedger())
    tabs = Tabs(tmp_path / "tabs.json")
    auth = PaymentAuth(payer, rpc=client.rpc, billing=client, max_per_request=DEPOSIT,
                       session_deposit=20 * PRICE, tabs=tabs)  # fmt: skip
    gate = world.gate()
    gate.auth = auth
    async with gate as http:
        for i in range(25):  # 19 calls fit in 19,800: the 20th tops up
            r = await http.get("/v1/data")
            assert r.status_code == 200, (i, r.text)
    [(_, tab)] = tabs.items()
    state = await Sessions(client).fetch(tab.channel)
    assert state is not None and tab.deposit == state.deposit == 2 * 19_800
    assert tab.cumulative == 25 * PRICE
    await auth.aclose()


async def test_payment_auth_pays_no_session_the_limits_refuse(
    world: World, client: BillingClient
) -> None:
    auth = PaymentAuth(world.payer, rpc=client.rpc, billing=client, max_per_request=PRICE - 1)
    gate = world.gate()
    gate.auth = auth
    async with gate as http:
        r = await http.get("/v1/data")
    assert r.status_code == 402 and auth.tabs.items() == []


def tab_key_of(terms: Terms, client: BillingClient) -> str:
    return f"{client.program_id}:{terms.pay_to}:{terms.token}"


def test_payment_auth_pays_sessions_from_a_sync_client(chain: Chain, validator: Localnet) -> None:
    """httpx.Client: the session flow runs on the auth's own event loop, with its own RPC
    and billing clients, against the gate served over HTTP."""
    provider, payer = chain.funded_keypair(), chain.funded_keypair()
    mint = chain.create_mint()
    recipient = chain.token_account(provider.pubkey(), mint)
    chain.token_account(payer.pubkey(), mint, USDC)
    terms = Terms(pay_to=str(recipient), token=str(mint))

    @asynccontextmanager
    async def app() -> AsyncIterator[Any]:
        billing = BillingClient.connect(validator.url)
        ledger = MemoryVoucherLedger()
        yield payment_gate(
            Starlette(routes=[Route("/v1/data", handler)]),
            pricing={"/v1/data": [Session(PRICE)]},
            terms=terms,
            memos=Memos(b"gate-memo-secret-0123456789"),
            trusted_facilitators=set(),
            replay=MemoryReplayStore(),
            sessions=session_scheme(terms, billing, SECRET, ledger),
        )
        await billing.close()

    auth = PaymentAuth(payer, rpc=AsyncClient(validator.url), max_per_request=100 * PRICE)
    with serve(app) as url, httpx.Client(auth=auth, base_url=url) as http:
        for _ in range(5):
            r = http.get("/v1/data")
            assert r.status_code == 200 and "payment-receipt" in r.headers
        [(_, tab)] = auth.tabs.items()
        assert tab.cumulative == 5 * PRICE
        auth.close()  # asks to close the session on chain, then stops the auth's loop
    state = chain.account(tab.channel)
    assert state is not None
    assert type(Session_.decode(state.data).status).__name__ == "Closing"


class FlakyLedger(MemoryVoucherLedger):
    """A ledger whose database is away while `down` (as SQLite answers when its file is
    locked for too long or its disk fails)."""

    down: set[str] = set()

    def _check(self, what: str) -> None:
        if what in self.down:
            raise sqlite3.OperationalError("database is locked")

    async def advance(self, voucher: SignedVoucher, *, floor: int, step: int) -> int | None:
        self._check("advance")
        return await super().advance(voucher, floor=floor, step=step)

    async def commit(self, voucher: SignedVoucher) -> None:
        self._check("commit")
        await super().commit(voucher)


async def test_a_ledger_outage_answers_503_with_retry_after_and_charges_nothing(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    ledger = FlakyLedger()
    ledger.down = {"advance"}
    tab = await world.open()
    async with world.gate(ledger) as http:
        found = await offer(http)
        for _ in range(2):
            r = await http.get(
                "/v1/data", headers={"authorization": tab.credential(found, tab.sign(PRICE))}
            )
            assert r.status_code == 503 and r.headers["retry-after"] == "2"
            assert r.json()["error"] == "LedgerUnavailable"
        assert caplog.text.count("the voucher ledger is unreachable") == 1  # once per outage
        # Down between taking the voucher and the response: the response is a 503, nothing
        # is served or reported.
        ledger.down = {"commit"}
        r = await http.get(
            "/v1/data", headers={"authorization": tab.credential(found, tab.sign(PRICE))}
        )
        assert r.status_code == 503 and "payment-receipt" not in r.headers
        assert await ledger.unreported() == []
        ledger.down = set()
        # Back: the same price pays the next call; the failed ones cost nothing.
        assert (await pay(http, tab, found)).status_code == 200
        assert "the voucher ledger answers again" in caplog.text
        assert [v.cumulative for v in await ledger.unreported()] == [PRICE]
