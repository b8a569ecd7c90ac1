"""MPP Solana `charge` on the gate (issue 24, ADR 0029), on the local validator with svcpay's
real facilitator: the 402's `WWW-Authenticate: Payment` challenges, a pulled transaction
(built as pay-kit's client builds it: price, limit, TransferChecked, memo) settled once with a
`Payment-Receipt`, a pushed one recorded once, and every refusal a 402 problem with fresh
challenges that never reaches the chain."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from solders.compute_budget import set_compute_unit_limit, set_compute_unit_price
from solders.instruction import Instruction
from solders.keypair import Keypair
from solders.message import MessageV0, to_bytes_versioned
from solders.pubkey import Pubkey
from solders.signature import Signature
from solders.transaction import VersionedTransaction
from spl.token.constants import TOKEN_PROGRAM_ID
from spl.token.instructions import get_associated_token_address, transfer_checked
from spl.token.models import TransferCheckedParams
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from svcpay.client import PaymentAuth, SpendingPolicy
from svcpay.gate import OneTime, payment_gate
from svcpay.gate.pricing import Terms
from svcpay.localnet.process import Localnet
from svcpay.protocol import mpp
from svcpay.protocol.errors import NoAcceptableOption, OriginNotAllowed, SpendingLimitExceeded
from svcpay.protocol.memo import Memos
from svcpay.protocol.replay import MemoryReplayStore
from svcpay.rpc import connect
from svcpay.schemes.mpp_charge import client as charge_client
from svcpay.schemes.mpp_charge.facilitator_client import ChargeFacilitatorClient
from svcpay.schemes.payment_auth import accepted
from tests.facilitator.test_x402 import Market, open_market
from tests.support.billing import USDC
from tests.support.chain import Chain
from tests.support.processes import Processes
from tests.support.x402_tx import MEMO_PROGRAM

pytestmark = pytest.mark.anyio
PRICE = USDC // 4


@dataclass
class Shop:
    market: Market
    http: httpx.AsyncClient
    handled: list[str]

    @property
    def chain(self) -> Chain:
        return self.market.chain


def api(handled: list[str]) -> Starlette:
    async def data(request: Request) -> JSONResponse:
        handled.append(request.url.path)
        if request.url.path == "/v1/fail":
            return JSONResponse({"error": "down"}, status_code=500)
        return JSONResponse({"data": 42})

    async def order(request: Request) -> JSONResponse:
        handled.append(f"POST {request.url.path}")
        return JSONResponse({"order": len(handled)}, status_code=201)

    return Starlette(
        routes=[Route(p, data) for p in ("/v1/data", "/v1/fail", "/v1/before")]
        + [Route("/v1/order", order, methods=["POST"])]
    )


@pytest.fixture
async def shop(validator: Localnet, chain: Chain) -> AsyncIterator[Shop]:
    async with open_market(validator, chain) as market:
        handled: list[str] = []
        terms = Terms(
            pay_to=str(market.ata),
            token=str(market.mint),
            owner=str(market.merchant),
            fee_payer=market.fac.key,
        )
        gate = payment_gate(
            api(handled),
            pricing={
                "/v1/data": [OneTime(PRICE)],
                "/v1/fail": [OneTime(PRICE)],
                "/v1/before": [OneTime(PRICE, settle="before")],
                "/v1/order": [OneTime(PRICE, description="an order")],
            },
            terms=terms,
            memos=Memos(b"mpp-charge-memo-secret-0123"),
            trusted_facilitators=set(),
            replay=MemoryReplayStore(),
            mpp_facilitator=ChargeFacilitatorClient("http://fac", http=market.fac.http),
            schemes=["mpp", "svcpay"],
        )
        transport = httpx.ASGITransport(app=gate, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://api") as http:
            yield Shop(market, http, handled)


async def challenges(shop: Shop, path: str = "/v1/data") -> list[mpp.Challenge]:
    reply = await shop.http.get(path)
    assert reply.status_code == 402, reply.text
    return mpp.parse_challenges(reply.headers.get_list("www-authenticate"))


def pull_of(found: list[mpp.Challenge]) -> mpp.Challenge:
    return next(c for c in found if c.request_json["methodDetails"]["feePayer"])


def push_of(found: list[mpp.Challenge]) -> mpp.Challenge:
    return next(c for c in found if not c.request_json["methodDetails"]["feePayer"])


async def transaction(
    shop: Shop, challenge: mpp.Challenge, payer: Keypair | None = None, **change: Any
) -> VersionedTransaction:
    """As pay-kit's client builds it: SetComputeUnitPrice(1), SetComputeUnitLimit(200,000),
    TransferChecked, Memo(externalId); fee payer the server's key (pull) or the payer."""
    request = {**challenge.request_json, **change}
    details = request["methodDetails"]
    if payer is None:
        payer = shop.chain.funded_keypair()
        shop.chain.token_account(payer.pubkey(), shop.market.mint, USDC)
    mint = Pubkey.from_string(request["currency"])
    transfer = transfer_checked(
        TransferCheckedParams(
            program_id=TOKEN_PROGRAM_ID,
            source=get_associated_token_address(payer.pubkey(), mint),
            mint=mint,
            dest=get_associated_token_address(Pubkey.from_string(request["recipient"]), mint),
            owner=payer.pubkey(),
            amount=int(request["amount"]),
            decimals=details["decimals"],
        )
    )
    ixs = [
        set_compute_unit_price(1),
        set_compute_unit_limit(200_000),
        transfer,
        Instruction(MEMO_PROGRAM, request["externalId"].encode(), []),
    ]
    fee_payer = Pubkey.from_string(details["feePayerKey"]) if details["feePayer"] else None
    blockhash = (await shop.market.fac.rpc.get_latest_blockhash()).value.blockhash
    msg = MessageV0.try_compile(fee_payer or payer.pubkey(), ixs, [], blockhash)
    own = payer.sign_message(to_bytes_versioned(msg))
    sigs = [Signature.default(), own] if fee_payer else [own]
    return VersionedTransaction.populate(msg, sigs)


