"""svcpay's client paying x402 servers, on the local validator: the `exact` payment it builds
(decoded instruction by instruction), `PaymentAuth` against a small x402 server that
settles for real (v2 and v1, `httpx.AsyncClient` and `httpx.Client`), the spending limits,
a server refusing the payment, and `build_payment()`'s price instruction."""

from __future__ import annotations

import base64
import struct
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import ExitStack, asynccontextmanager
from dataclasses import dataclass

import httpx
import pytest
from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Confirmed
from solders.keypair import Keypair
from solders.message import to_bytes_versioned
from solders.pubkey import Pubkey
from solders.signature import Signature
from solders.transaction import VersionedTransaction
from spl.token.constants import TOKEN_2022_PROGRAM_ID, TOKEN_PROGRAM_ID
from spl.token.instructions import (
    get_associated_token_address,
)
from starlette.applications import Starlette

from svcpay.client import (
    NoAcceptableOption,
    PaymentAuth,
    PaymentError,
    PaymentRefused,
    SpendingLimitExceeded,
    build_payment,
    settlement,
)
from svcpay.localnet.process import Localnet
from svcpay.protocol.models import PaymentOption
from svcpay.schemes.x402_exact import svm
from svcpay.schemes.x402_exact.client import (
    CannotPay,
    ExactSvmClient,
    payment_header,
    transfer_in,
)
from svcpay.schemes.x402_exact.wire import (
    PAYMENT_SIGNATURE,
    X_PAYMENT,
    PaymentPayload,
    PaymentPayloadV1,
    PaymentRequired,
    Requirements,
    ResourceInfo,
    caip2,
    decode_header,
)
from tests.cli.conftest import serve
from tests.support.billing import USDC
from tests.support.chain import Chain
from tests.support.facilitator import in_process_facilitator
from tests.support.x402_shop import Shop

PRICE = 250_000  # 0.25 of a 6-decimal mint


@dataclass
class Market:
    chain: Chain
    mint: Pubkey
    buyer: Keypair
    buyer_account: Pubkey
    seller: Pubkey  # the wallet x402's payTo names
    seller_account: Pubkey  # its associated token account
    fee_payer: Keypair

    def balances(self) -> tuple[int, int]:
        state = self.chain.token_state
        return state(self.buyer_account)["amount"], state(self.seller_account)["amount"]

    def requirements(self, **extra: object) -> Requirements:
        return Requirements(
            scheme="exact",
            network=caip2("solana-mainnet"),
            asset=str(self.mint),
            amount=str(PRICE),
            pay_to=str(self.seller),
            max_timeout_seconds=60,
            extra={"feePayer": str(self.fee_payer.pubkey()), **extra},
        )

    def shop(self, **options: object) -> Shop:
        return Shop(self.chain.url, self.fee_payer, self.mint, self.seller, PRICE, **options)  # type: ignore[arg-type]


@pytest.fixture
def market(chain: Chain) -> Market:
    buyer, seller, fee_payer = Keypair(), Keypair().pubkey(), chain.funded_keypair()
    mint = chain.create_mint()
    return Market(
        chain,
        mint,
        buyer,  # no SOL: the fee payer pays every fee
        chain.token_account(buyer.pubkey(), mint, 2 * USDC),
        seller,
        chain.token_account(seller, mint),
        fee_payer,
    )


@pytest.fixture
async def rpc(validator: Localnet) -> AsyncIterator[AsyncClient]:
    client = AsyncClient(validator.url, commitment=Confirmed)
    yield client
    await client.close()


@asynccontextmanager
async def _app(app: Starlette) -> AsyncIterator[Starlette]:
    yield app


@pytest.fixture
def serving() -> Iterator[Callable[[Shop], str]]:
    """`serving(shop)` -> the shop's base URL over real HTTP (for sync and async clients)."""
    with ExitStack() as stack:
        yield lambda shop: stack.enter_context(serve(lambda: _app(shop.app())))


