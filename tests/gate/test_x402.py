"""x402 on the gate (issue 13, docs/adr/0018), on the local validator with real transfers:
payments are built here with solders as an x402 client builds them, and settled by a small
x402 facilitator (tests/support/x402_facilitator.py) that co-signs and sends them."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from solders.compute_budget import set_compute_unit_limit, set_compute_unit_price
from solders.hash import Hash
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

from svcpay.gate import OneTime, PaymentGateWSGI, Subscription, payment_gate, payment_gate_wsgi
from svcpay.gate.chain import ChainSubscriptions
from svcpay.gate.pricing import Terms
from svcpay.program.client import BillingClient
from svcpay.protocol.memo import Memos
from svcpay.protocol.models import PaymentRequired
from svcpay.protocol.replay import MemoryReplayStore, ReplayStore, SqliteReplayStore
from svcpay.schemes.x402_exact.facilitator_client import X402FacilitatorClient
from svcpay.schemes.x402_exact.wire import CAIP2, decode_json, encode_header
from tests.gate.test_wsgi import call
from tests.support.billing import USDC
from tests.support.chain import Chain
from tests.support.x402_facilitator import MEMO_PROGRAM, FakeX402Facilitator

pytestmark = pytest.mark.anyio
PRICE = USDC // 2
MAINNET = CAIP2["solana-mainnet"]
PAYMENT_ID = "pay_0123456789abcdef0123"


@dataclass
class World:
    chain: Chain
    mint: Pubkey
    owner: Keypair  # the provider's wallet
    pay_to: Pubkey  # its associated token account
    payer: Keypair  # an x402 client's wallet, holding tokens
    facilitator: FakeX402Facilitator
    http: httpx.AsyncClient  # the gated API
    handled: list[str]  # paths the handlers ran for, with what the facilitator had settled
    facilitator_http: httpx.AsyncClient  # the gate's client of the facilitator

    def balance(self) -> int:
        return int(self.chain.token_state(self.pay_to)["amount"])


def api(handled: list[str], facilitator: FakeX402Facilitator) -> Starlette:
    async def data(request: Request) -> JSONResponse:
        handled.append(f"{request.url.path} settled={len(facilitator.settled)}")
        return JSONResponse({"data": 42})

    async def fail(request: Request) -> JSONResponse:
        handled.append(request.url.path)
        return JSONResponse({"error": "down"}, status_code=500)

    async def boom(request: Request) -> JSONResponse:
        handled.append(request.url.path)
        raise RuntimeError("the handler crashed")

    return Starlette(
        routes=[Route(p, h) for p, h in (("/v1/data", data), ("/v1/before", data))]
        + [Route("/v1/fail", fail), Route("/v1/boom", boom), Route("/v1/both", data)]
    )


def x402_terms(world_mint: Pubkey, owner: Pubkey, fee_payer: Pubkey) -> Terms:
    return Terms(
        pay_to=str(get_associated_token_address(owner, world_mint)),
        token=str(world_mint),
        owner=str(owner),
        fee_payer=str(fee_payer),
    )


@pytest.fixture
async def world(chain: Chain, client: BillingClient) -> AsyncIterator[World]:
    mint = chain.create_mint()
    owner = Keypair()
    pay_to = chain.token_account(owner.pubkey(), mint)
    payer = chain.funded_keypair()
    chain.token_account(payer.pubkey(), mint, 10 * USDC)
    facilitator = FakeX402Facilitator(chain.url, chain.funded_keypair())
    handled: list[str] = []
    fac_http = httpx.AsyncClient(transport=httpx.ASGITransport(app=facilitator.app()))
    world = World(chain, mint, owner, pay_to, payer, facilitator, fac_http, handled, fac_http)
    gate = gate_for(world, client, MemoryReplayStore())
    transport = httpx.ASGITransport(app=gate, raise_app_exceptions=False)
    async with fac_http, httpx.AsyncClient(transport=transport, base_url="http://api") as http:
        world.http = http
        yield world


def gate_for(world: World, client: BillingClient, replay: ReplayStore) -> Any:
    """The world's API behind a gate of its own (as one worker process has)."""
    return payment_gate(
        api(world.handled, world.facilitator),
        pricing={
            "/v1/data": [OneTime(PRICE)],
            "/v1/before": [OneTime(PRICE, settle="before")],
            "/v1/fail": [OneTime(PRICE)],
            "/v1/boom": [OneTime(PRICE)],
            "/v1/both": [OneTime(PRICE), Subscription(str(Pubkey.new_unique()), USDC, 86_400)],
        },
        terms=x402_terms(world.mint, world.owner.pubkey(), world.facilitator.fee_payer.pubkey()),
        memos=Memos(b"x402-gate-memo-secret-0123"),
        trusted_facilitators=set(),
        replay=replay,
        subscriptions=ChainSubscriptions(client),
        x402_facilitator=X402FacilitatorClient(
            "http://x402-facilitator", http=world.facilitator_http
        ),
    )


