"""One-time payments in a Token-2022 mint with a transfer fee (issue 25, docs/adr/0031), end to
end on the local validator: a gate priced in a mint that withholds 1.5% of every transfer (at
most 0.01), `PaymentAuth` paying it with each protocol (svcpay's proof through the
facilitator's /authorize, x402 settled by the facilitator's /settle, MPP's pulled charge),
the provider receiving exactly the price and the mint's fee withheld beside it; the same
with a transfer hook (the workspace's test hook) on the mint; and a payment of the price
itself, which leaves the provider less than the price, refused with the reason by the
facilitator and by the gate's own check. An SPL Token mint's payment reads no mint at the
gate or the facilitator; a gate priced in a Token-2022 mint needs a reader."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx
import pytest
from solders.hash import Hash
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from svcpay.client import PaymentAuth, SpendingLimitExceeded, build_payment, settlement
from svcpay.gate import OneTime, PaymentGate, payment_gate
from svcpay.gate.chain import ChainMints
from svcpay.gate.pricing import Terms
from svcpay.localnet.process import Localnet
from svcpay.protocol import token2022 as t22
from svcpay.protocol.memo import Memos
from svcpay.protocol.mints import MintUnavailable
from svcpay.protocol.models import PaymentRequired
from svcpay.protocol.programs import TOKEN_2022_PROGRAM
from svcpay.protocol.proof import PaymentProof
from svcpay.protocol.replay import MemoryReplayStore
from svcpay.schemes.mpp_charge.facilitator_client import ChargeFacilitatorClient
from svcpay.schemes.x402_exact import svm
from svcpay.schemes.x402_exact.client import payment_header, refusal_reason
from svcpay.schemes.x402_exact.facilitator_client import X402FacilitatorClient
from svcpay.schemes.x402_exact.wire import (
    PaymentPayload,
    Reason,
    Requirements,
    SvmPayload,
    decode_json,
    parse,
)
from tests.support.billing import USDC
from tests.support.chain import Chain
from tests.support.facilitator import FACILITATOR_URL, InProcessFacilitator, in_process_facilitator
from tests.support.token2022 import HOOK, hook_transfers, t22_mint
from tests.support.x402_tx import ExactPayment

pytestmark = pytest.mark.anyio
PRICE = 3 * USDC // 10  # 0.3
FEE = (150, USDC // 100)  # 1.5%, at most 0.01
PROTOCOLS = ("svcpay", "x402", "mpp")


@dataclass
class World:
    chain: Chain
    mint: Pubkey
    owner: Keypair  # the provider's wallet
    destination: Pubkey  # its associated token account (Token-2022)
    wallet: Keypair
    wallet_token: Pubkey
    fac: InProcessFacilitator
    provider_id: str
    api: httpx.AsyncClient
    handled: list[str]
    gate: PaymentGate

    def auth(self, protocol: str, **limits: int) -> PaymentAuth:
        limits.setdefault("max_per_request", USDC)
        return PaymentAuth(
            self.wallet,
            rpc=self.fac.rpc,
            facilitator=self.fac.http,
            protocols=(protocol,),
            **limits,  # type: ignore[arg-type]
        )

    def account(self, address: Pubkey) -> t22.TokenAccountInfo:
        found = self.chain.account(address)
        assert found is not None
        return t22.token_account_info(found.owner, found.data)

    def mint_now(self) -> t22.MintAtEpoch:
        found = self.chain.account(self.mint)
        assert found is not None
        epoch = int(self.chain.rpc("getEpochInfo")["epoch"])
        return t22.mint_info(found.owner, found.data).at(epoch)

    async def settled(self) -> list[dict[str, object]]:
        found = await self.fac.service.store.events.read(self.provider_id)
        return [e.data for e in found if e.type == "payment.settled"]


async def _data(request: Request) -> JSONResponse:
    handled: list[str] = request.app.state.handled
    handled.append(request.url.path)
    return JSONResponse({"data": 42})


@pytest.fixture(params=["fee", "fee+hook"])
async def world(
    request: pytest.FixtureRequest, validator: Localnet, chain: Chain
) -> AsyncIterator[World]:
    hooked = request.param == "fee+hook"
    mint = t22_mint(chain, transfer_fee=FEE, **({"transfer_hook": HOOK} if hooked else {}))
    owner, wallet = Keypair(), chain.funded_keypair()
    destination = chain.token_account(owner.pubkey(), mint, program_id=TOKEN_2022_PROGRAM)
    wallet_token = chain.token_account(
        wallet.pubkey(), mint, 2 * USDC, program_id=TOKEN_2022_PROGRAM
    )
    async with in_process_facilitator(validator.url, chain.funded_keypair()) as fac:
        store = fac.service.store
        provider_id = await store.providers.create("fee-mint provider")
        await store.providers.add_resource(provider_id, "payTo", str(destination))
        app = Starlette(routes=[Route("/v1/data", _data)])
        app.state.handled = handled = []
        gate = payment_gate(
            app,
            pricing={"/v1/data": [OneTime(PRICE)]},
            terms=Terms(
                pay_to=str(destination),
                token=str(mint),
                owner=str(owner.pubkey()),
                fee_payer=fac.key,
            ),
            memos=Memos(b"fee-mint-memo-secret-0123456"),
            trusted_facilitators={fac.key},
            replay=MemoryReplayStore(),
            x402_facilitator=X402FacilitatorClient(FACILITATOR_URL, http=fac.http),
            mpp_facilitator=ChargeFacilitatorClient(FACILITATOR_URL, http=fac.http),
            mints=ChainMints(fac.rpc),
        )
        transport = httpx.ASGITransport(app=gate)
        async with httpx.AsyncClient(transport=transport, base_url="http://api") as api:
            yield World(
                chain, mint, owner, destination, wallet, wallet_token, fac, provider_id, api,
                handled, gate,
            )  # fmt: skip


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_the_provider_receives_exactly_the_price_and_the_mint_withholds_its_fee(
    world: World, protocol: str
) -> None:
    now = world.mint_now()
    gross = now.gross_for_net(PRICE)
    fee = now.fee_for(gross)
    assert (gross - fee, fee) == (PRICE, 4_569)
    hooked_before = hook_transfers(world.chain, world.mint) if now.hook_program else 0

    reply = await world.api.get("/v1/data", auth=world.auth(protocol))

    assert (reply.status_code, reply.json()) == (200, {"data": 42}), reply.text
    received = world.account(world.destination)
    assert (received.amount, received.withheld_amount) == (PRICE, fee)
    assert world.account(world.wallet_token).amount == 2 * USDC - gross
    if now.hook_program:  # the hook ran: its accounts were in the transfer
        assert hook_transfers(world.chain, world.mint) == hooked_before + 1
    [event] = await world.settled()
    assert (event["amount"], event["fee"], event["net"]) == (str(gross), str(fee), str(PRICE))
    if protocol == "x402":  # x402's own field says what the payer sent
        answer = settlement(reply)
        assert answer is not None and answer.amount == str(gross)


async def test_a_svcpay_proof_says_what_pay_to_received_and_what_was_withheld(
    world: World,
) -> None:
    now = world.mint_now()
    gross = now.gross_for_net(PRICE)
    sent: list[str] = []

    async def keep(request: httpx.Request) -> None:
        if "x-payment" in request.headers:
            sent.append(request.headers["x-payment"])

    world.api.event_hooks["request"].append(keep)
    assert (await world.api.get("/v1/data", auth=world.auth("svcpay"))).status_code == 200
    proof = PaymentProof.model_validate_json(base64.b64decode(sent[-1]))
    assert proof.amount == str(PRICE) and proof.signature_valid()
    assert proof.model_extra == {"gross": str(gross), "fee": str(now.fee_for(gross))}


async def test_the_spending_limits_count_what_the_wallet_sends(world: World) -> None:
    for protocol in PROTOCOLS:  # the price fits the limit; the gross that nets it does not
        with pytest.raises(SpendingLimitExceeded):
            await world.api.get("/v1/data", auth=world.auth(protocol, max_per_request=PRICE))
    assert world.account(world.destination).amount == 0


# -- a payment of the price itself: the provider would get less ------------------------
def underpaying(world: World, memo: str, **layout: object) -> ExactPayment:
    """The wallet's transfer of exactly PRICE, as a client unaware of the fee builds it."""
    return ExactPayment(
        payer=world.wallet,
        fee_payer=world.fac.fee_payer.pubkey(),
        mint=world.mint,
        pay_to=world.owner.pubkey(),
        amount=PRICE,
        blockhash=Hash.from_string(world.chain.rpc("getLatestBlockhash")["value"]["blockhash"]),
        memo=memo,
        program=TOKEN_2022_PROGRAM,
    ).but(**layout)