def credential(challenge: mpp.Challenge, payload: dict[str, Any]) -> str:
    return mpp.Credential(challenge, payload).header()


def pulled(challenge: mpp.Challenge, tx: VersionedTransaction) -> str:
    encoded = base64.b64encode(bytes(tx)).decode()
    return credential(challenge, {"type": "transaction", "transaction": encoded})


async def pay(shop: Shop, value: str, path: str = "/v1/data") -> httpx.Response:
    return await shop.http.get(path, headers={"Authorization": value})


def problem(reply: httpx.Response) -> str:
    assert reply.headers["content-type"] == "application/problem+json", reply.text
    assert mpp.parse_challenges(reply.headers.get_list("www-authenticate")), "fresh challenges"
    kind: str = reply.json()["type"].removeprefix(mpp.PROBLEM_BASE)
    return kind


async def test_a_402_offers_a_charge_to_pull_and_one_to_push(shop: Shop) -> None:
    reply = await shop.http.get("/v1/data")
    assert reply.status_code == 402 and reply.json()["accepts"]  # svcpay's body stays
    found = mpp.parse_challenges(reply.headers.get_list("www-authenticate"))
    assert [(c.method, c.intent) for c in found] == [("solana", "charge")] * 2
    assert all(len(v) < mpp.MAX_CHALLENGE_BYTES for v in reply.headers.get_list("www-authenticate"))
    pull, push = pull_of(found), push_of(found)
    market = shop.market
    request = pull.request_json
    assert request == {
        "amount": str(PRICE),
        "currency": str(market.mint),
        "recipient": str(market.merchant),
        "externalId": request["externalId"],
        "methodDetails": {
            "network": "mainnet",
            "decimals": 6,
            "tokenProgram": str(TOKEN_PROGRAM_ID),
            "feePayer": True,
            "feePayerKey": market.fac.key,
        },
    }
    assert push.request_json["methodDetails"]["feePayer"] is False
    assert "feePayerKey" not in push.request_json["methodDetails"]
    assert pull.expires and mpp.parse_rfc3339(pull.expires)
    # the request is JCS, base64url without padding; the id is the HMAC of the seven slots
    raw = mpp.unb64url(pull.request)
    assert (
        "=" not in pull.request
        and raw == json.dumps(json.loads(raw), sort_keys=True, separators=(",", ":")).encode()
    )
    # a client that wants sessions only gets no charge challenge
    only = await shop.http.get("/v1/data", headers={"Accept-Payment": "*/session"})
    assert only.status_code == 402 and "www-authenticate" not in only.headers
    assert accepted("solana/charge, */session;q=0.3, junk") == [
        ("solana", "charge", 1.0),
        ("*", "session", 0.3),
    ]


