"""Offline proof verification: every tampering the issue lists is refused with its reason."""

from __future__ import annotations

import base64
from pathlib import Path

import anyio
import pytest
from solders.keypair import Keypair
from solders.pubkey import Pubkey

from svcpay.protocol.memo import Memos, MemoTerms
from svcpay.protocol.models import PaymentOption, ProtocolError
from svcpay.protocol.proof import PaymentProof, parse_payment_proof
from svcpay.protocol.replay import MemoryReplayStore, ReplayStore, SqliteReplayStore
from svcpay.protocol.replay_postgres import PostgresReplayStore
from svcpay.protocol.verify import Verdict, verify_payment_proof, verify_payment_proof_reason

NOW = 1_800_000_000
RESOURCE = "GET /v1/data"
FACILITATOR = Keypair()
MINT, PAY_TO = str(Pubkey.new_unique()), str(Pubkey.new_unique())
MEMOS = Memos(b"0123456789abcdef-secret")


def terms(amount: str = "500000") -> PaymentOption:
    memo = MEMOS.issue(MemoTerms(RESOURCE, amount, PAY_TO, MINT), now=NOW)
    return PaymentOption(
        scheme="exact",
        network="solana-mainnet",
        token=MINT,
        amount=amount,
        pay_to=PAY_TO,
        memo=memo,
    )


def proof_for(
    option: PaymentOption, signer: Keypair = FACILITATOR, **changes: object
) -> PaymentProof:
    fields: dict[str, object] = {
        "network": option.network,
        "transaction": str(Keypair().sign_message(b"tx")),
        "payer": str(Pubkey.new_unique()),
        "pay_to": option.pay_to,
        "token": option.token,
        "amount": option.amount,
        "memo": option.memo,
        "issued_at": NOW,
        "expires_at": NOW + 120,
        "facilitator": str(signer.pubkey()),
    }
    fields.update(changes)
    return PaymentProof(**fields).signed_by(signer)  # type: ignore[arg-type]


def check(
    proof: PaymentProof, option: PaymentOption, replay: object = None, now: int = NOW
) -> Verdict:
    return anyio.run(
        lambda: verify_payment_proof_reason(
            proof,
            option,
            resource=RESOURCE,
            trusted_facilitators={str(FACILITATOR.pubkey())},
            memos=MEMOS,
            replay=replay or MemoryReplayStore(),
            now=now,
        )
    )


def test_a_valid_proof_verifies_through_its_header() -> None:
    option = terms()
    proof = parse_payment_proof(proof_for(option).to_header())
    assert check(proof, option) == Verdict(True)
    assert anyio.run(
        lambda: verify_payment_proof(
            proof_for(option),
            option,
            resource=RESOURCE,
            trusted_facilitators={str(FACILITATOR.pubkey())},
            memos=MEMOS,
            replay=MemoryReplayStore(),
            now=NOW,
        )
    )


def test_tampered_amount_breaks_the_signature() -> None:
    option = terms()
    forged = proof_for(option).model_copy(update={"amount": "999999999"})
    assert check(forged, option) == Verdict(False, "the proof's signature does not verify")


def test_an_untrusted_facilitator_is_refused() -> None:
    option = terms()
    assert "does not trust" in check(proof_for(option, signer=Keypair()), option).reason


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"amount": "499999"}, "the price is 500000"),
        ({"pay_to": str(Pubkey.new_unique())}, "payTo"),
        ({"token": str(Pubkey.new_unique())}, "token"),
        ({"network": "solana-devnet"}, "network"),
        ({"memo": "bm90LWlzc3VlZA"}, "not one this server issues"),
        ({"expires_at": NOW - 1}, "expired"),
        ({"issued_at": NOW + 3600}, "future"),
    ],
)
def test_mismatched_proofs_are_refused_with_the_reason(
    changes: dict[str, object], reason: str
) -> None:
    option = terms()
    verdict = check(proof_for(option, **changes), option)
    assert not verdict.ok and reason in verdict.reason


def test_a_memo_for_another_resource_or_price_is_refused() -> None:
    option = terms()
    other = terms(amount="100")
    verdict = check(proof_for(option, memo=other.memo), option)
    assert verdict == Verdict(False, "the memo was not issued for this resource and price")


def test_an_expired_memo_is_refused() -> None:
    option = terms()
    assert (
        "memo has expired"
        in check(proof_for(option, expires_at=NOW + 10_000), option, now=NOW + 400).reason
    )


def test_overpaying_is_accepted() -> None:
    option = terms()
    assert check(proof_for(option, amount="600000"), option).ok


@pytest.mark.parametrize("store", ["memory", "sqlite", "postgres"])
def test_a_replayed_proof_is_refused_even_when_requests_race(
    store: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    replay: ReplayStore
    if store == "postgres":
        url, table = request.getfixturevalue("pg_table")
        replay = PostgresReplayStore(url, table=table)
    else:
        replay = MemoryReplayStore() if store == "memory" else SqliteReplayStore(tmp_path / "db")
    option = terms()
    proof = proof_for(option)

    async def race() -> list[bool]:
        results: list[bool] = []

        async def one() -> None:
            verdict = await verify_payment_proof_reason(
                proof,
                option,
                resource=RESOURCE,
                trusted_facilitators={str(FACILITATOR.pubkey())},
                memos=MEMOS,
                replay=replay,
                now=NOW,
            )
            results.append(verdict.ok)

        async with anyio.create_task_group() as tg:
            for _ in range(20):
                tg.start_soon(one)
        if isinstance(replay, PostgresReplayStore):
            await replay.aclose()
        return results

    assert sorted(anyio.run(race)) == [False] * 19 + [True]


@pytest.mark.parametrize(
    ("header", "reason"),
    [
        ("x" * 5000, "larger than"),
        ("%%%not-base64", "base64"),
        (base64.b64encode(b"[1,2]").decode(), "JSON object"),
        (base64.b64encode(b'{"network": 1}').decode(), "required|should be"),
    ],
)
def test_hostile_headers_get_a_reason(header: str, reason: str) -> None:
    with pytest.raises(ProtocolError, match=reason):
        parse_payment_proof(header)


def test_the_signed_bytes_are_the_canonical_json_of_every_field_but_the_signature() -> None:
    """The fast path must sign exactly what ADR 0006 says (proofs issued by older
    facilitators, and extra fields, included)."""
    import json

    from svcpay.protocol.proof import DOMAIN, PaymentProof

    proof = PaymentProof.model_validate(
        {
            "version": "1", "network": "solana-mainnet", "transaction": "5" * 64,
            "payer": "11111111111111111111111111111111",
            "payTo": "11111111111111111111111111111111",
            "token": "11111111111111111111111111111111", "amount": "500000", "memo": "m",
            "issuedAt": 1, "expiresAt": 2, "facilitator": "11111111111111111111111111111111",
            "signature": "sig", "extension": {"b": 1, "a": [2]},
        }
    )  # fmt: skip
    everything = proof.model_dump(by_alias=True, mode="json")
    everything.pop("signature")
    expected = DOMAIN + json.dumps(everything, sort_keys=True, separators=(",", ":")).encode()
    assert proof.signing_bytes() == expected
