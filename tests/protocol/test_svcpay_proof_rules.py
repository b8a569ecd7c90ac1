"""The checks `/authorize` applies before the facilitator co-signs a payment
(`svcpay.schemes.svcpay_proof.facilitator`), as pure functions: every refusal, including
those a real client cannot be made to send over HTTP (lookup tables, foreign programs, a
forged signature). The end-to-end refusals are in tests/scenarios/test_one_time_payment.py."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import pytest
from solders.address_lookup_table_account import AddressLookupTableAccount
from solders.compute_budget import set_compute_unit_limit, set_compute_unit_price
from solders.hash import Hash
from solders.instruction import AccountMeta, Instruction
from solders.keypair import Keypair
from solders.message import MessageV0, to_bytes_versioned
from solders.pubkey import Pubkey
from solders.signature import Signature
from solders.transaction import VersionedTransaction
from spl.token.constants import TOKEN_PROGRAM_ID
from spl.token.instructions import get_associated_token_address, transfer_checked
from spl.token.models import TransferCheckedParams

from svcpay.facilitator.errors import SettlementError
from svcpay.protocol.models import PaymentOption
from svcpay.protocol.programs import MEMO_PROGRAM
from svcpay.schemes.svcpay_proof import facilitator as rules

FACILITATOR = Keypair()
PAYER = Keypair()
STRANGER = Keypair()
MINT = Keypair().pubkey()
PAY_TO = Keypair().pubkey()
OPTION = PaymentOption(
    scheme="exact",
    network="solana-localnet",
    token=str(MINT),
    amount="250000",
    pay_to=str(PAY_TO),
    memo="svcpay:v1:abc",
)


@dataclass(frozen=True)
class Payment:
    """A payment as `build_payment` lays it out, with one thing changed per test."""

    limit: int = 50_000
    price: int | None = 1
    amount: int = 250_000
    dest: Pubkey = PAY_TO
    mint: Pubkey = MINT
    memo: bytes = b"svcpay:v1:abc"
    fee_payer: Pubkey = FACILITATOR.pubkey()
    edit: Callable[[list[Instruction]], list[Instruction]] = lambda ixs: ixs
    extra_signers: tuple[Keypair, ...] = ()
    lookup: bool = False
    authority_signs: bool = True

    def transaction(self) -> VersionedTransaction:
        transfer = transfer_checked(
            TransferCheckedParams(
                program_id=TOKEN_PROGRAM_ID,
                source=get_associated_token_address(PAYER.pubkey(), self.mint),
                mint=self.mint,
                dest=self.dest,
                owner=PAYER.pubkey(),
                amount=self.amount,
                decimals=6,
            )
        )
        if not self.authority_signs:  # a stranger signs in its place, as a multisig signer
            metas = [AccountMeta(m.pubkey, False, m.is_writable) for m in transfer.accounts]
            metas.append(AccountMeta(STRANGER.pubkey(), True, False))
            transfer = Instruction(transfer.program_id, transfer.data, metas)
        ixs = [set_compute_unit_limit(self.limit)]
        if self.price is not None:
            ixs.append(set_compute_unit_price(self.price))
        ixs += [transfer, Instruction(MEMO_PROGRAM, self.memo, [])]
        ixs = self.edit(ixs)
        for extra in self.extra_signers:
            ixs.append(Instruction(MEMO_PROGRAM, b"x", [AccountMeta(extra.pubkey(), True, False)]))
        tables = []
        if self.lookup:
            tables = [AddressLookupTableAccount(Keypair().pubkey(), [Keypair().pubkey()])]
            ixs.append(
                Instruction(MEMO_PROGRAM, b"y", [AccountMeta(tables[0].addresses[0], False, True)])
            )
        message = MessageV0.try_compile(self.fee_payer, ixs, tables, Hash.new_unique())
        signers = [PAYER if self.authority_signs else STRANGER, *self.extra_signers]
        sigs = [Signature.default()] + [
            k.sign_message(to_bytes_versioned(message)) for k in signers
        ]
        return VersionedTransaction.populate(message, sigs)

    def but(self, **changes: object) -> Payment:
        return replace(self, **changes)  # type: ignore[arg-type]


def refusal(pay: Payment, option: PaymentOption = OPTION) -> tuple[str, str]:
    with pytest.raises(SettlementError) as caught:
        rules.check_payment(pay.transaction(), option, FACILITATOR.pubkey())
    assert caught.value.status == 400
    return caught.value.name, caught.value.message


def test_the_payment_build_payment_makes_passes_and_names_its_payer() -> None:
    assert rules.check_payment(Payment().transaction(), OPTION, FACILITATOR.pubkey()) == (
        PAYER.pubkey()
    )
    assert rules.check_payment(Payment(price=None).transaction(), OPTION, FACILITATOR.pubkey())


def test_what_is_not_a_transaction_is_refused() -> None:
    with pytest.raises(SettlementError) as caught:
        rules.decode_payment(b"\x01not a transaction")
    assert (caught.value.name, caught.value.status) == ("InvalidTransaction", 400)
    tx = Payment().transaction()
    assert rules.decode_payment(bytes(tx)) == tx


@pytest.mark.parametrize(
    ("pay", "words"),
    [
        (Payment(fee_payer=Keypair().pubkey()), "the fee payer must be the facilitator"),
        (Payment(extra_signers=(Keypair(),)), "exactly two signers"),
        (Payment(lookup=True), "lookup tables"),
        (Payment(limit=200_001), "compute unit limit above 200000"),
        (Payment(limit=200_000, price=250_001), "priority fee above 50000 lamports"),
        (Payment(price=1_000_001), "compute unit price above 1000000"),
        (Payment(edit=lambda ixs: ixs[1:]), "need exactly one SetComputeUnitLimit"),
        (Payment(edit=lambda ixs: [ixs[0], *ixs]), "need exactly one SetComputeUnitLimit"),
        (Payment(edit=lambda ixs: ixs[:-1]), "one TransferChecked and one memo"),
        (Payment(edit=lambda ixs: [*ixs, ixs[-1]]), "one TransferChecked and one memo"),
        (Payment(edit=lambda ixs: [*ixs, ixs[2]]), "one TransferChecked and one memo"),
        (
            Payment(edit=lambda ixs: [*ixs, Instruction(Keypair().pubkey(), b"", [])]),
            "is not allowed",
        ),
        (
            Payment(
                edit=lambda ixs: [
                    *ixs,
                    Instruction(
                        MEMO_PROGRAM, b"m", [AccountMeta(FACILITATOR.pubkey(), True, True)]
                    ),
                ]
            ),
            "uses the facilitator's key",
        ),
        (
            Payment(edit=lambda ixs: [*ixs[:-1], Instruction(ixs[0].program_id, b"\x04", [])]),
            "only compute unit limit and price",
        ),
        (Payment(authority_signs=False), "must sign"),
    ],
)
def test_each_malformed_payment_is_invalid_with_its_reason(pay: Payment, words: str) -> None:
    name, message = refusal(pay)
    assert name == "InvalidTransaction" and words in message, message


@pytest.mark.parametrize(
    ("pay", "what"),
    [
        (Payment(amount=249_999), "amount"),
        (Payment(amount=250_001), "amount"),  # exactly the price: svcpay proofs are exact
        (Payment(dest=Keypair().pubkey()), "destination"),
        (Payment(mint=Keypair().pubkey()), "mint"),
        (Payment(memo=b"svcpay:v1:other"), "memo"),
    ],
)
def test_a_transfer_that_differs_from_the_terms_is_a_mismatch(pay: Payment, what: str) -> None:
    name, message = refusal(pay)
    assert name == "TermsMismatch" and message.startswith(f"the transfer's {what} is"), message


def test_a_forged_authority_signature_is_refused() -> None:
    tx = Payment().transaction()
    forged = VersionedTransaction.populate(
        tx.message, [tx.signatures[0], Keypair().sign_message(to_bytes_versioned(tx.message))]
    )
    with pytest.raises(SettlementError, match="signature does not verify"):
        rules.check_payment(forged, OPTION, FACILITATOR.pubkey())


def test_terms_of_a_zero_amount_are_an_invalid_request() -> None:
    free = OPTION.model_copy(update={"amount": "0"})
    assert refusal(Payment(amount=0), free)[0] == "InvalidRequest"


def test_an_index_past_the_accounts_is_invalid_not_a_crash() -> None:
    tx = Payment().transaction()
    data = bytearray(bytes(tx))
    # The memo instruction's program id index is its first byte; point it past the keys.
    memo_data = b"svcpay:v1:abc"
    at = bytes(data).rindex(bytes([len(memo_data)]) + memo_data) - 2
    data[at] = 0xFF
    broken = VersionedTransaction.from_bytes(bytes(data))
    with pytest.raises(SettlementError) as caught:
        rules.check_payment(broken, OPTION, FACILITATOR.pubkey())
    assert (caught.value.name, "lacks" in caught.value.message) == ("InvalidTransaction", True)


def test_a_payment_at_both_budget_caps_passes() -> None:
    """The caps are inclusive: 200,000 units (a hooked transfer's room), 1,000,000
    micro-lamports a unit, and 50,000 lamports of priority fee whatever the split (ADR
    0008); one more of any is refused above."""
    for limit, price in ((50_000, rules.MAX_COMPUTE_UNIT_PRICE), (200_000, 250_000)):
        at_caps = Payment(limit=limit, price=price)
        assert rules.check_payment(at_caps.transaction(), OPTION, FACILITATOR.pubkey()) == (
            PAYER.pubkey()
        )