async def test_a_pulled_charge_is_settled_once_with_a_receipt(shop: Shop) -> None:
    pull = pull_of(await challenges(shop))
    value = pulled(pull, await transaction(shop, pull))
    reply = await pay(shop, value)
    assert reply.status_code == 200 and reply.json() == {"data": 42}
    receipt = mpp.Receipt.parse(reply.headers["payment-receipt"])
    assert reply.headers["cache-control"] == "private"  # MPP core: MUST, beside a receipt
    assert (receipt.status, receipt.method, receipt.challenge_id) == ("success", "solana", pull.id)
    assert receipt.extra["externalId"] == pull.request_json["externalId"]
    assert shop.market.received() == PRICE
    [event] = await shop.market.settled_events()
    assert event.data["transaction"] == receipt.reference
    again = await pay(shop, value)
    assert again.status_code == 402 and problem(again) == "verification-failed"
    assert shop.market.received() == PRICE and shop.handled == ["/v1/data"]


async def test_concurrent_copies_of_one_credential_are_served_once(shop: Shop) -> None:
    pull = pull_of(await challenges(shop))
    value = pulled(pull, await transaction(shop, pull))
    replies = await asyncio.gather(*(pay(shop, value) for _ in range(6)))
    assert sorted(r.status_code for r in replies) == [200] + [402] * 5
    assert shop.market.received() == PRICE and shop.handled == ["/v1/data"]


async def test_refused_charges_never_reach_the_chain(shop: Shop) -> None:
    found = await challenges(shop)
    pull = pull_of(found)
    short = pulled(pull, await transaction(shop, pull, amount=str(PRICE - 1)))
    assert problem(await pay(shop, short)) == "verification-failed"
    other = await transaction(shop, pull, recipient=str(Keypair().pubkey()))
    assert problem(await pay(shop, pulled(pull, other))) == "verification-failed"
    # a challenge whose request was altered is not ours; an unknown payload type is malformed
    forged = mpp.Challenge(
        pull.id, pull.realm, pull.method, pull.intent,
        mpp.encode_json({**pull.request_json, "amount": "1"}), pull.expires, "", "",
    )  # fmt: skip
    tx = await transaction(shop, forged)
    assert problem(await pay(shop, pulled(forged, tx))) == "invalid-challenge"
    odd = credential(pull, {"type": "bundle"})
    assert problem(await pay(shop, odd)) == "malformed-credential"
    assert problem(await pay(shop, "Payment not-base64!")) == "malformed-credential"
    # a transaction for the server to co-sign, on the push challenge (which takes only what
    # the client fully signed), and a pushed signature on the pull challenge, are refused
    push = push_of(found)
    assert problem(await pay(shop, pulled(push, tx))) == "verification-failed"
    sig = credential(pull, {"type": "signature", "signature": "1" * 88})
    assert problem(await pay(shop, sig)) == "malformed-credential"
    assert shop.market.received() == 0 and shop.handled == []


async def test_a_failed_handler_is_not_charged_and_before_settles_first(shop: Shop) -> None:
    pull = pull_of(await challenges(shop, "/v1/fail"))
    reply = await pay(shop, pulled(pull, await transaction(shop, pull)), "/v1/fail")
    assert reply.status_code == 500 and "payment-receipt" not in reply.headers
    assert shop.market.received() == 0
    pull = pull_of(await challenges(shop, "/v1/before"))
    reply = await pay(shop, pulled(pull, await transaction(shop, pull)), "/v1/before")
    assert reply.status_code == 200 and "payment-receipt" in reply.headers
    assert shop.market.received() == PRICE


