"""One-time payment checks in a Token-2022 mint (docs/adr/0031), as pure functions: x402
`exact` (`svm.check_payment`), svcpay's /authorize (`svcpay_proof.facilitator`) and MPP
`charge` (`mpp_charge.svm.check_charge`) judge a transfer-fee mint's payment by what the
payee receives (the amount less the fee the mint withholds this epoch), an SPL Token mint's
or a fee-less Token-2022 mint's as before, and accept a hooked mint's extra accounts on the
TransferChecked, nothing else. The mints are parsed from account bytes as Token-2022 lays
them out."""

from __future__ import annotations

import pytest
from solders.hash import Hash
from solders.instruction import AccountMeta
from solders.keypair import Keypair
from solders.pubkey import Pubkey

from svcpay.protocol import token2022 as t22
from svcpay.protocol.models import PaymentOption
from svcpay.protocol.programs import TOKEN_2022_PROGRAM, TOKEN_PROGRAM
from svcpay.protocol.settlement import SettlementError
from svcpay.protocol.token2022 import ExtensionType as ET
from svcpay.schemes.mpp_charge.svm import Charge, ChargeRefused, check_charge
from svcpay.schemes.svcpay_proof import facilitator as proof_rules
from svcpay.schemes.x402_exact import svm
from svcpay.schemes.x402_exact.wire import Reason
from tests.protocol.test_token2022 import extended_mint, fee_config, transfer_fee
from tests.support.x402_tx import ExactPayment

PRICE = 300_000  # 0.3 of a 6-decimal mint
FEE_BPS, MAX_FEE = 150, 10_000  # 1.5%, at most 0.01
GROSS = 304_569  # the smallest amount that nets PRICE: fee 4,569
MEMO = "svcpay:v1:fee-mint"


def fee_mint(*, older: bytes | None = None, newer: bytes | None = None) -> t22.MintInfo:
    """A Token-2022 mint with a TransferFeeConfig, parsed from its account data."""
    schedule = transfer_fee(0, MAX_FEE, FEE_BPS)
    data = extended_mint((ET.TRANSFER_FEE_CONFIG, fee_config(older or schedule, newer or schedule)))
    return t22.mint_info(TOKEN_2022_PROGRAM, data)


FEE_MINT = fee_mint().at(epoch=5)
PLAIN_2022 = t22.MintAtEpoch(TOKEN_2022_PROGRAM)


def pay(amount: int, **changes: object) -> ExactPayment:
    return ExactPayment(
        payer=Keypair(),
        fee_payer=Keypair().pubkey(),
        mint=Keypair().pubkey(),
        pay_to=Keypair().pubkey(),
        amount=amount,
        blockhash=Hash.new_unique(),
        memo=MEMO,
        program=TOKEN_2022_PROGRAM,
    ).but(**changes)


def x402(p: ExactPayment, mint: t22.MintAtEpoch | None) -> svm.Transfer:
    return svm.check_payment(
        p.transaction(), fee_payer=p.fee_payer, asset=str(p.mint), pay_to=str(p.pay_to),
        amount=PRICE, memo=MEMO, mint=mint,
    )  # fmt: skip


def x402_refusal(p: ExactPayment, mint: t22.MintAtEpoch | None) -> svm.Refusal:
    with pytest.raises(svm.Refusal) as caught:
        x402(p, mint)
    return caught.value


def option_for(p: ExactPayment) -> PaymentOption:
    return PaymentOption(
        scheme="exact",
        network="solana-localnet",
        token=str(p.mint),
        amount=str(PRICE),
        pay_to=str(t22_ata(p)),
        memo=MEMO,
    )


def t22_ata(p: ExactPayment) -> Pubkey:
    return svm.associated_token_address(p.pay_to, p.mint, p.program)


def proof(p: ExactPayment, mint: t22.MintAtEpoch | None) -> proof_rules.Paid:
    return proof_rules.check_transfer(p.transaction(), option_for(p), p.fee_payer, mint)


