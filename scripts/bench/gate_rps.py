"""Requests per second through the payment gate, in process on one core (scripts/bench-gate).

Calls the ASGI app directly (no sockets, no HTTP parsing), so the numbers are the gate's
own cost: a bare endpoint, the 402 path (a fresh body with a memo), a paid request verified
offline (signature, memo, replay claim; a distinct pre-signed proof each), an x402 paid
request (a distinct signed transaction each: parse, terms, memo, replay claim, verify and
settle by an in-process facilitator that answers at once, so the facilitator's own round
trips are not counted), a subscription request served from the warm cache, and a session
voucher (MPP `Authorization: Payment`: challenge HMAC, Ed25519, the session's state from the
warm cache, the ledger's compare-and-set; a distinct voucher each, over 64 sessions). Prints
numbers; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import time
from dataclasses import dataclass
from typing import Any

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

from svcpay.gate import OneTime, Session, Subscription, payment_gate
from svcpay.gate.pricing import Terms
from svcpay.protocol import mpp
from svcpay.protocol.memo import Memos, MemoTerms
from svcpay.protocol.programs import MEMO_PROGRAM
from svcpay.protocol.proof import PaymentProof
from svcpay.protocol.replay import MemoryReplayStore
from svcpay.protocol.voucher import SignedVoucher
from svcpay.schemes.decision import Request
from svcpay.schemes.mpp_charge.wire import ChargeAnswer
from svcpay.schemes.session.ledger import MemoryVoucherLedger
from svcpay.schemes.session.server import SessionPolicy, SessionScheme
from svcpay.schemes.x402_exact.wire import SettleResponse, VerifyResponse, encode_header

PLAN = str(Pubkey.new_unique())
SUB = str(Pubkey.new_unique())
SESSIONS = 64  # vouchers go round-robin over these, so in-flight ones are other sessions'
SESSION_PRICE = 1_000
CHALLENGE_SECRET = b"bench-challenge-secret-0123456789"


@dataclass(frozen=True)
class SessionState:
    """A session account as the gate's warm cache holds it."""

    signer: Pubkey
    recipient: Pubkey
    mint: Pubkey
    deposit: int = 2**62
    redeemed: int = 0
    expires_at: int = 2**40
    dispute_secs: int = 3600


class WarmSessions:
    """A warm cache hit: what ChainSessions serves between chain reads."""

    program_id = Pubkey.new_unique()

    def __init__(self, states: dict[Pubkey, SessionState]) -> None:
        self.states = states

    async def lookup(self, channel: Pubkey, *, fresh: bool = False) -> SessionState | None:
        return self.states.get(channel)


def session_scheme(terms: Terms, keys: list[tuple[Pubkey, Keypair]]) -> SessionScheme:
    recipient, mint = Pubkey.from_string(terms.pay_to), Pubkey.from_string(terms.token)
    states = {c: SessionState(k.pubkey(), recipient, mint) for c, k in keys}
    issuer = mpp.ChallengeIssuer(CHALLENGE_SECRET, "bench")
    return SessionScheme(terms, issuer, WarmSessions(states), MemoryVoucherLedger(),
                         SessionPolicy(challenge_secs=3600))  # fmt: skip


def session_keys(seed: int = 7) -> list[tuple[Pubkey, Keypair]]:
    """SESSIONS (channel, signing key) pairs, the same in every process (the HTTP bench
    builds vouchers here and serves them in the server process)."""
    return [
        (Pubkey(bytes([seed, i]) + bytes(30)), Keypair.from_seed(bytes([seed, i]) + bytes(30)))
        for i in range(SESSIONS)
    ]


def session_headers(scheme: SessionScheme, n: int) -> list[bytes]:
    """`n` credentials, round-robin over the sessions, each voucher one price above the last
    of its session."""
    challenge = scheme.challenge(Session(SESSION_PRICE))
    keys = session_keys()
    out = []
    for i in range(n):
        channel, key = keys[i % SESSIONS]
        voucher = SignedVoucher.sign(key, channel, (i // SESSIONS + 1) * SESSION_PRICE)
        payload = {
            "action": "voucher",
            "channelId": str(channel),
            "voucher": voucher.to_json_dict(),
        }
        out.append(mpp.Credential(challenge, payload).header().encode())
    return out


async def bare_app(scope: Any, receive: Any, send: Any) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"application/json")],
        }
    )
    await send({"type": "http.response.body", "body": b'{"data":42}'})


@dataclass(frozen=True)
class State:
    plan: str = PLAN
    status: str = "Active"
    allowance_remaining: int | None = None