async def test_a_pushed_charge_is_recorded_once(shop: Shop) -> None:
    push = push_of(await challenges(shop))
    payer = shop.chain.funded_keypair()
    shop.chain.token_account(payer.pubkey(), shop.market.mint, USDC)
    tx = await transaction(shop, push, payer)
    rpc = shop.market.fac.rpc
    sig = (await rpc.send_raw_transaction(bytes(tx))).value
    await rpc.confirm_transaction(sig, "confirmed")
    value = credential(push, {"type": "signature", "signature": str(sig)})
    reply = await pay(shop, value)
    assert reply.status_code == 200, reply.text
    assert mpp.Receipt.parse(reply.headers["payment-receipt"]).reference == str(sig)
    assert shop.market.received() == PRICE
    again = await pay(shop, value)
    assert again.status_code == 402 and problem(again) == "verification-failed"
    # a signature that paid something else does not pay this
    other = push_of(await challenges(shop))
    assert problem(
        await pay(shop, credential(other, {"type": "signature", "signature": str(sig)}))
    ) in ("verification-failed",)
    assert shop.handled == ["/v1/data"]


async def test_a_client_paid_transaction_on_the_push_challenge_is_sent_as_signed(
    shop: Shop,
) -> None:
    """The Solana charge draft: on a `feePayer: false` challenge "Clients MAY use either
    type="transaction" or type="signature" credentials", and "the server broadcasts the
    transaction as-is". One missing a signature is refused before anything is sent."""
    push = push_of(await challenges(shop))
    payer = shop.chain.funded_keypair()
    shop.chain.token_account(payer.pubkey(), shop.market.mint, USDC)
    sol_before = shop.chain.balance(payer.pubkey())
    tx = await transaction(shop, push, payer)
    unsigned = VersionedTransaction.populate(tx.message, [Signature.default()])
    refused = await pay(shop, pulled(push, unsigned))
    assert refused.status_code == 402 and problem(refused) == "verification-failed"
    assert "signature" in refused.json()["detail"]
    reply = await pay(shop, pulled(push, tx))
    assert reply.status_code == 200, reply.text
    assert mpp.Receipt.parse(reply.headers["payment-receipt"]).reference == str(tx.signatures[0])
    assert shop.market.received() == PRICE
    assert shop.chain.balance(payer.pubkey()) < sol_before  # the client paid its own fee
    again = await pay(shop, pulled(push, tx))
    assert again.status_code == 402 and problem(again) == "verification-failed"
    assert shop.handled == ["/v1/data"] and shop.market.received() == PRICE


async def test_payment_auth_pays_a_charge_when_it_prefers_mpp(shop: Shop) -> None:
    """svcpay's own client, told to prefer MPP, pays the gate's `solana`/`charge` challenge
    (pull: the facilitator pays the fee) within its limits."""
    buyer = shop.chain.funded_keypair()
    shop.chain.token_account(buyer.pubkey(), shop.market.mint, USDC)
    auth = PaymentAuth(
        buyer, rpc=shop.market.fac.rpc, max_per_request=PRICE, protocols=("mpp", "svcpay")
    )
    reply = await shop.http.get("/v1/data", auth=auth)
    assert reply.status_code == 200 and reply.json() == {"data": 42}, reply.text
    assert reply.request.headers["authorization"].startswith("Payment ")
    assert mpp.Receipt.parse(reply.headers["payment-receipt"]).method == "solana"
    assert shop.market.received() == PRICE
    with pytest.raises(SpendingLimitExceeded):
        tight = PaymentAuth(
            buyer, rpc=shop.market.fac.rpc, max_per_request=PRICE - 1, protocols=("mpp",)
        )
        await shop.http.get("/v1/data", auth=tight)
    assert shop.market.received() == PRICE