async def test_svcpay_authorize_refuses_a_payment_that_nets_less_than_the_price(
    world: World,
) -> None:
    option = PaymentRequired.parse((await world.api.get("/v1/data")).content).accepts[0]
    tx = underpaying(world, option.memo or "", limit=50_000, destination=world.destination)
    reply = await world.fac.http.post(
        "/authorize",
        json={"signedPayment": tx.base64(), "paymentRequirements": option.to_json_dict()},
    )
    assert reply.status_code == 400, reply.text
    assert reply.json()["error"] == "TermsMismatch"
    assert reply.json()["message"] == (
        "the transfer's amount is 300000, of which the mint's transfer fee withholds 4500: "
        "295500 arrives, short of 300000 (send 304569)"
    )
    assert world.account(world.destination).amount == 0


async def test_x402_refuses_a_payment_netting_less_than_the_price_at_gate_and_facilitator(
    world: World,
) -> None:
    required = decode_json((await world.api.get("/v1/data")).headers["PAYMENT-REQUIRED"])
    accepted = parse(Requirements, required["accepts"][0])
    tx = underpaying(world, accepted.memo or "")
    payload = PaymentPayload(
        accepted=accepted,
        resource=None,
        payload=SvmPayload(transaction=tx.base64()),
    )
    name, value = payment_header(payload)

    reply = await world.api.get("/v1/data", headers={name: value})

    assert reply.status_code == 402 and world.handled == []
    assert refusal_reason(reply) == (
        "invalid_exact_svm_payload_amount_insufficient: InvalidPayment: the transfer pays "
        "300000, of which the mint's transfer fee withholds 4500: 295500 arrives, short of "
        "300000 (send 304569)"
    )
    assert world.account(world.destination).amount == 0
    # The facilitator's own check says the same, whoever asks it.
    body = {
        "x402Version": 2,
        "paymentPayload": payload.to_json_dict(),
        "paymentRequirements": accepted.to_json_dict(),
    }
    verdict = (await world.fac.http.post("/verify", json=body)).json()
    assert (verdict["isValid"], verdict["invalidReason"]) == (False, Reason.AMOUNT_INSUFFICIENT)
    assert "4500: 295500 arrives" in verdict["invalidMessage"]