# -- building payments as an x402 client does ----------------------------------------------
async def required(world: World, path: str) -> dict[str, Any]:
    reply = await world.http.get(path)
    assert reply.status_code == 402, reply.text
    return decode_json(reply.headers["PAYMENT-REQUIRED"])


def transaction(world: World, req: dict[str, Any], *, amount: int | None = None) -> str:
    """[SetComputeUnitLimit, SetComputeUnitPrice, TransferChecked, Memo(extra.memo)], the
    fee payer's signature left empty for the facilitator."""
    mint = Pubkey.from_string(req["asset"])
    params = TransferCheckedParams(
        program_id=TOKEN_PROGRAM_ID,
        source=get_associated_token_address(world.payer.pubkey(), mint),
        mint=mint,
        dest=get_associated_token_address(Pubkey.from_string(req["payTo"]), mint),
        owner=world.payer.pubkey(),
        amount=int(req.get("amount") or req["maxAmountRequired"]) if amount is None else amount,
        decimals=6,
    )
    ixs = [
        set_compute_unit_limit(20_000),
        set_compute_unit_price(1),
        transfer_checked(params),
        Instruction(MEMO_PROGRAM, req["extra"]["memo"].encode(), []),
    ]
    blockhash = world.chain.rpc("getLatestBlockhash", {"commitment": "confirmed"})["value"]
    fee_payer = Pubkey.from_string(req["extra"]["feePayer"])
    msg = MessageV0.try_compile(fee_payer, ixs, [], Hash.from_string(blockhash["blockhash"]))
    sigs = [Signature.default(), world.payer.sign_message(to_bytes_versioned(msg))]
    return base64.b64encode(bytes(VersionedTransaction.populate(msg, sigs))).decode()


def v2_header(required: dict[str, Any], tx: str, pid: str | None = None, **change: Any) -> str:
    accepted = {**required["accepts"][0], **change}
    payload: dict[str, Any] = {
        "x402Version": 2,
        "accepted": accepted,
        "resource": required["resource"],
        "payload": {"transaction": tx},
    }
    if pid is not None:
        payload["extensions"] = {"payment-identifier": {"info": {"required": False, "id": pid}}}
    return encode_header(payload)


async def pay_v2(world: World, path: str, pid: str | None = None) -> tuple[str, httpx.Response]:
    req = await required(world, path)
    header = v2_header(req, transaction(world, req["accepts"][0]), pid)
    return header, await world.http.get(path, headers={"PAYMENT-SIGNATURE": header})


# -- the tests ------------------------------------------------------------------------------
async def test_a_402_carries_svcpay_terms_and_payment_required(world: World) -> None:
    reply = await world.http.get("/v1/both")
    assert reply.status_code == 402
    body = PaymentRequired.parse(reply.content)  # svcpay's body, unchanged
    assert [o.is_subscription for o in body.accepts] == [False, True]
    req = decode_json(reply.headers["PAYMENT-REQUIRED"])
    assert req["x402Version"] == 2 and req["resource"] == {"url": "http://api/v1/both"}
    (option,) = req["accepts"]  # the subscription is svcpay's alone
    assert option == {
        "scheme": "exact",
        "network": MAINNET,
        "asset": str(world.mint),
        "amount": str(PRICE),
        "payTo": str(world.owner.pubkey()),  # the wallet, not its token account
        "maxTimeoutSeconds": 60,
        "extra": {
            "feePayer": str(world.facilitator.fee_payer.pubkey()),
            "memo": body.accepts[0].memo,  # the same memo svcpay's option carries
        },
    }
    assert req["extensions"]["payment-identifier"]["info"] == {"required": False}
    assert reply.headers["cache-control"] == "no-store"