# -- the payment built ---------------------------------------------------------------------
@pytest.mark.anyio
async def test_the_v2_payload_is_an_exact_transfer_signed_by_the_payer_only(
    market: Market, rpc: AsyncClient
) -> None:
    req = market.requirements(memo="order-42")
    required = PaymentRequired(resource=ResourceInfo(url="http://shop/paid"), accepts=[req])

    payload = await ExactSvmClient(market.buyer, rpc).payload(req, required)

    assert isinstance(payload, PaymentPayload)
    assert payload.accepted == req and payload.resource == required.resource
    name, value = payment_header(payload)
    assert name == PAYMENT_SIGNATURE and decode_header(PaymentPayload, value) == payload
    tx = VersionedTransaction.from_bytes(base64.b64decode(payload.payload.transaction))
    msg, keys = tx.message, list(tx.message.account_keys)
    assert keys[0] == market.fee_payer.pubkey() and msg.header.num_required_signatures == 2
    programs = [keys[ix.program_id_index] for ix in msg.instructions]
    datas = [bytes(ix.data) for ix in msg.instructions]
    assert programs == [svm.COMPUTE_BUDGET, svm.COMPUTE_BUDGET, TOKEN_PROGRAM_ID, svm.MEMO_PROGRAM]
    assert datas[0] == bytes([2]) + struct.pack("<I", 20_000)
    assert datas[1][0] == 3 and 1 <= struct.unpack_from("<Q", datas[1], 1)[0] <= 1_000
    assert datas[2] == bytes([12]) + struct.pack("<Q", PRICE) + bytes([6])
    transfer_accounts = [keys[i] for i in bytes(msg.instructions[2].accounts)]
    assert transfer_accounts == [
        market.buyer_account,  # ATA(buyer)
        market.mint,
        market.seller_account,  # ATA(payTo, asset), not payTo itself
        market.buyer.pubkey(),
    ]
    assert datas[3] == b"order-42"
    assert tx.signatures[0] == Signature.default()  # the fee payer's, for the facilitator
    payer_slot = keys.index(market.buyer.pubkey())
    assert tx.signatures[payer_slot].verify(market.buyer.pubkey(), to_bytes_versioned(msg))
    checked = svm.check_payment(
        tx,
        fee_payer=market.fee_payer.pubkey(),
        asset=str(market.mint),
        pay_to=str(market.seller),
        amount=PRICE,
        memo="order-42",
    )
    assert (checked.amount, checked.decimals, checked.memos) == (PRICE, 6, ("order-42",))
    paid = transfer_in(payload)
    assert (paid.amount, paid.destination, paid.authority) == (
        PRICE,
        market.seller_account,
        market.buyer.pubkey(),
    )


@pytest.mark.anyio
async def test_a_token_2022_mint_and_a_v1_payload_without_a_memo(
    market: Market, rpc: AsyncClient
) -> None:
    chain = market.chain
    mint = chain.create_mint(9, program_id=TOKEN_2022_PROGRAM_ID)
    chain.token_account(market.buyer.pubkey(), mint, 10**9, program_id=TOKEN_2022_PROGRAM_ID)
    shop = Shop(chain.url, market.fee_payer, mint, market.seller, 123, version=1, memo=None)
    req = shop.requirements_v1("http://shop/paid")
    client = ExactSvmClient(market.buyer, rpc)

    first, second = await client.payload(req), await client.payload(req)

    assert isinstance(first, PaymentPayloadV1)
    assert (first.x402_version, first.scheme, first.network) == (1, "exact", "solana")
    name, value = payment_header(first)
    assert name == X_PAYMENT and decode_header(PaymentPayloadV1, value) == first
    paid = transfer_in(first)
    assert paid.token_program == TOKEN_2022_PROGRAM_ID
    assert paid.destination == get_associated_token_address(
        market.seller, mint, TOKEN_2022_PROGRAM_ID
    )
    assert (paid.amount, paid.decimals, paid.mint) == (123, 9, mint)
    (memo,) = paid.memos
    assert len(memo) == 32 and int(memo, 16) >= 0  # 16 random bytes, hex
    assert transfer_in(second).memos != paid.memos  # so equal terms make distinct payments


@pytest.mark.anyio
async def test_terms_that_cannot_be_paid_are_refused_before_signing(
    market: Market, rpc: AsyncClient
) -> None:
    client = ExactSvmClient(market.buyer, rpc)
    req = market.requirements()
    cases = {
        "no fee payer": req.model_copy(update={"extra": {}}),
        "fee payer is the payer": market.requirements(feePayer=str(market.buyer.pubkey())),
        "unknown mint": req.model_copy(update={"asset": str(Pubkey.new_unique())}),
        "not a mint": req.model_copy(update={"asset": str(market.buyer_account)}),
        "memo too long": market.requirements(memo="m" * 257),
        "other scheme": req.model_copy(update={"scheme": "upto"}),
    }
    for what, bad in cases.items():
        with pytest.raises(CannotPay):
            await client.transaction(bad)
            pytest.fail(what)