# -- a mint the RPC node cannot read --------------------------------------------------------
class Unreadable:
    """A MintReader whose RPC node is away."""

    async def at_epoch(self, mint: Pubkey) -> t22.MintAtEpoch:
        raise MintUnavailable("the RPC node is unreachable (ConnectError)")


async def test_a_mint_that_cannot_be_read_is_a_503_with_retry_after_never_a_refusal(
    world: World,
) -> None:
    """Whether a fee mint's payment pays the price is the chain's to say: without it the
    gate and the facilitator answer 503 (retry), and nothing is sent or claimed."""
    option = PaymentRequired.parse((await world.api.get("/v1/data")).content).accepts[0]
    world.fac.service.settler.mints = Unreadable()
    paid = await build_payment(world.fac.rpc, world.wallet, option, world.fac.fee_payer.pubkey())
    body = {
        "signedPayment": base64.b64encode(paid).decode(),
        "paymentRequirements": option.to_json_dict(),
    }
    reply = await world.fac.http.post("/authorize", json=body)
    assert (reply.status_code, reply.json()["error"]) == (503, "RpcUnavailable"), reply.text

    assert world.gate.core.x402 is not None and world.gate.core.charge is not None
    world.gate.core.x402.mints = world.gate.core.charge.mints = Unreadable()
    for protocol in ("x402", "mpp"):
        reply = await world.api.get("/v1/data", auth=world.auth(protocol))
        assert (reply.status_code, reply.headers.get("retry-after")) == (503, "5"), reply.text
        assert "cannot be read" in reply.json()["message"]
    assert world.handled == [] and world.account(world.destination).amount == 0