async def test_a_v2_payment_is_settled_after_the_handler_and_a_replay_is_refused(
    world: World,
) -> None:
    header, paid = await pay_v2(world, "/v1/data")
    assert (paid.status_code, paid.json()) == (200, {"data": 42})
    receipt = decode_json(paid.headers["PAYMENT-RESPONSE"])
    assert receipt["success"] is True and receipt["network"] == MAINNET
    assert receipt["transaction"] == world.facilitator.settled[0]
    assert receipt["payer"] == str(world.payer.pubkey())
    assert world.balance() == PRICE
    assert world.handled == ["/v1/data settled=0"]  # x402's order: handler, then settle
    again = await world.http.get("/v1/data", headers={"PAYMENT-SIGNATURE": header})
    assert again.status_code == 402 and "already used" in again.json()["message"]
    assert decode_json(again.headers["PAYMENT-REQUIRED"])["error"] == "duplicate_settlement"
    assert world.balance() == PRICE and len(world.handled) == 1


async def test_a_v1_x_payment_is_paid_and_answered_with_x_payment_response(
    world: World,
) -> None:
    req = await required(world, "/v1/data")
    tx = transaction(world, req["accepts"][0])
    v1 = {"x402Version": 1, "scheme": "exact", "network": "solana", "payload": {"transaction": tx}}
    paid = await world.http.get("/v1/data", headers={"X-PAYMENT": encode_header(v1)})
    assert paid.status_code == 200, paid.text
    receipt = decode_json(paid.headers["X-PAYMENT-RESPONSE"])
    assert receipt["success"] is True and paid.headers["PAYMENT-RESPONSE"]
    assert world.balance() == PRICE
    wrong = {**v1, "network": "solana-devnet"}
    other = await world.http.get("/v1/data", headers={"X-PAYMENT": encode_header(wrong)})
    assert other.status_code == 402


async def test_a_payment_for_terms_the_gate_did_not_issue_gets_402(world: World) -> None:
    req = await required(world, "/v1/data")
    other = await required(world, "/v1/fail")  # a memo bound to another resource
    tx = transaction(world, req["accepts"][0])
    cases = {
        "amount": v2_header(req, tx, amount=str(PRICE - 1)),
        "payTo": v2_header(req, tx, payTo=str(world.pay_to)),
        "network": v2_header(req, tx, network=CAIP2["solana-devnet"]),
        "not issued for this resource": v2_header(req, tx, extra=other["accepts"][0]["extra"]),
        "memo": v2_header(req, transaction(world, other["accepts"][0])),
    }
    for reason, header in cases.items():
        reply = await world.http.get("/v1/data", headers={"PAYMENT-SIGNATURE": header})
        assert reply.status_code == 402, (reason, reply.text)
        assert reason in reply.json()["message"] or reason == "memo", reply.json()
        assert reply.headers["PAYMENT-REQUIRED"]
    assert world.facilitator.verified == 0 and world.handled == [] and world.balance() == 0


async def test_a_failing_handler_is_not_settled(world: World) -> None:
    for path, status in (("/v1/fail", 500), ("/v1/boom", 500)):
        _, reply = await pay_v2(world, path)
        assert reply.status_code == status and "PAYMENT-RESPONSE" not in reply.headers
    assert world.handled == ["/v1/fail", "/v1/boom"]
    assert world.facilitator.settled == [] and world.balance() == 0


async def test_a_settle_before_route_settles_before_its_handler(world: World) -> None:
    _, paid = await pay_v2(world, "/v1/before")
    assert paid.status_code == 200 and decode_json(paid.headers["PAYMENT-RESPONSE"])["success"]
    assert world.handled == ["/v1/before settled=1"] and world.balance() == PRICE