# -- PaymentAuth against an x402 server ----------------------------------------------------
def auth_for(market: Market, rpc: AsyncClient, **limits: object) -> PaymentAuth:
    limits.setdefault("max_per_request", USDC)
    return PaymentAuth(market.buyer, rpc=rpc, **limits)  # type: ignore[arg-type]


@pytest.mark.parametrize("version", [2, 1])
@pytest.mark.anyio
async def test_payment_auth_pays_an_x402_server_with_an_async_client(
    market: Market, rpc: AsyncClient, serving: Callable[[Shop], str], version: int
) -> None:
    shop = market.shop(version=version)
    url = serving(shop)
    before = market.balances()

    async with httpx.AsyncClient(auth=auth_for(market, rpc), timeout=60) as http:
        reply = await http.get(f"{url}/paid")

    assert (reply.status_code, reply.json()) == (200, {"answer": "paid content"}), reply.text
    receipt = settlement(reply)
    assert receipt is not None and receipt.success and receipt.transaction == shop.settled[0]
    assert receipt.payer == str(market.buyer.pubkey())
    sent = reply.request.headers
    assert (PAYMENT_SIGNATURE in sent) == (version == 2) and (X_PAYMENT in sent) == (version == 1)
    assert market.balances() == (before[0] - PRICE, before[1] + PRICE)  # a real transfer
    assert market.chain.balance(market.buyer.pubkey()) == 0  # the fee payer paid the fee


@pytest.mark.parametrize("version", [2, 1])
def test_payment_auth_pays_an_x402_server_with_a_sync_client(
    market: Market, validator: Localnet, serving: Callable[[Shop], str], version: int
) -> None:
    shop = market.shop(version=version)
    url = serving(shop)
    before = market.balances()
    rpc = AsyncClient(validator.url, commitment=Confirmed)  # used on the auth's own loop
    auth = auth_for(market, rpc, max_per_period=PRICE)
    try:
        with httpx.Client(auth=auth, timeout=60) as http:
            reply = http.get(f"{url}/paid")
            receipt = settlement(reply)
            assert reply.status_code == 200 and receipt is not None and receipt.success
            with pytest.raises(SpendingLimitExceeded):  # the period's budget is spent
                http.get(f"{url}/paid")
    finally:
        auth.run(rpc.close())
        auth.close()
    assert shop.settled == [receipt.transaction]
    assert market.balances() == (before[0] - PRICE, before[1] + PRICE)


@pytest.mark.anyio
async def test_limits_refuse_before_anything_is_signed_or_sent(
    market: Market, rpc: AsyncClient, serving: Callable[[Shop], str]
) -> None:
    shop = market.shop()
    url = f"{serving(shop)}/paid"
    before = market.balances()
    refusals = {
        SpendingLimitExceeded: auth_for(market, rpc, max_per_request=PRICE - 1),
        NoAcceptableOption: auth_for(market, rpc, allowed_tokens={str(Pubkey.new_unique())}),
    }
    for error, auth in refusals.items():
        async with httpx.AsyncClient(auth=auth, timeout=60) as http:
            with pytest.raises(error):
                await http.get(url)
    with pytest.raises(NoAcceptableOption, match="solana-devnet"):  # the shop sells on mainnet
        async with httpx.AsyncClient(timeout=60) as http:
            await http.get(url, auth=auth_for(market, rpc, networks=["solana-devnet"]))
    assert shop.payments == 0 and market.balances() == before

    exactly = auth_for(market, rpc, max_per_request=PRICE, allowed_tokens={str(market.mint)})
    async with httpx.AsyncClient(auth=exactly, timeout=60) as http:
        assert (await http.get(url)).status_code == 200


