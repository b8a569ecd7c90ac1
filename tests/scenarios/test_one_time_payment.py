"""One-time payment end to end: gate -> 402 -> client signs a transfer -> facilitator settles
on the local validator and signs a proof -> client retries with X-PAYMENT -> 200."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import httpx
import pytest
from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Confirmed
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from solders.transaction import VersionedTransaction
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from svcpay.client import (
    InsufficientFunds,
    InvalidPaymentProof,
    PaymentAuth,
    SpendingLimitExceeded,
    build_payment,
)
from svcpay.gate import OneTime, payment_gate
from svcpay.gate.pricing import Terms
from svcpay.localnet.process import Localnet
from svcpay.protocol.memo import Memos
from svcpay.protocol.models import PaymentRequired
from svcpay.protocol.programs import MEMO_PROGRAM
from svcpay.protocol.replay import MemoryReplayStore
from tests.support.billing import USDC
from tests.support.chain import Chain
from tests.support.facilitator import in_process_facilitator

pytestmark = pytest.mark.anyio
PRICE = USDC // 2


@dataclass
class World:
    chain: Chain
    rpc: AsyncClient
    facilitator: httpx.AsyncClient
    api: httpx.AsyncClient
    wallet: Keypair
    wallet_token: object
    destination: object
    fee_payer: Keypair
    gate: ASGIApp

    def auth(self, **limits: int) -> PaymentAuth:
        limits.setdefault("max_per_request", USDC)
        return PaymentAuth(self.wallet, rpc=self.rpc, facilitator=self.facilitator, **limits)  # type: ignore[arg-type]


@pytest.fixture
async def world(validator: Localnet, chain: Chain) -> AsyncIterator[World]:
    provider, fee_payer, wallet = (
        chain.funded_keypair(),
        chain.funded_keypair(),
        chain.funded_keypair(),
    )
    mint = chain.create_mint()
    destination = chain.token_account(provider.pubkey(), mint)
    wallet_token = chain.token_account(wallet.pubkey(), mint, 2 * USDC)

    async def data(request: Request) -> JSONResponse:
        return JSONResponse({"data": 42})

    gate = payment_gate(
        Starlette(routes=[Route("/v1/data", data)]),
        pricing={"/v1/data": [OneTime(PRICE)]},
        terms=Terms(pay_to=str(destination), token=str(mint)),
        memos=Memos(b"e2e-memo-secret-0123456789"),
        trusted_facilitators={str(fee_payer.pubkey())},
        replay=MemoryReplayStore(),
    )
    async with (
        in_process_facilitator(validator.url, fee_payer, pay_to=[destination]) as facilitator,
        httpx.AsyncClient(transport=httpx.ASGITransport(app=gate), base_url="http://api") as api,
    ):
        rpc = facilitator.rpc
        yield World(
            chain, rpc, facilitator.http, api, wallet, wallet_token, destination, fee_payer, gate
        )


async def test_the_client_pays_once_and_is_served(world: World) -> None:
    chain = world.chain
    sol_before = chain.balance(world.wallet.pubkey())
    assert sol_before > 0

    reply = await world.api.get("/v1/data", auth=world.auth())

    assert (reply.status_code, reply.json()) == (200, {"data": 42})
    assert chain.token_state(world.wallet_token)["amount"] == 2 * USDC - PRICE  # type: ignore[arg-type]
    assert chain.token_state(world.destination)["amount"] == PRICE  # type: ignore[arg-type]
    assert chain.balance(world.wallet.pubkey()) == sol_before  # the facilitator paid the fee


async def signed_payment(world: World) -> dict[str, object]:
    """An /authorize body: the wallet's signed transfer for fresh terms of /v1/data."""
    option = PaymentRequired.parse((await world.api.get("/v1/data")).content).accepts[0]
    tx = await build_payment(world.rpc, world.wallet, option, world.fee_payer.pubkey())
    return {
        "signedPayment": base64.b64encode(tx).decode(),
        "paymentRequirements": option.to_json_dict(),
    }