async def test_a_failed_settlement_replaces_the_response_with_402(
    world: World, chain: Chain
) -> None:
    req = await required(world, "/v1/data")
    broke = chain.funded_keypair()  # a token account without the tokens
    chain.token_account(broke.pubkey(), world.mint)
    world.payer = broke
    header = v2_header(req, transaction(world, req["accepts"][0]))
    reply = await world.http.get("/v1/data", headers={"PAYMENT-SIGNATURE": header})
    assert reply.status_code == 402 and reply.json() != {"data": 42}
    receipt = decode_json(reply.headers["PAYMENT-RESPONSE"])
    assert receipt["success"] is False and receipt["errorReason"]
    assert world.handled == ["/v1/data settled=0"] and world.balance() == 0


async def test_malformed_payment_headers_get_400(world: World) -> None:
    cases = {
        "PAYMENT-SIGNATURE": [
            "!!not base64!!",
            base64.b64encode(b"[1, 2]").decode(),
            encode_header({"x402Version": 2, "payload": {}}),
            encode_header({"x402Version": 1, "scheme": "exact"}),
        ],
        "X-PAYMENT": [encode_header({"x402Version": 3}), encode_header({"x402Version": 1})],
    }
    for name, values in cases.items():
        for value in values:
            reply = await world.http.get("/v1/data", headers={name: value})
            assert reply.status_code == 400, (name, value, reply.text)
            assert reply.json()["error"] == "InvalidPaymentHeader" and reply.json()["message"]
    # an svcpay proof that does not parse is still svcpay's 402, as before
    proof = base64.b64encode(json.dumps({"hello": "world"}).encode()).decode()
    assert (await world.http.get("/v1/data", headers={"X-PAYMENT": proof})).status_code == 402


async def test_a_facilitator_that_is_down_gets_503_with_retry_after(
    world: World, client: BillingClient
) -> None:
    down = X402FacilitatorClient("http://127.0.0.1:9", timeout=5)
    gate = payment_gate(
        api([], world.facilitator),
        pricing={"/v1/data": [OneTime(PRICE)]},
        terms=x402_terms(world.mint, world.owner.pubkey(), world.facilitator.fee_payer.pubkey()),
        memos=Memos(b"x402-gate-memo-secret-0123"),
        trusted_facilitators=set(),
        replay=MemoryReplayStore(),
        x402_facilitator=down,
    )
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=gate), base_url="http://api"
    ) as http:
        world.http = http
        _, reply = await pay_v2(world, "/v1/data")
    await down.aclose()
    assert reply.status_code == 503 and int(reply.headers["Retry-After"]) > 0
    assert reply.json()["error"] == "FacilitatorUnavailable"


async def test_a_payment_identifier_returns_the_stored_response(world: World) -> None:
    header, first = await pay_v2(world, "/v1/data", PAYMENT_ID)
    assert first.status_code == 200
    again = await world.http.get("/v1/data", headers={"PAYMENT-SIGNATURE": header})
    assert (again.status_code, again.content) == (200, first.content)
    assert again.headers["PAYMENT-RESPONSE"] == first.headers["PAYMENT-RESPONSE"]
    assert len(world.facilitator.settled) == 1 and world.balance() == PRICE
    assert len(world.handled) == 1
    _, other = await pay_v2(world, "/v1/data", PAYMENT_ID)  # another payment, same id
    assert other.status_code == 409 and other.json()["error"] == "PaymentIdConflict"
    assert len(world.facilitator.settled) == 1 and world.balance() == PRICE


async def test_a_payment_identifier_is_recognised_by_another_worker(
    world: World, client: BillingClient, tmp_path: Path
) -> None:
    """Two gate workers, each with its own SqliteReplayStore on one state file (as the example
    API's workers have): the ids live beside the replay claims, so a resend that reaches the
    other worker gets the stored response and pays nothing."""
    workers = []
    for _ in range(2):
        gate = gate_for(world, client, SqliteReplayStore(tmp_path / "state.db"))
        transport = httpx.ASGITransport(app=gate, raise_app_exceptions=False)
        workers.append(httpx.AsyncClient(transport=transport, base_url="http://api"))
    async with workers[0] as a, workers[1] as b:
        world.http = a
        header, first = await pay_v2(world, "/v1/data", PAYMENT_ID)
        assert first.status_code == 200, first.text
        again = await b.get("/v1/data", headers={"PAYMENT-SIGNATURE": header})
        assert (again.status_code, again.content) == (200, first.content)
        assert again.headers["PAYMENT-RESPONSE"] == first.headers["PAYMENT-RESPONSE"]
        world.http = b
        _, other = await pay_v2(world, "/v1/data", PAYMENT_ID)  # another payment, same id
        assert other.status_code == 409 and other.json()["error"] == "PaymentIdConflict"
        bare = v2_header(await required(world, "/v1/data"), settled_transaction(header))
        replayed = await b.get("/v1/data", headers={"PAYMENT-SIGNATURE": bare})
        assert replayed.status_code == 402  # the settled transaction without the id
    assert len(world.facilitator.settled) == 1 and world.balance() == PRICE
    assert len(world.handled) == 1


