"""x402 `exact` SVM transaction rules as pure functions (no chain): what the facilitator
tests on the validator cannot reach, such as Lighthouse assertions (the program is not on
the local validator), Token-2022 destinations and lookup tables."""

from __future__ import annotations

import pytest
from solders.address_lookup_table_account import AddressLookupTableAccount
from solders.hash import Hash
from solders.instruction import AccountMeta, Instruction
from solders.keypair import Keypair
from solders.message import MessageV0
from solders.transaction import VersionedTransaction
from spl.token.constants import TOKEN_2022_PROGRAM_ID, TOKEN_PROGRAM_ID
from spl.token.instructions import get_associated_token_address

from svcpay.schemes.x402_exact import svm
from svcpay.schemes.x402_exact.wire import Reason
from tests.support.x402_tx import ExactPayment

PRICE = 1_000


def payment(**changes: object) -> ExactPayment:
    return ExactPayment(
        payer=Keypair(),
        fee_payer=Keypair().pubkey(),
        mint=Keypair().pubkey(),
        pay_to=Keypair().pubkey(),
        amount=PRICE,
        blockhash=Hash.new_unique(),
    ).but(**changes)


def check(pay: ExactPayment, memo: str | None = "x402-test-memo") -> svm.Transfer:
    return svm.check_payment(
        pay.transaction(),
        fee_payer=pay.fee_payer,
        asset=str(pay.mint),
        pay_to=str(pay.pay_to),
        amount=PRICE,
        memo=memo,
    )


def refusal(pay: ExactPayment, memo: str | None = "x402-test-memo") -> str:
    with pytest.raises(svm.Refusal) as caught:
        check(pay, memo)
    return caught.value.reason


def test_the_ata_is_the_one_spl_derives_for_either_token_program() -> None:
    owner, mint = Keypair().pubkey(), Keypair().pubkey()
    for program in (TOKEN_PROGRAM_ID, TOKEN_2022_PROGRAM_ID):
        assert svm.associated_token_address(owner, mint, program) == (
            get_associated_token_address(owner, mint, program)
        )
    assert svm.associated_token_address(owner, mint, TOKEN_PROGRAM_ID) != (
        svm.associated_token_address(owner, mint, TOKEN_2022_PROGRAM_ID)
    )


def test_a_standard_payment_passes_and_says_what_it_pays() -> None:
    pay = payment(amount=PRICE + 5)
    transfer = check(pay)
    assert transfer.authority == pay.payer.pubkey() and transfer.amount == PRICE + 5
    assert transfer.memos == ("x402-test-memo",)
    assert (transfer.compute_unit_limit, transfer.compute_unit_price) == (20_000, 1)


def test_lighthouse_assertions_are_accepted_up_to_seven_instructions() -> None:
    assertion = Instruction(svm.LIGHTHOUSE_PROGRAM, b"\x01assert", [])
    assert check(payment(extra=[assertion] * 3)).memos == ("x402-test-memo",)
    assert refusal(payment(extra=[assertion] * 4)) == Reason.INSTRUCTIONS_LENGTH


def test_the_fee_payer_is_refused_in_any_instruction_even_lighthouse() -> None:
    pay = payment()
    named = Instruction(svm.LIGHTHOUSE_PROGRAM, b"", [AccountMeta(pay.fee_payer, False, True)])
    assert refusal(pay.but(extra=[named])) == Reason.FEE_PAYER_TRANSFERRING


def test_compute_budget_caps() -> None:
    assert refusal(payment(limit=svm.MAX_COMPUTE_UNIT_LIMIT + 1)) == Reason.COMPUTE_LIMIT
    assert refusal(payment(price=svm.MAX_COMPUTE_UNIT_PRICE + 1, limit=1)) == (
        Reason.COMPUTE_PRICE_TOO_HIGH
    )
    fits = payment(limit=50_000, price=1_000_000)  # exactly 50,000 lamports
    assert check(fits).compute_unit_price == 1_000_000
    assert refusal(payment(limit=50_001, price=1_000_000)) == Reason.COMPUTE_PRICE_TOO_HIGH


def test_no_memo_required_when_the_terms_give_none() -> None:
    assert check(payment(memo=None), memo=None).memos == ()
    assert refusal(payment(memo=None)) == Reason.MEMO_COUNT


def test_a_signature_that_does_not_verify_is_refused() -> None:
    pay = payment()
    tx = pay.transaction()
    forged = VersionedTransaction.populate(
        tx.message, [tx.signatures[0], Keypair().sign_message(b"x")]
    )
    with pytest.raises(svm.Refusal) as caught:
        svm.check_payment(
            forged, fee_payer=pay.fee_payer, asset=str(pay.mint), pay_to=str(pay.pay_to),
            amount=PRICE, memo="x402-test-memo",
        )  # fmt: skip
    assert caught.value.reason == Reason.INVALID_PAYLOAD


def test_a_foreign_fee_payer_and_undecodable_bytes() -> None:
    pay = payment()
    with pytest.raises(svm.Refusal) as caught:
        svm.check_payment(
            pay.transaction(), fee_payer=Keypair().pubkey(), asset=str(pay.mint),
            pay_to=str(pay.pay_to), amount=PRICE,
        )  # fmt: skip
    assert caught.value.reason == Reason.FEE_PAYER_MISSING
    for garbage in ("", "%%%", "AAAA", "A" * 10_000):
        with pytest.raises(svm.Refusal) as caught:
            svm.decode_transaction(garbage)
        assert caught.value.reason == Reason.UNDECODABLE


def test_lookup_tables_are_refused() -> None:
    pay = payment()
    destination = get_associated_token_address(pay.pay_to, pay.mint)
    table = AddressLookupTableAccount(Keypair().pubkey(), [destination])
    message = MessageV0.try_compile(pay.fee_payer, pay.instructions(), [table], pay.blockhash)
    tx = VersionedTransaction.populate(message, [pay.payer.sign_message(bytes(message))] * 2)
    if not message.address_table_lookups:
        pytest.fail("the table was not used: the test builds nothing to refuse")
    with pytest.raises(svm.Refusal) as caught:
        svm.check_payment(
            tx, fee_payer=pay.fee_payer, asset=str(pay.mint), pay_to=str(pay.pay_to),
            amount=PRICE,
        )  # fmt: skip
    assert caught.value.reason == Reason.INVALID_PAYLOAD