async def test_the_same_signed_payment_twice_settles_once(world: World) -> None:
    body = await signed_payment(world)
    first, second = (
        await world.facilitator.post("/authorize", json=body),
        await world.facilitator.post("/authorize", json=body),
    )
    assert first.status_code == second.status_code == 200
    assert first.json() == second.json()
    assert world.chain.token_state(world.destination)["amount"] == PRICE  # type: ignore[arg-type]


async def test_spending_limits_stop_the_payment_before_money_moves(world: World) -> None:
    with pytest.raises(SpendingLimitExceeded):
        await world.api.get("/v1/data", auth=world.auth(max_per_request=PRICE - 1))
    auth = world.auth(max_per_period=PRICE)
    assert (await world.api.get("/v1/data", auth=auth)).status_code == 200
    with pytest.raises(SpendingLimitExceeded):
        await world.api.get("/v1/data", auth=auth)
    assert world.chain.token_state(world.destination)["amount"] == PRICE  # type: ignore[arg-type]


async def test_insufficient_funds_is_reported_as_such(world: World) -> None:
    poor = world.chain.funded_keypair()
    mint = world.chain.token_state(world.wallet_token)["mint"]  # type: ignore[arg-type]
    world.chain.token_account(poor.pubkey(), mint, PRICE - 1)
    auth = PaymentAuth(poor, rpc=world.rpc, facilitator=world.facilitator, max_per_request=USDC)
    with pytest.raises(InsufficientFunds):
        await world.api.get("/v1/data", auth=auth)


async def test_the_facilitator_refuses_what_it_should_not_sign(world: World) -> None:
    terms = PaymentRequired.parse((await world.api.get("/v1/data")).content)
    option = terms.accepts[0]
    tx = await build_payment(world.rpc, world.wallet, option, world.fee_payer.pubkey())
    cheaper = option.model_copy(update={"amount": str(PRICE - 1)})
    cases = [
        (
            {
                "signedPayment": base64.b64encode(tx).decode(),
                "paymentRequirements": cheaper.to_json_dict(),
            },
            "TermsMismatch",
        ),
        (
            {"signedPayment": "not base64!", "paymentRequirements": option.to_json_dict()},
            "InvalidRequest",
        ),
        (
            {
                "signedPayment": base64.b64encode(b"junk").decode(),
                "paymentRequirements": option.to_json_dict(),
            },
            "InvalidTransaction",
        ),
        ({"paymentRequirements": option.to_json_dict()}, "InvalidRequest"),
        (
            {
                "signedPayment": base64.b64encode(tx).decode(),
                "paymentRequirements": {"amount": "1"},
            },
            "InvalidRequest",
        ),
    ]
    for body, name in cases:
        reply = await world.facilitator.post("/authorize", json=body)
        assert 400 <= reply.status_code < 500 and reply.json()["error"] == name, reply.text
    other_fee_payer = Keypair().pubkey()
    foreign = await build_payment(world.rpc, world.wallet, option, other_fee_payer)
    body = {
        "signedPayment": base64.b64encode(foreign).decode(),
        "paymentRequirements": option.to_json_dict(),
    }
    assert (await world.facilitator.post("/authorize", json=body)).json()[
        "error"
    ] == "InvalidTransaction"
    assert (await world.facilitator.post("/authorize", content=b"{{")).status_code == 400
    assert world.chain.token_state(world.destination)["amount"] == 0  # type: ignore[arg-type]