def settled_transaction(header: str) -> str:
    return str(decode_json(header)["payload"]["transaction"])


async def test_x402_needs_the_owners_associated_token_account(world: World, chain: Chain) -> None:
    fee_payer = world.facilitator.fee_payer.pubkey()
    other = chain.token_account(Keypair().pubkey(), world.mint)  # someone else's account
    common: dict[str, Any] = dict(
        pricing={"/v1/data": [OneTime(PRICE)]},
        memos=Memos(b"x402-gate-memo-secret-0123"),
        trusted_facilitators=set(),
        replay=MemoryReplayStore(),
    )
    bad = Terms(
        str(other), str(world.mint), owner=str(world.owner.pubkey()), fee_payer=str(fee_payer)
    )
    with pytest.raises(ValueError, match="not the associated token account"):
        payment_gate(api([], world.facilitator), terms=bad, **common)
    no_fee_payer = Terms(str(world.pay_to), str(world.mint), owner=str(world.owner.pubkey()))
    with pytest.raises(ValueError, match="fee_payer"):
        payment_gate(api([], world.facilitator), terms=no_fee_payer, **common)


class WsgiApi:
    """A WSGI app: /v1/data answers a closable iterable, /v1/write through write(),
    /v1/fail a 500, /v1/boom raises before answering; `closed` counts iterables closed."""

    def __init__(self) -> None:
        self.handled: list[str] = []
        self.closed = 0

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        path = environ["PATH_INFO"]
        self.handled.append(path)
        if path == "/v1/boom":
            raise RuntimeError("the handler crashed")
        if path == "/v1/fail":
            start_response("500 Internal Server Error", [("Content-Type", "application/json")])
            return [b'{"error": "down"}']
        write = start_response("200 OK", [("Content-Type", "application/json")])
        if path == "/v1/write":  # the head goes out with the first write()
            write(b'{"wsgi": true, ')
            return [b'"via": "write"}']
        return self._body(b'{"wsgi": true}')

    def _body(self, data: bytes) -> Iterable[bytes]:
        api = self

        class Body:
            def __iter__(self) -> Iterator[bytes]:
                yield data

            def close(self) -> None:
                api.closed += 1

        return Body()


@contextmanager
def wsgi_gate(world: World, app: Any, **pricing: OneTime) -> Iterator[PaymentGateWSGI]:
    """`app` behind an x402 gate pricing each path in `pricing` (`/v1/x` as `v1_x`)."""
    fac_http = httpx.AsyncClient(transport=httpx.ASGITransport(app=world.facilitator.app()))
    with payment_gate_wsgi(
        app,
        pricing={"/" + name.replace("_", "/"): [entry] for name, entry in pricing.items()},
        terms=x402_terms(world.mint, world.owner.pubkey(), world.facilitator.fee_payer.pubkey()),
        memos=Memos(b"x402-gate-memo-secret-0123"),
        trusted_facilitators=set(),
        replay=MemoryReplayStore(),
        x402_facilitator=X402FacilitatorClient("http://x402-facilitator", http=fac_http),
    ) as gate:
        yield gate
        gate.run(fac_http.aclose())


def wsgi_header(world: World, gate: PaymentGateWSGI, path: str, pid: str | None = None) -> str:
    unpaid = call(gate, path)
    assert unpaid.code == 402
    req = decode_json(unpaid.header("PAYMENT-REQUIRED") or "")
    return v2_header(req, transaction(world, req["accepts"][0]), pid)