class WarmSubscriptions:
    """What ChainSubscriptions returns from its cache: no chain read on the hot path."""

    async def lookup(self, subscription_id: str) -> State | None:
        return State() if subscription_id == SUB else None

    def invalidate(self, subscription_id: str) -> None:
        pass


class InstantCharges:
    """svcpay's facilitator for MPP charges, answering at once (the gate's cost alone)."""

    async def settle(self, charge: Any) -> ChargeAnswer:
        return ChargeAnswer(success=True, reference="1" * 64)

    async def verify(self, charge: Any) -> ChargeAnswer:
        return ChargeAnswer(success=True, reference="1" * 64)


def mpp_headers(gate: Any, n: int) -> list[bytes]:
    """n distinct `Authorization: Payment` values for GET /paid: pulled MPP charges, built as
    pay-kit's client builds them, for the gate's own challenges (the challenge key and the
    memo secret are the server's too)."""
    intent = gate.core.charge
    request = Request("GET", "/paid", {})
    payer = Keypair()
    out = []
    for i in range(n):
        asked = intent.request_json(request, OneTime(500_000), pull=True)
        challenge = intent.issuer.issue("solana", "charge", asked, expires=int(time.time()) + 3600)
        mint = Pubkey.from_string(asked["currency"])
        transfer = transfer_checked(
            TransferCheckedParams(
                program_id=TOKEN_PROGRAM_ID,
                source=get_associated_token_address(payer.pubkey(), mint),
                mint=mint,
                dest=get_associated_token_address(Pubkey.from_string(asked["recipient"]), mint),
                owner=payer.pubkey(),
                amount=500_000,
                decimals=6,
            )
        )
        ixs = [
            set_compute_unit_price(i + 1), set_compute_unit_limit(50_000), transfer,
            Instruction(MEMO_PROGRAM, asked["externalId"].encode(), []),
        ]  # fmt: skip
        fee_payer = Pubkey.from_string(asked["methodDetails"]["feePayerKey"])
        msg = MessageV0.try_compile(fee_payer, ixs, [], Hash.default())
        sigs = [Signature.default(), payer.sign_message(to_bytes_versioned(msg))]
        tx = base64.b64encode(bytes(VersionedTransaction.populate(msg, sigs))).decode()
        credential = mpp.Credential(challenge, {"type": "transaction", "transaction": tx})
        out.append(credential.header().encode())
    return out


class InstantFacilitator:
    """An x402 facilitator that approves and settles at once (the gate's cost alone)."""

    async def verify(self, version: int, payload: Any, requirements: Any) -> VerifyResponse:
        return VerifyResponse(is_valid=True)

    async def settle(self, version: int, payload: Any, requirements: Any) -> SettleResponse:
        return SettleResponse(success=True, transaction="1" * 64, network=requirements["network"])


def x402_headers(
    gate: Any, terms: Terms, memos: Memos, n: int, subject: str = "GET /paid"
) -> list[bytes]:
    """n distinct PAYMENT-SIGNATURE values for `subject` (its memo's "METHOD path"), built as
    an x402 client builds them."""
    assert terms.owner and terms.fee_payer
    memo = memos.issue(MemoTerms(subject, "500000", terms.pay_to, terms.token))
    required = gate.core.x402.requirements(OneTime(500_000), memo)
    payer, mint = Keypair(), Pubkey.from_string(terms.token)
    transfer = transfer_checked(
        TransferCheckedParams(
            program_id=TOKEN_PROGRAM_ID, source=get_associated_token_address(payer.pubkey(), mint),
            mint=mint, dest=Pubkey.from_string(terms.pay_to), owner=payer.pubkey(),
            amount=500_000, decimals=6,
        )
    )  # fmt: skip
    headers = []
    for i in range(n):
        ixs = [
            set_compute_unit_limit(20_000), set_compute_unit_price(i + 1), transfer,
            Instruction(MEMO_PROGRAM, memo.encode(), []),
        ]  # fmt: skip
        msg = MessageV0.try_compile(Pubkey.from_string(terms.fee_payer), ixs, [], Hash.default())
        sigs = [Signature.default(), payer.sign_message(to_bytes_versioned(msg))]
        tx = base64.b64encode(bytes(VersionedTransaction.populate(msg, sigs))).decode()
        payload = {"x402Version": 2, "accepted": required, "payload": {"transaction": tx}}
        headers.append(encode_header(payload).encode())
    return headers