def charge(p: ExactPayment, mint: t22.MintAtEpoch | None, *, pull: bool = True) -> Charge:
    return check_charge(
        p.transaction(), mint=str(p.mint), recipient=str(p.pay_to), amount=PRICE, decimals=6,
        memo=MEMO, fee_payer=p.fee_payer if pull else None, mint_now=mint,
    )  # fmt: skip


# -- the mint at an epoch ---------------------------------------------------------------------
def test_a_fee_mint_at_an_epoch_says_its_fee_and_the_gross_that_nets_the_price() -> None:
    assert FEE_MINT.has_fee and FEE_MINT.program == TOKEN_2022_PROGRAM
    assert FEE_MINT.fee_for(PRICE) == 4_500
    assert FEE_MINT.gross_for_net(PRICE) == GROSS
    assert (FEE_MINT.fee_for(GROSS), FEE_MINT.received(GROSS)) == (4_569, PRICE)
    assert FEE_MINT.received(GROSS - 1) == PRICE - 1
    assert FEE_MINT.fee_for(10**12) == MAX_FEE  # capped
    assert not PLAIN_2022.has_fee and PLAIN_2022.gross_for_net(PRICE) == PRICE


def test_the_schedule_in_force_is_the_epochs() -> None:
    info = fee_mint(older=transfer_fee(0, MAX_FEE, 100), newer=transfer_fee(9, MAX_FEE, 200))
    assert info.at(8).fee_for(PRICE) == 3_000  # 1%
    assert info.at(9).fee_for(PRICE) == 6_000  # 2% from epoch 9 on
    assert t22.mint_info(TOKEN_PROGRAM, extended_mint()[:82]).at(9) == t22.MintAtEpoch(
        TOKEN_PROGRAM
    )  # an SPL mint: no fee, no hook


def test_a_shortfall_says_what_arrives_and_what_to_send() -> None:
    assert t22.shortfall(FEE_MINT, GROSS, PRICE) is None
    assert t22.shortfall(FEE_MINT, PRICE, PRICE) == (
        "of which the mint's transfer fee withholds 4500: 295500 arrives, short of 300000 "
        "(send 304569)"
    )


def test_names_token_2022_tells_which_payments_need_the_mint() -> None:
    assert t22.names_token_2022(pay(PRICE).transaction())
    assert not t22.names_token_2022(pay(PRICE, program=TOKEN_PROGRAM).transaction())


# -- x402 `exact` -----------------------------------------------------------------------------
def test_x402_a_fee_mint_payment_passes_when_the_payee_receives_the_price() -> None:
    transfer = x402(pay(GROSS), FEE_MINT)
    assert (transfer.amount, transfer.fee, transfer.net) == (GROSS, 4_569, PRICE)
    more = x402(pay(GROSS + 1_000), FEE_MINT)  # `exact` takes at least the price, as before
    assert more.net >= PRICE


def test_x402_the_price_itself_underpays_a_fee_mint_and_says_by_how_much() -> None:
    refused = x402_refusal(pay(PRICE), FEE_MINT)
    assert refused.reason == Reason.AMOUNT_INSUFFICIENT
    assert refused.message == (
        "the transfer pays 300000, of which the mint's transfer fee withholds 4500: 295500 "
        "arrives, short of 300000 (send 304569)"
    )
    assert x402_refusal(pay(GROSS - 1), FEE_MINT).reason == Reason.AMOUNT_INSUFFICIENT


def test_x402_without_a_fee_nothing_changes() -> None:
    for mint in (None, PLAIN_2022):
        transfer = x402(pay(PRICE), mint)
        assert (transfer.amount, transfer.fee, transfer.net) == (PRICE, None, PRICE)
        assert x402_refusal(pay(PRICE - 1), mint).message == (
            "the transfer pays 299999, the price is 300000"
        )
    spl = pay(PRICE, program=TOKEN_PROGRAM)
    assert x402(spl, None).fee is None


def test_x402_the_transfer_goes_through_the_mints_own_program() -> None:
    refused = x402_refusal(pay(GROSS, program=TOKEN_PROGRAM), FEE_MINT)
    assert refused.reason == Reason.MINT_MISMATCH and "is a mint of" in refused.message