async def test_the_wsgi_adapter_takes_x402_too(world: World) -> None:
    api = WsgiApi()
    with wsgi_gate(world, api, v1_data=OneTime(PRICE)) as gate:
        header = wsgi_header(world, gate, "/v1/data")
        paid = call(gate, "/v1/data", headers={"PAYMENT-SIGNATURE": header})
        assert (paid.code, paid.json()) == (200, {"wsgi": True})
        assert decode_json(paid.header("PAYMENT-RESPONSE") or "")["success"] is True
        assert call(gate, "/v1/data", headers={"PAYMENT-SIGNATURE": header}).code == 402
    assert world.balance() == PRICE and api.handled == ["/v1/data"] and api.closed == 1


async def test_a_failing_wsgi_handler_is_not_settled(world: World) -> None:
    """A 500 or an exception before answering: nothing settled, and the transaction's
    claim released, so the same payment may be sent again."""
    api = WsgiApi()
    with wsgi_gate(world, api, v1_fail=OneTime(PRICE), v1_boom=OneTime(PRICE)) as gate:
        failed = wsgi_header(world, gate, "/v1/fail")
        for _ in range(2):
            reply = call(gate, "/v1/fail", headers={"PAYMENT-SIGNATURE": failed})
            assert reply.code == 500 and reply.header("PAYMENT-RESPONSE") is None
        crashed = wsgi_header(world, gate, "/v1/boom")
        for _ in range(2):
            with pytest.raises(RuntimeError, match="crashed"):
                call(gate, "/v1/boom", headers={"PAYMENT-SIGNATURE": crashed})
    assert api.handled == ["/v1/fail", "/v1/fail", "/v1/boom", "/v1/boom"]
    assert world.facilitator.settled == [] and world.balance() == 0


async def test_a_failed_settlement_replaces_the_wsgi_response_with_402(
    world: World, chain: Chain
) -> None:
    broke = chain.funded_keypair()  # a token account without the tokens
    chain.token_account(broke.pubkey(), world.mint)
    world.payer = broke
    api = WsgiApi()
    with wsgi_gate(world, api, v1_data=OneTime(PRICE), v1_write=OneTime(PRICE)) as gate:
        for path in ("/v1/data", "/v1/write"):
            header = wsgi_header(world, gate, path)
            reply = call(gate, path, headers={"PAYMENT-SIGNATURE": header})
            assert reply.code == 402 and b"wsgi" not in reply.body, path
            assert reply.json()["accepts"]  # fresh terms
            receipt = decode_json(reply.header("PAYMENT-RESPONSE") or "")
            assert receipt["success"] is False and receipt["errorReason"]
    assert api.handled == ["/v1/data", "/v1/write"] and api.closed == 1
    assert world.facilitator.settled == [] and world.balance() == 0


async def test_wsgi_settle_before_and_a_payment_identifier(world: World) -> None:
    """A settle-before route pays before its handler; a resend under the same
    payment-identifier gets the stored response (the body the adapter captured)."""
    api = WsgiApi()
    routes = {"v1_data": OneTime(PRICE), "v1_write": OneTime(PRICE, settle="before")}
    with wsgi_gate(world, api, **routes) as gate:
        before = wsgi_header(world, gate, "/v1/write")
        paid = call(gate, "/v1/write", headers={"PAYMENT-SIGNATURE": before})
        assert (paid.code, paid.body) == (200, b'{"wsgi": true, "via": "write"}')
        assert decode_json(paid.header("PAYMENT-RESPONSE") or "")["success"] is True
        header = wsgi_header(world, gate, "/v1/data", PAYMENT_ID)
        first = call(gate, "/v1/data", headers={"PAYMENT-SIGNATURE": header})
        again = call(gate, "/v1/data", headers={"PAYMENT-SIGNATURE": header})
        assert (first.code, again.code, again.body) == (200, 200, first.body)
        assert again.header("PAYMENT-RESPONSE") == first.header("PAYMENT-RESPONSE")
    assert api.handled == ["/v1/write", "/v1/data"]
    assert len(world.facilitator.settled) == 2 and world.balance() == 2 * PRICE