# -- an SPL Token mint costs no read ------------------------------------------------------
class NoReads:
    """A MintReader that fails the test if anything asks it."""

    asked: list[Pubkey]

    def __init__(self) -> None:
        self.asked = []

    async def at_epoch(self, mint: Pubkey) -> t22.MintAtEpoch:
        self.asked.append(mint)
        raise AssertionError(f"{mint} was read: an SPL Token payment needs no mint read")


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_an_spl_token_payment_reads_no_mint_at_the_gate_or_the_facilitator(
    validator: Localnet, chain: Chain, protocol: str
) -> None:
    mint = chain.create_mint()
    owner, wallet = Keypair(), chain.funded_keypair()
    destination = chain.token_account(owner.pubkey(), mint)
    chain.token_account(wallet.pubkey(), mint, USDC)
    gate_reads, facilitator_reads = NoReads(), NoReads()
    async with in_process_facilitator(
        validator.url, chain.funded_keypair(), pay_to=[destination]
    ) as fac:
        fac.service.settler.mints = facilitator_reads
        app = Starlette(routes=[Route("/v1/data", _data)])
        app.state.handled = []
        gate = payment_gate(
            app,
            pricing={"/v1/data": [OneTime(PRICE)]},
            terms=Terms(str(destination), str(mint), owner=str(owner.pubkey()), fee_payer=fac.key),
            memos=Memos(b"spl-mint-memo-secret-0123456"),
            trusted_facilitators={fac.key},
            replay=MemoryReplayStore(),
            x402_facilitator=X402FacilitatorClient(FACILITATOR_URL, http=fac.http),
            mpp_facilitator=ChargeFacilitatorClient(FACILITATOR_URL, http=fac.http),
            mints=gate_reads,
        )
        auth = PaymentAuth(
            wallet, rpc=fac.rpc, facilitator=fac.http, protocols=(protocol,), max_per_request=USDC
        )
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=gate), base_url="http://api"
        ) as api:
            assert (await api.get("/v1/data", auth=auth)).status_code == 200
    assert chain.token_state(destination)["amount"] == PRICE
    assert gate_reads.asked == facilitator_reads.asked == []


def test_a_gate_priced_in_a_token_2022_mint_needs_a_mint_reader(chain: Chain) -> None:
    mint = t22_mint(chain, transfer_fee=FEE)
    owner = Keypair().pubkey()
    pay_to = svm.associated_token_address(owner, mint, TOKEN_2022_PROGRAM)
    terms = Terms(str(pay_to), str(mint), owner=str(owner), fee_payer=str(Keypair().pubkey()))
    with pytest.raises(ValueError, match="Token-2022 mint: x402 needs `mints`"):
        payment_gate(
            Starlette(),
            pricing={"/v1/data": [OneTime(PRICE)]},
            terms=terms,
            memos=Memos(b"t22-gate-memo-secret-0123456"),
            trusted_facilitators=set(),
            replay=MemoryReplayStore(),
            x402_facilitator=X402FacilitatorClient(FACILITATOR_URL),
        )