async def test_the_facilitator_verifies_its_proofs_and_the_gate_can_ask_it(world: World) -> None:
    from svcpay.protocol.proof import PaymentProof
    from svcpay.protocol.verify import FacilitatorVerifier

    body = await signed_payment(world)
    proof = PaymentProof.model_validate(
        (await world.facilitator.post("/authorize", json=body)).json()
    )

    verifier = FacilitatorVerifier(world.facilitator)
    assert await verifier.check(proof) is None
    forged = proof.model_copy(update={"amount": str(PRICE * 10)})
    assert await verifier.check(forged) == "the proof was not signed by this facilitator"
    unsettled = proof.model_copy(update={"transaction": str(Keypair().sign_message(b"never sent"))})
    assert (
        await verifier.check(unsettled.signed_by(world.fee_payer))
        == "the proof's transaction did not succeed on chain"
    )
    bad = await world.facilitator.post("/verify", json={"proof": {"amount": "x"}})
    assert bad.status_code == 400 and bad.json()["error"] == "InvalidRequest"


async def test_a_gate_verifying_through_the_facilitator_serves_the_payer(world: World) -> None:
    from svcpay.protocol.verify import FacilitatorVerifier

    async def data(request: Request) -> JSONResponse:
        return JSONResponse({"verified": "remotely"})

    mint = world.chain.token_state(world.wallet_token)["mint"]  # type: ignore[arg-type]
    gate = payment_gate(
        Starlette(routes=[Route("/v1/data", data)]),
        pricing={"/v1/data": [OneTime(PRICE)]},
        terms=Terms(pay_to=str(world.destination), token=str(mint)),
        memos=Memos(b"remote-memo-secret-0123456789"),
        trusted_facilitators={str(world.fee_payer.pubkey())},
        replay=MemoryReplayStore(),
        remote=FacilitatorVerifier(world.facilitator),
    )
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=gate), base_url="http://api"
    ) as api:
        reply = await api.get("/v1/data", auth=world.auth())
    assert (reply.status_code, reply.json()) == (200, {"verified": "remotely"})


def flaky(gate: ASGIApp, rejections: int) -> tuple[ASGIApp, list[int]]:
    """`gate`, but the first `rejections` requests carrying a proof get 402
    InvalidPaymentProof (as from a gate whose replay store was briefly unreachable)."""
    seen: list[int] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and any(k == b"x-payment" for k, _ in scope["headers"]):
            seen.append(1)
            if len(seen) <= rejections:
                body = {"version": "1", "accepts": [], "error": "InvalidPaymentProof",
                        "message": "try again"}  # fmt: skip
                await JSONResponse(body, 402)(scope, receive, send)
                return
        await gate(scope, receive, send)

    return app, seen


async def test_a_transiently_rejected_proof_is_retried_without_paying_again(
    world: World,
) -> None:
    app, seen = flaky(world.gate, rejections=2)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://api"
    ) as api:
        reply = await api.get("/v1/data", auth=world.auth())
    assert reply.status_code == 200 and len(seen) == 3  # two rejections, then served
    assert world.chain.token_state(world.destination)["amount"] == PRICE  # type: ignore[arg-type]


async def test_a_proof_rejected_every_time_raises_after_bounded_retries(world: World) -> None:
    app, seen = flaky(world.gate, rejections=100)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://api"
    ) as api:
        with pytest.raises(InvalidPaymentProof, match="try again"):
            await api.get("/v1/data", auth=world.auth())
    assert len(seen) == 3  # the first try and two retries
    assert world.chain.token_state(world.destination)["amount"] == PRICE  # type: ignore[arg-type]


