"""The facilitator's x402 side (`exact` on Solana, v1 and v2) on the local validator, with the
real program, real token transfers and the real HTTP app: GET /supported in x402's shape;
POST /verify and /settle answer every payment with HTTP 200 and x402's reason; a transaction
settles once (a repeat, racing or later, on any instance, is `duplicate_settlement`)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from solders.system_program import TransferParams, transfer
from spl.token.instructions import get_associated_token_address

from svcpay.facilitator.app import create_app
from svcpay.facilitator.config import FacilitatorConfig
from svcpay.facilitator.service import Facilitator
from svcpay.facilitator.settlement import RateLimit
from svcpay.localnet.process import Localnet
from svcpay.protocol.headers import NETWORK_MAINNET, SCHEME_EXACT
from svcpay.schemes.x402_exact.wire import CAIP2, Reason
from tests.support.billing import USDC
from tests.support.chain import Chain
from tests.support.facilitator import FACILITATOR_URL, InProcessFacilitator, in_process_facilitator
from tests.support.x402_tx import ExactPayment, memo_with_signer

pytestmark = pytest.mark.anyio
PRICE = USDC // 4
MEMO = "x402-test-memo"
NETWORK = CAIP2[NETWORK_MAINNET]


@dataclass
class Market:
    """A facilitator, a merchant whose ATA of `mint` is its registered payTo account, and a
    way to make paying clients."""

    fac: InProcessFacilitator
    chain: Chain
    merchant: Pubkey  # x402's payTo: the wallet
    mint: Pubkey
    ata: Pubkey
    provider_id: str
    database_url: str

    async def payment(self, funds: int = USDC, **changes: Any) -> ExactPayment:
        """A fresh payer holding `funds` of the mint, paying PRICE as x402 wallets do."""
        payer = self.chain.funded_keypair()
        self.chain.token_account(payer.pubkey(), self.mint, funds)
        blockhash = (await self.fac.rpc.get_latest_blockhash()).value.blockhash
        pay = ExactPayment(
            payer=payer,
            fee_payer=self.fac.fee_payer.pubkey(),
            mint=self.mint,
            pay_to=self.merchant,
            amount=PRICE,
            blockhash=blockhash,
            memo=MEMO,
        )
        return pay.but(**changes)

    def requirements(self, **changes: Any) -> dict[str, Any]:
        req: dict[str, Any] = {
            "scheme": SCHEME_EXACT,
            "network": NETWORK,
            "asset": str(self.mint),
            "amount": str(PRICE),
            "payTo": str(self.merchant),
            "maxTimeoutSeconds": 60,
            "extra": {"feePayer": self.fac.key, "memo": MEMO},
        }
        return {**req, **changes}

    def v2(self, pay: ExactPayment, **changes: Any) -> dict[str, Any]:
        """A v2 request body: the client accepted exactly the requirements."""
        req = self.requirements(**changes)
        payload = {
            "x402Version": 2,
            "resource": {"url": "https://api.example.com/report"},
            "accepted": req,
            "payload": {"transaction": pay.base64()},
        }
        return {"x402Version": 2, "paymentPayload": payload, "paymentRequirements": req}

    def v1(self, pay: ExactPayment, network: str = "solana") -> dict[str, Any]:
        req = {
            "scheme": SCHEME_EXACT,
            "network": network,
            "maxAmountRequired": str(PRICE),
            "resource": "https://api.example.com/report",
            "description": "a report",
            "mimeType": "application/json",
            "payTo": str(self.merchant),
            "maxTimeoutSeconds": 60,
            "asset": str(self.mint),
            "extra": {"feePayer": self.fac.key},
        }
        payload = {
            "x402Version": 1,
            "scheme": SCHEME_EXACT,
            "network": network,
            "payload": {"transaction": pay.base64()},
        }
        return {"x402Version": 1, "paymentPayload": payload, "paymentRequirements": req}

    def received(self) -> int:
        return int(self.chain.token_state(self.ata)["amount"])

    async def settled_events(self) -> list[Any]:
        found = await self.fac.service.store.events.read(self.provider_id)
        return [e for e in found if e.type == "payment.settled"]


@asynccontextmanager
async def open_market(
    validator: Localnet, chain: Chain, database_url: str = "", rpc_url: str = ""
) -> AsyncIterator[Market]:
    """A market whose facilitator reaches the validator at `rpc_url` (default: directly)."""
    merchant, fee_payer = Keypair(), chain.funded_keypair()
    mint = chain.create_mint()
    ata = chain.token_account(merchant.pubkey(), mint)
    rpc = rpc_url or validator.url
    async with in_process_facilitator(rpc, fee_payer, database_url=database_url) as fac:
        store = fac.service.store
        provider_id = await store.providers.create("x402 merchant")
        await store.providers.add_resource(provider_id, "payTo", str(ata))
        yield Market(fac, chain, merchant.pubkey(), mint, ata, provider_id, database_url)


@pytest.fixture
async def market(validator: Localnet, chain: Chain) -> AsyncIterator[Market]:
    async with open_market(validator, chain) as m:
        yield m


async def post(m: Market, path: str, body: object) -> dict[str, Any]:
    """POSTs `body`; x402 answers every payment with 200."""
    reply = await m.fac.http.post(path, json=body)
    assert reply.status_code == 200, reply.text
    answer: dict[str, Any] = reply.json()
    return answer


async def test_supported_lists_both_versions_and_keeps_svcpay_fields(market: Market) -> None:
    body = (await market.fac.http.get("/supported")).json()
    key = market.fac.key
    assert body["kinds"] == [
        {"x402Version": 2, "scheme": "exact", "network": NETWORK, "extra": {"feePayer": key}},
        {"x402Version": 1, "scheme": "exact", "network": "solana", "extra": {"feePayer": key}},
    ]
    assert body["signers"] == {"solana:*": [key]} and body["extensions"] == []
    assert body["feePayer"] == body["facilitatorKey"] == key
    assert "payment.settled" in body["eventTypes"]


async def test_v2_verify_then_settle_pays_once(market: Market) -> None:
    pay = await market.payment()
    body = market.v2(pay)

    verdict = await post(market, "/verify", body)
    assert verdict == {"isValid": True, "payer": str(pay.payer.pubkey())}
    assert market.received() == 0  # verifying moves nothing

    settled = await post(market, "/settle", body)
    assert settled["success"] is True, settled
    assert settled["network"] == NETWORK and settled["amount"] == str(PRICE)
    assert settled["payer"] == str(pay.payer.pubkey()) and len(settled["transaction"]) > 80
    assert market.received() == PRICE
    [event] = await market.settled_events()
    assert event.data["transaction"] == settled["transaction"]
    assert event.data["payTo"] == str(market.ata) and event.amount == PRICE

    again = await post(market, "/settle", body)
    assert (again["success"], again["errorReason"]) == (False, Reason.DUPLICATE_SETTLEMENT)
    reverify = await post(market, "/verify", body)
    assert (reverify["isValid"], reverify["invalidReason"]) == (
        False,
        Reason.DUPLICATE_SETTLEMENT,
    )
    assert market.received() == PRICE and len(await market.settled_events()) == 1


async def test_v1_settles_and_records_what_was_transferred(market: Market) -> None:
    pay = await market.payment(amount=PRICE + 7, memo=None)  # v1 gives no memo; overpays
    body = market.v1(pay)
    assert (await post(market, "/verify", body))["isValid"] is True
    settled = await post(market, "/settle", body)
    assert settled["success"] is True and settled["network"] == "solana", settled
    assert settled["amount"] == str(PRICE + 7)
    assert market.received() == PRICE + 7
    [event] = await market.settled_events()
    assert event.amount == PRICE + 7 and event.data["amount"] == str(PRICE + 7)


Case = Callable[[Market, ExactPayment], tuple[ExactPayment, dict[str, Any]]]


def _other_mint(m: Market, p: ExactPayment) -> tuple[ExactPayment, dict[str, Any]]:
    other = m.chain.create_mint()
    m.chain.token_account(p.payer.pubkey(), other, USDC)
    return p.but(mint=other), {}


REFUSALS: dict[str, tuple[Case, str]] = {
    "wrong destination": (
        lambda m, p: (
            p.but(destination=get_associated_token_address(p.payer.pubkey(), m.mint)),
            {},
        ),
        Reason.RECIPIENT_MISMATCH,
    ),
    "wrong mint": (_other_mint, Reason.MINT_MISMATCH),
    "amount too low": (lambda m, p: (p.but(amount=PRICE - 1), {}), Reason.AMOUNT_INSUFFICIENT),
    "fee payer in an instruction's accounts": (
        lambda m, p: (p.but(memo=None, extra=[memo_with_signer(MEMO, p.fee_payer)]), {}),
        Reason.FEE_PAYER_TRANSFERRING,
    ),
    "fee payer as transfer authority": (
        lambda m, p: (p.but(authority=p.fee_payer), {}),
        Reason.FEE_PAYER_TRANSFERRING,
    ),
    "no compute unit price": (lambda m, p: (p.but(price=None), {}), Reason.COMPUTE_PRICE),
    "no compute unit limit": (lambda m, p: (p.but(limit=None), {}), Reason.COMPUTE_LIMIT),
    "price above 5 lamports a unit": (
        lambda m, p: (p.but(price=5_000_001, limit=5_000), {}),
        Reason.COMPUTE_PRICE_TOO_HIGH,
    ),
    "priority fee above the bound": (
        lambda m, p: (p.but(price=1_000_000, limit=100_000), {}),
        Reason.COMPUTE_PRICE_TOO_HIGH,
    ),
    "an extra unknown instruction": (
        lambda m, p: (
            p.but(
                extra=[
                    transfer(
                        TransferParams(
                            from_pubkey=p.payer.pubkey(), to_pubkey=m.merchant, lamports=1
                        )
                    )
                ]
            ),
            {},
        ),
        Reason.UNKNOWN_FIFTH,
    ),
    "wrong network": (
        lambda m, p: (p, {"network": CAIP2["solana-devnet"]}),
        Reason.NETWORK_MISMATCH,
    ),
    "wrong memo": (lambda m, p: (p.but(memo="not-the-memo"), {}), Reason.MEMO_MISMATCH),
    "no memo when one is required": (lambda m, p: (p.but(memo=None), {}), Reason.MEMO_COUNT),
    "a fee payer that is not ours": (
        lambda m, p: (p, {"extra": {"feePayer": str(Keypair().pubkey()), "memo": MEMO}}),
        Reason.FEE_PAYER_NOT_MANAGED,
    ),
    "a scheme that is not exact": (
        lambda m, p: (p, {"scheme": "upto"}),
        Reason.UNSUPPORTED_SCHEME,
    ),
    "funds short of the amount (simulation)": (
        lambda m, p: (p.but(amount=2 * USDC), {"amount": str(2 * USDC)}),
        Reason.SIMULATION_FAILED,
    ),
}


@pytest.mark.parametrize("case", list(REFUSALS))
async def test_each_refusal_is_200_with_its_reason(market: Market, case: str) -> None:
    build, reason = REFUSALS[case]
    pay, changes = build(market, await market.payment())
    body = market.v2(pay, **changes)
    verdict = await post(market, "/verify", body)
    assert (verdict["isValid"], verdict["invalidReason"]) == (False, reason), verdict
    assert verdict["invalidMessage"]
    settled = await post(market, "/settle", body)
    assert (settled["success"], settled["errorReason"]) == (False, reason), settled
    assert (
        settled["transaction"] == ""
        and settled["network"] == body["paymentRequirements"]["network"]
    )
    assert market.received() == 0 and await market.settled_events() == []


async def test_accepted_terms_must_be_the_requirements(market: Market) -> None:
    body = market.v2(await market.payment())
    body["paymentPayload"]["accepted"] = {**body["paymentRequirements"], "amount": "1"}
    verdict = await post(market, "/verify", body)
    assert verdict["invalidReason"] == Reason.INVALID_PAYLOAD


async def test_an_unregistered_pay_to_is_refused(market: Market) -> None:
    stranger = Keypair().pubkey()
    market.chain.token_account(stranger, market.mint)  # its ATA exists, unregistered
    pay = await market.payment(pay_to=stranger)
    body = market.v2(pay, payTo=str(stranger))
    for path, key in (("/verify", "invalidReason"), ("/settle", "errorReason")):
        assert (await post(market, path, body))[key] == Reason.PAY_TO_NOT_REGISTERED
    assert (
        market.chain.token_state(get_associated_token_address(stranger, market.mint))["amount"] == 0
    )


async def test_a_payer_beyond_its_rate_is_rate_limited(market: Market) -> None:
    market.fac.service.settler.rate_limit = RateLimit(rate=0.001, burst=1)
    pay = await market.payment()
    assert (await post(market, "/settle", market.v2(pay)))["success"] is True
    second = await market.payment(payer=pay.payer, memo=MEMO, amount=PRICE + 1)
    refused = await post(market, "/settle", market.v2(second))
    assert refused["errorReason"] == Reason.RATE_LIMITED
    assert market.received() == PRICE


async def test_concurrent_settles_on_two_instances_settle_once(
    validator: Localnet, chain: Chain, database_url: str
) -> None:
    async with open_market(validator, chain, database_url) as market:
        service = market.fac.service
        other = Facilitator(
            FacilitatorConfig(
                keypair=service.keypair,
                rpc_url=service.config.rpc_url,
                database_url=database_url,
                instance="second",
            )
        )
        second = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=create_app(other, background=False)),
            base_url=FACILITATOR_URL,
        )
        try:
            body = market.v2(await market.payment())
            clients = [market.fac.http, second] * 4
            replies = await asyncio.gather(*(c.post("/settle", json=body) for c in clients))
        finally:
            await second.aclose()
            await other.aclose()
        assert [r.status_code for r in replies] == [200] * len(clients)
        answers = [r.json() for r in replies]
        assert sum(a["success"] for a in answers) == 1, answers
        # The losers see it settled, or still being sent by the winner (a gate asks again).
        assert {a.get("errorReason") for a in answers if not a["success"]} <= {
            Reason.DUPLICATE_SETTLEMENT,
            Reason.SETTLEMENT_PENDING,
        }
        assert market.received() == PRICE
        assert len(await market.settled_events()) == 1


async def test_one_transaction_pays_through_one_scheme(market: Market) -> None:
    """Settled by svcpay's /authorize, it is a duplicate to x402's /settle; settled by
    /settle, /authorize refuses it (it would otherwise answer a proof for it)."""
    pay = await market.payment()
    option = {
        "scheme": SCHEME_EXACT,
        "network": NETWORK_MAINNET,
        "token": str(market.mint),
        "amount": str(PRICE),
        "payTo": str(market.ata),
        "memo": MEMO,
    }
    authorize = {"signedPayment": pay.base64(), "paymentRequirements": option}
    assert (await market.fac.http.post("/authorize", json=authorize)).status_code == 200
    duplicate = await post(market, "/settle", market.v2(pay))
    assert duplicate["errorReason"] == Reason.DUPLICATE_SETTLEMENT

    other = await market.payment()
    assert (await post(market, "/settle", market.v2(other)))["success"] is True
    refused = await market.fac.http.post(
        "/authorize", json={**authorize, "signedPayment": other.base64()}
    )
    assert (refused.status_code, refused.json()["error"]) == (409, "AlreadySettled")
    assert market.received() == 2 * PRICE


async def test_a_payload_that_is_no_transaction_is_refused_as_a_payment(market: Market) -> None:
    body = market.v2(await market.payment())
    for bad in ("!!not base64!!", "AAAA", "QUJD" * 10):
        body["paymentPayload"]["payload"]["transaction"] = bad
        verdict = await post(market, "/verify", body)
        assert verdict["invalidReason"] == Reason.UNDECODABLE, bad
    del body["paymentPayload"]["payload"]
    assert (await post(market, "/settle", body))["errorReason"] == Reason.INVALID_PAYLOAD


GARBAGE: list[object] = [
    [],
    "x402",
    {"x402Version": 3, "paymentPayload": {}, "paymentRequirements": {}},
    {"x402Version": "2", "paymentPayload": {}, "paymentRequirements": {}},
    {"x402Version": True, "paymentPayload": {}, "paymentRequirements": {}},
    {"x402Version": 2},
    {"x402Version": 2, "paymentPayload": [], "paymentRequirements": {}},
    {"x402Version": 2, "paymentPayload": {"x402Version": 2}, "paymentRequirements": {}},
    {"x402Version": 2, "paymentPayload": {"x402Version": 2}, "paymentRequirements": None},
    {"x402Version": 1, "paymentPayload": {"x402Version": 2}, "paymentRequirements": {}},
]


async def test_garbage_bodies_get_400_never_500(market: Market) -> None:
    valid = market.v2(await market.payment())
    mismatched = {**valid, "paymentPayload": {**valid["paymentPayload"], "x402Version": 1}}
    huge_amount = market.v2(await market.payment(), amount=str(2**64 - 1))
    for path in ("/verify", "/settle"):
        for body in [*GARBAGE, mismatched, huge_amount]:
            reply = await market.fac.http.post(path, json=body)
            assert reply.status_code == 400, (path, body, reply.text)
            assert reply.json()["error"] == "InvalidRequest"
        for raw in (b"{", b"\xff", b"null", b'{"x402Version": 2' * 3):
            reply = await market.fac.http.post(path, content=raw)
            assert reply.status_code == 400, (path, raw)
    assert (await market.fac.http.post("/settle", json={})).status_code == 400
    assert market.received() == 0