@pytest.mark.anyio
async def test_a_402_to_the_paid_request_raises_with_the_servers_reason(
    market: Market, rpc: AsyncClient, serving: Callable[[Shop], str]
) -> None:
    shop = market.shop(refuse="invalid_exact_svm_payload_amount_insufficient")
    url = f"{serving(shop)}/paid"
    before = market.balances()

    async with httpx.AsyncClient(auth=auth_for(market, rpc), timeout=60) as http:
        with pytest.raises(PaymentRefused) as refused:
            await http.get(url)

    assert isinstance(refused.value, PaymentError)
    assert refused.value.reason == "invalid_exact_svm_payload_amount_insufficient"
    assert shop.payments == 1 and market.balances() == before


@pytest.mark.anyio
async def test_a_402_that_is_neither_svcpay_nor_x402_comes_back_unchanged(
    rpc: AsyncClient, market: Market
) -> None:
    def other(request: httpx.Request) -> httpx.Response:
        return httpx.Response(402, json={"pay": "somehow"})

    async with httpx.AsyncClient(transport=httpx.MockTransport(other)) as http:
        reply = await http.get("http://elsewhere/", auth=auth_for(market, rpc))
    assert reply.status_code == 402 and settlement(reply) is None


# -- svcpay's own payment, as x402 facilitators want it --------------------------------------
@pytest.mark.anyio
async def test_build_payment_sets_a_price_and_svcpay_still_settles_it(
    market: Market, validator: Localnet
) -> None:
    option = PaymentOption(
        scheme="exact",
        network="solana-mainnet",
        token=str(market.mint),
        amount=str(PRICE),
        pay_to=str(market.seller_account),
        memo="svcpay-memo",
    )
    before = market.balances()
    async with in_process_facilitator(
        validator.url, market.fee_payer, pay_to=[market.seller_account]
    ) as facilitator:
        raw = await build_payment(facilitator.rpc, market.buyer, option, market.fee_payer.pubkey())
        tx = VersionedTransaction.from_bytes(raw)
        # x402's layout: an x402 facilitator (svcpay's rules for it here) accepts it too
        checked = svm.check_payment(
            tx,
            fee_payer=market.fee_payer.pubkey(),
            asset=str(market.mint),
            pay_to=str(market.seller),  # the owner of the token account paid
            amount=PRICE,
            memo="svcpay-memo",
        )
        assert checked.compute_unit_price >= 1

        reply = await facilitator.http.post(
            "/authorize",
            json={
                "signedPayment": base64.b64encode(raw).decode(),
                "paymentRequirements": option.to_json_dict(),
            },
        )

    assert reply.status_code == 200, reply.text
    assert market.balances() == (before[0] - PRICE, before[1] + PRICE)


@pytest.mark.anyio
async def test_payment_auth_pays_in_a_token_2022_mint(
    market: Market, rpc: AsyncClient, serving: Callable[[Shop], str]
) -> None:
    chain = market.chain
    mint = chain.create_mint(9, program_id=TOKEN_2022_PROGRAM_ID)
    buyer_account = chain.token_account(
        market.buyer.pubkey(), mint, 10**9, program_id=TOKEN_2022_PROGRAM_ID
    )
    seller_account = chain.token_account(market.seller, mint, program_id=TOKEN_2022_PROGRAM_ID)
    shop = Shop(chain.url, market.fee_payer, mint, market.seller, 10**8)
    url = serving(shop)

    async with httpx.AsyncClient(auth=auth_for(market, rpc, max_per_request=10**8)) as http:
        reply = await http.get(f"{url}/paid", timeout=60)

    assert reply.status_code == 200, reply.text
    state = chain.token_state
    assert (state(buyer_account)["amount"], state(seller_account)["amount"]) == (9 * 10**8, 10**8)


@pytest.mark.anyio
async def test_terms_it_cannot_pay_raise_and_spend_nothing_of_the_budget(
    market: Market, rpc: AsyncClient, serving: Callable[[Shop], str]
) -> None:
    # A server naming the buyer itself as fee payer would have it sign the whole transaction.
    rogue = Shop(market.chain.url, market.buyer, market.mint, market.seller, PRICE)
    honest = market.shop()
    auth = auth_for(market, rpc, max_per_period=PRICE)
    before = market.balances()

    async with httpx.AsyncClient(auth=auth, timeout=60) as http:
        with pytest.raises(PaymentError, match="cannot pay the server's x402 terms"):
            await http.get(f"{serving(rogue)}/paid")
        assert rogue.payments == 0 and market.balances() == before
        assert (await http.get(f"{serving(honest)}/paid")).status_code == 200  # budget intact