def resign(tx: bytes, owner: Keypair, ixs_edit: object, extra_signer: Keypair | None = None) -> str:
    """`tx`'s instructions edited by `ixs_edit` (a function of the list), recompiled under the
    same fee payer and blockhash and signed by the owner (and `extra_signer`): base64."""
    from solders.instruction import AccountMeta, Instruction
    from solders.message import MessageV0, to_bytes_versioned
    from solders.signature import Signature

    original = VersionedTransaction.from_bytes(tx).message
    keys = list(original.account_keys)
    ixs = [
        Instruction(
            keys[ix.program_id_index],
            bytes(ix.data),
            [
                AccountMeta(keys[i], original.is_signer(i), original.is_maybe_writable(i))
                for i in bytes(ix.accounts)
            ],
        )
        for ix in original.instructions
    ]
    ixs = ixs_edit(ixs)  # type: ignore[operator]
    if extra_signer is not None:  # a throwaway signer the facilitator would pay for
        ixs.append(
            Instruction(MEMO_PROGRAM, b"x", [AccountMeta(extra_signer.pubkey(), True, False)])
        )
    message = MessageV0.try_compile(keys[0], ixs, [], original.recent_blockhash)
    signers = [owner] + ([extra_signer] if extra_signer else [])
    sigs = [Signature.default()] + [k.sign_message(to_bytes_versioned(message)) for k in signers]
    return base64.b64encode(bytes(VersionedTransaction.populate(message, sigs))).decode()


async def test_the_facilitator_pays_fees_only_within_its_limits(world: World) -> None:
    option = PaymentRequired.parse((await world.api.get("/v1/data")).content).accepts[0]
    tx = await build_payment(world.rpc, world.wallet, option, world.fee_payer.pubkey())
    terms = option.to_json_dict()

    async def refused(signed: str, requirements: dict[str, object] = terms) -> tuple[int, str]:
        reply = await world.facilitator.post(
            "/authorize", json={"signedPayment": signed, "paymentRequirements": requirements}
        )
        return reply.status_code, f"{reply.json()['error']}: {reply.json()['message']}"

    no_limit = resign(tx, world.wallet, lambda ixs: ixs[1:])
    assert (await refused(no_limit))[1].startswith("InvalidTransaction: need exactly one SetComp")
    extra = resign(tx, world.wallet, lambda ixs: ixs, extra_signer=Keypair())
    assert (await refused(extra))[1].startswith("InvalidTransaction: exactly two signers")
    nobody = world.chain.token_account(Keypair().pubkey(), Pubkey.from_string(option.token))
    elsewhere = option.model_copy(update={"pay_to": str(nobody)})
    unregistered = await build_payment(world.rpc, world.wallet, elsewhere, world.fee_payer.pubkey())
    status, why = await refused(base64.b64encode(unregistered).decode(), elsewhere.to_json_dict())
    assert status == 403 and why.startswith("UnknownPayTo")
    assert world.chain.token_state(world.destination)["amount"] == 0  # type: ignore[arg-type]


FirstAnswer = Callable[[bytes], Awaitable[JSONResponse]]


async def paid_through_a_front(world: World, first: FirstAnswer) -> list[bytes]:
    """Pays GET /v1/data through a facilitator front that answers the first `/authorize`
    with `first(body)` and forwards everything else; the bodies `/authorize` received."""
    bodies: list[bytes] = []

    async def front(scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        body = await request.body()
        if request.url.path == "/authorize":
            bodies.append(body)
            if len(bodies) == 1:
                await (await first(body))(scope, receive, send)
                return
        reply = await world.facilitator.request(
            request.method, request.url.path, content=body,
            headers={"content-type": "application/json"},
        )  # fmt: skip
        await JSONResponse(reply.json(), reply.status_code)(scope, receive, send)

    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=front), base_url="http://facilitator"
    ) as facilitator:
        auth = PaymentAuth(
            world.wallet, rpc=world.rpc, facilitator=facilitator, max_per_request=USDC
        )
        reply = await world.api.get("/v1/data", auth=auth)
    assert reply.status_code == 200, reply.text
    assert world.chain.token_state(world.destination)["amount"] == PRICE  # type: ignore[arg-type]
    return bodies


async def test_a_pending_settlement_is_asked_again_with_the_same_transfer(world: World) -> None:
    """The facilitator answers 504 SettlementPending (as when confirmation is slow); the
    client posts the same signed transfer again rather than paying anew, and is served."""

    async def pending(body: bytes) -> JSONResponse:
        return JSONResponse({"error": "SettlementPending", "message": "not yet confirmed"}, 504)

    bodies = await paid_through_a_front(world, pending)
    assert len(bodies) == 2 and bodies[0] == bodies[1]  # the same signed transfer, twice