async def test_the_spending_policy_decides_before_money_moves(shop: Shop) -> None:
    """PaymentAuth's SpendingPolicy (pay-kit's client permissions and a daily budget):
    an origin or asset it does not list, a payment above its cap, and a day's spending past
    the per-origin cap or the budget are refused before anything is signed."""
    buyer = shop.chain.funded_keypair()
    shop.chain.token_account(buyer.pubkey(), shop.market.mint, USDC)
    mint = str(shop.market.mint)

    def auth(**policy: Any) -> PaymentAuth:
        return PaymentAuth(
            buyer,
            rpc=shop.market.fac.rpc,
            max_per_request=USDC,
            protocols=("mpp",),
            policy=SpendingPolicy(**policy),
        )

    with pytest.raises(OriginNotAllowed, match="http://api"):
        await shop.http.get("/v1/data", auth=auth(origins={"https://elsewhere.example"}))
    with pytest.raises(NoAcceptableOption, match="may not pay in"):
        await shop.http.get("/v1/data", auth=auth(assets={str(Keypair().pubkey())}))
    with pytest.raises(SpendingLimitExceeded, match="per-payment cap"):
        await shop.http.get("/v1/data", auth=auth(max_per_payment=PRICE - 1))
    assert shop.market.received() == 0 and shop.handled == []

    capped = auth(origins={"http://api:80"}, assets={mint}, max_per_origin_per_day=PRICE)
    assert (await shop.http.get("/v1/data", auth=capped)).status_code == 200
    with pytest.raises(SpendingLimitExceeded, match="per origin per day for http://api"):
        await shop.http.get("/v1/data", auth=capped)
    assert capped.spent_today("http://api") == PRICE

    budget = auth(daily_budget=2 * PRICE)
    for _ in range(2):
        assert (await shop.http.get("/v1/data", auth=budget)).status_code == 200
    with pytest.raises(SpendingLimitExceeded, match="daily budget"):
        await shop.http.get("/v1/data", auth=budget)
    assert shop.market.received() == 3 * PRICE and budget.spent_today() == 2 * PRICE
    with pytest.raises(TypeError):
        SpendingPolicy(origins="http://api")  # type: ignore[arg-type]


async def test_an_idempotency_key_gets_the_first_paid_answer_again(shop: Shop) -> None:
    """A POST paid with an MPP charge and an Idempotency-Key, sent again (a retry after a
    lost answer), gets the first answer without a second run or charge; the key with
    another credential is a 409."""
    reply = await shop.http.post("/v1/order")
    pull = pull_of(mpp.parse_challenges(reply.headers.get_list("www-authenticate")))
    assert pull.description == "an order" == pull.request_json["description"]
    value = pulled(pull, await transaction(shop, pull))
    headers = {"Authorization": value, "Idempotency-Key": "order-7"}
    first = await shop.http.post("/v1/order", headers=headers)
    assert first.status_code == 201 and first.json() == {"order": 1}
    again = await shop.http.post("/v1/order", headers=headers)
    assert (again.status_code, again.json()) == (201, {"order": 1})
    assert again.headers["payment-receipt"] == first.headers["payment-receipt"]
    assert shop.handled == ["POST /v1/order"] and shop.market.received() == PRICE
    other = pulled(pull, await transaction(shop, pull))
    conflict = await shop.http.post(
        "/v1/order", headers={"Authorization": other, "Idempotency-Key": "order-7"}
    )
    assert conflict.status_code == 409 and shop.market.received() == PRICE
    too_long = await shop.http.post(
        "/v1/order", headers={"Authorization": other, "Idempotency-Key": "k" * 256}
    )
    assert too_long.status_code == 400


async def test_a_charge_the_client_pushes_is_sent_again_until_it_lands(
    shop: Shop, validator: Localnet, processes: Processes
) -> None:
    """A leader drops what a node accepted: the paying client's push is rebroadcast until it
    lands (svcpay.rpc.landing), where one send and a wait for `confirmed` timed out."""
    dropping = processes.lossy_rpc(validator.url, "--drop-sends", "0.5", "--seed", "7")
    payer = shop.chain.funded_keypair()
    shop.chain.token_account(payer.pubkey(), shop.market.mint, USDC)
    offer = charge_client.read(push_of(await challenges(shop)))
    rpc = connect(dropping)
    try:
        value = await charge_client.ChargeClient(payer, rpc).credential(offer)
    finally:
        await rpc.close()
    reply = await pay(shop, value)
    assert reply.status_code == 200, reply.text
    assert shop.market.received() == PRICE
    stats = httpx.get(f"{dropping}/stats").json()
    assert stats["dropped"] >= 2 and stats["forwarded"] >= 1, stats  # seed 7: two drops first