def hooked(hook: Pubkey) -> t22.MintAtEpoch:
    return t22.MintAtEpoch(TOKEN_2022_PROGRAM, hook_program=hook)


def hook_tail(p: ExactPayment, hook: Pubkey) -> list[AccountMeta]:
    extra = AccountMeta(Pubkey.new_unique(), is_signer=False, is_writable=True)
    return [
        extra,
        AccountMeta(hook, is_signer=False, is_writable=False),
        AccountMeta(t22.validation_address(hook, p.mint), is_signer=False, is_writable=False),
    ]


def test_a_hooked_mints_transfer_may_carry_its_hooks_accounts_and_nothing_else() -> None:
    hook = Pubkey.new_unique()
    base = pay(PRICE)
    with_hook = base.but(transfer_extra=hook_tail(base, hook))
    assert x402(with_hook, hooked(hook)).amount == PRICE
    assert proof(with_hook, hooked(hook)).amount == PRICE
    assert charge(with_hook, hooked(hook))
    # The same accounts on a mint without a hook, a tail that is not the hook's, a stray
    # account: refused by all three.
    stray = base.but(transfer_extra=[AccountMeta(Pubkey.new_unique(), False, False)])
    wrong_tail = base.but(transfer_extra=hook_tail(base, Pubkey.new_unique()))
    for p, mint in ((with_hook, PLAIN_2022), (with_hook, None), (stray, hooked(hook))):
        refused = x402_refusal(p, mint)
        assert refused.reason == Reason.INVALID_PAYLOAD, refused.message
        with pytest.raises(SettlementError, match="past its four|ends its accounts"):
            proof(p, mint)
        with pytest.raises(ChargeRefused, match="past its four|ends its accounts"):
            charge(p, mint)
    refused = x402_refusal(wrong_tail, hooked(hook))
    assert "validation account" in refused.message


# -- svcpay's /authorize ----------------------------------------------------------------------
def test_svcpay_a_fee_mint_payment_is_judged_by_what_pay_to_receives() -> None:
    paid = proof(pay(GROSS), FEE_MINT)
    assert (paid.amount, paid.fee, paid.net, paid.token_program) == (
        GROSS,
        4_569,
        PRICE,
        TOKEN_2022_PROGRAM,
    )
    with pytest.raises(SettlementError) as caught:
        proof(pay(PRICE), FEE_MINT)
    assert caught.value.name == "TermsMismatch"
    assert caught.value.message == (
        "the transfer's amount is 300000, of which the mint's transfer fee withholds 4500: "
        "295500 arrives, short of 300000 (send 304569)"
    )


def test_svcpay_without_a_fee_the_amount_stays_exact_on_either_program() -> None:
    for program, mint in ((TOKEN_PROGRAM, None), (TOKEN_2022_PROGRAM, PLAIN_2022)):
        paid = proof(pay(PRICE, program=program), mint)
        assert (paid.amount, paid.fee, paid.net) == (PRICE, None, PRICE)
        with pytest.raises(SettlementError, match="amount is 300001, the terms say 300000"):
            proof(pay(PRICE + 1, program=program), mint)


# -- MPP `charge` -----------------------------------------------------------------------------
def test_mpp_a_fee_mint_charge_is_what_the_recipient_receives() -> None:
    for pull in (True, False):  # pulled (the server co-signs) or pushed (the payer sent it)
        paid = charge(pay(GROSS), FEE_MINT, pull=pull)
        assert (paid.amount, paid.fee, paid.net) == (GROSS, 4_569, PRICE)
    with pytest.raises(ChargeRefused, match="295500 arrives, short of 300000 .send 304569."):
        charge(pay(PRICE), FEE_MINT)
    plain = charge(pay(PRICE), PLAIN_2022)
    assert (plain.amount, plain.fee) == (PRICE, None)
    with pytest.raises(ChargeRefused, match="pays 300001, the charge is 300000"):
        charge(pay(PRICE + 1), PLAIN_2022)  # exact without a fee, as before