async def test_a_payment_whose_blockhash_expired_unpaid_is_signed_again(world: World) -> None:
    """The facilitator answers 400 BlockhashExpired (its sends were dropped until the
    blockhash's last valid block height passed: nothing was paid); the client signs a new
    transfer with a fresh blockhash rather than failing the request, and pays once."""

    async def expired(body: bytes) -> JSONResponse:
        # answered once the cluster has moved past the transfer's blockhash
        signed = json.loads(body)["signedPayment"]
        first = VersionedTransaction.from_bytes(base64.b64decode(signed))
        for _ in range(100):
            latest = await world.rpc.get_latest_blockhash(Confirmed)
            if latest.value.blockhash != first.message.recent_blockhash:
                break
            await asyncio.sleep(0.1)
        return JSONResponse({"error": "BlockhashExpired", "message": "nothing was paid"}, 400)

    bodies = await paid_through_a_front(world, expired)
    assert len(bodies) == 2 and bodies[0] != bodies[1]  # a new transfer, signed again


async def _data(request: Request) -> JSONResponse:
    return JSONResponse({"data": 42})


@pytest.mark.parametrize("named", [False, True], ids=["given-facilitator", "named-by-terms"])
def test_a_synchronous_httpx_client_pays_too(
    validator: Localnet, chain: Chain, named: bool
) -> None:
    """`PaymentAuth` on `httpx.Client` (no event loop of the caller's): the gate and the
    facilitator over real HTTP, the payment settled on the validator, the limits kept.
    `named`: the auth has no facilitator and pays through the one the gate's terms name."""
    from contextlib import asynccontextmanager

    from tests.cli.conftest import serve
    from tests.support.facilitator import proxy

    provider, fee_payer, wallet = (chain.funded_keypair() for _ in range(3))
    mint = chain.create_mint()
    destination = chain.token_account(provider.pubkey(), mint)
    wallet_token = chain.token_account(wallet.pubkey(), mint, 2 * USDC)

    @asynccontextmanager
    async def facilitator_app() -> AsyncIterator[ASGIApp]:
        async with in_process_facilitator(validator.url, fee_payer, pay_to=[destination]) as f:
            yield proxy(f.http)

    with serve(facilitator_app) as facilitator_url:

        @asynccontextmanager
        async def gate_app() -> AsyncIterator[ASGIApp]:
            yield payment_gate(
                Starlette(routes=[Route("/v1/data", _data)]),
                pricing={"/v1/data": [OneTime(PRICE)]},
                terms=Terms(
                    pay_to=str(destination),
                    token=str(mint),
                    facilitator=facilitator_url if named else None,
                ),  # fmt: skip
                memos=Memos(b"sync-memo-secret-0123456789"),
                trusted_facilitators={str(fee_payer.pubkey())},
                replay=MemoryReplayStore(),
            )

        with serve(gate_app) as api_url:
            auth = PaymentAuth(
                wallet,
                rpc=AsyncClient(validator.url, commitment=Confirmed),
                facilitator=None if named else httpx.AsyncClient(base_url=facilitator_url),
                max_per_request=USDC,
                max_per_period=PRICE,
            )
            try:
                with httpx.Client(base_url=api_url, auth=auth) as api:
                    reply = api.get("/v1/data")
                    assert (reply.status_code, reply.json()) == (200, {"data": 42})
                    with pytest.raises(SpendingLimitExceeded):
                        api.get("/v1/data")
            finally:
                auth.run(auth.rpc.close())
                if auth.facilitator is not None:
                    auth.run(auth.facilitator.aclose())
                auth.close()
    assert chain.token_state(wallet_token)["amount"] == 2 * USDC - PRICE  # type: ignore[arg-type]
    assert chain.token_state(destination)["amount"] == PRICE  # type: ignore[arg-type]