def bench_terms() -> tuple[Keypair, Terms, Memos]:
    """A facilitator's key, terms for made-up accounts, and memos: the benches' stand-ins."""
    owner, mint = Pubkey.new_unique(), Pubkey.new_unique()
    terms = Terms(
        pay_to=str(get_associated_token_address(owner, mint)), token=str(mint),
        owner=str(owner), fee_payer=str(Pubkey.new_unique()),
    )  # fmt: skip
    return Keypair(), terms, Memos(b"bench-memo-secret-0123456789", ttl_secs=3600)


def signed_proofs(
    facilitator: Keypair, terms: Terms, memo: str, n: int, amount: int = 500_000
) -> list[bytes]:
    """n distinct svcpay proofs (`X-PAYMENT` values) of `amount` under `memo`, signed by
    `facilitator`, as if each settled a transaction of its own."""
    now = int(time.time())
    return [
        PaymentProof(
            network="solana-mainnet", transaction=str(Keypair().sign_message(str(i).encode())),
            payer=str(Pubkey.new_unique()), pay_to=terms.pay_to, token=terms.token,
            amount=str(amount), memo=memo, issued_at=now, expires_at=now + 3600,
            facilitator=str(facilitator.pubkey()),
        ).signed_by(facilitator).to_header().encode()
        for i in range(n)
    ]  # fmt: skip


def scope(path: str, headers: list[tuple[bytes, bytes]]) -> dict[str, Any]:
    return {"type": "http", "method": "GET", "path": path, "headers": headers, "query_string": b""}


async def rate(app: Any, scopes: list[dict[str, Any]], want: int) -> float:
    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    statuses: list[int] = []

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            statuses.append(message["status"])

    start = time.perf_counter()
    for s in scopes:
        await app(s, receive, send)
    elapsed = time.perf_counter() - start
    assert all(code == want for code in statuses), f"unexpected statuses {set(statuses)}"
    return len(scopes) / elapsed


async def main(n: int) -> None:
    facilitator, terms, memos = bench_terms()
    sessions = session_scheme(terms, session_keys())
    gate = payment_gate(
        bare_app,
        pricing={
            "/paid": [OneTime(500_000)],
            "/sub": [Subscription(PLAN, 10_000_000, 2_592_000)],
            "/session": [Session(SESSION_PRICE)],
        },
        terms=terms,
        sessions=sessions,
        memos=memos,
        trusted_facilitators={str(facilitator.pubkey())},
        replay=MemoryReplayStore(),
        subscriptions=WarmSubscriptions(),
        x402_facilitator=InstantFacilitator(),
        mpp_facilitator=InstantCharges(),
    )
    memo = memos.issue(MemoTerms("GET /paid", "500000", terms.pay_to, terms.token))
    proofs = signed_proofs(facilitator, terms, memo, n)
    results = {
        "bare endpoint": await rate(gate, [scope("/free", [])] * n, 200),
        "402 path (fresh terms)": await rate(gate, [scope("/paid", [])] * n, 402),
        "paid, verified offline": await rate(
            gate, [scope("/paid", [(b"x-payment", p)]) for p in proofs], 200
        ),
        "x402 paid, instant fac.": await rate(
            gate,
            [
                scope("/paid", [(b"payment-signature", h)])
                for h in x402_headers(gate, terms, memos, n)
            ],
            200,
        ),
        "MPP charge paid, instant": await rate(
            gate, [scope("/paid", [(b"authorization", h)]) for h in mpp_headers(gate, n)], 200
        ),
        "subscription, warm cache": await rate(
            gate, [scope("/sub", [(b"x-svc-sub", SUB.encode())])] * n, 200
        ),
        "session voucher, warm": await rate(
            gate,
            [scope("/session", [(b"authorization", h)]) for h in session_headers(sessions, n)],
            200,
        ),
    }
    print(f"{n} requests each, one core, in process")
    for name, rps in results.items():
        print(f"{name:<26} {rps:>10,.0f} req/s")
    print(f"paid / bare: {results['paid, verified offline'] / results['bare endpoint']:.2f}")
    x402 = results["x402 paid, instant fac."] / results["paid, verified offline"]
    print(f"x402 / svcpay proof: {x402:.2f}")
    charge = results["MPP charge paid, instant"] / results["paid, verified offline"]
    print(f"MPP charge / svcpay proof: {charge:.2f}")
    session = results["session voucher, warm"] / results["paid, verified offline"]
    print(f"session voucher / svcpay proof: {session:.2f} (goal: at least 1.00)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=5000)
    asyncio.run(main(parser.parse_args().n))
