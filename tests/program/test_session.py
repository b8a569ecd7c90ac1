"""Sessions (docs/adr/0024): open escrows the deposit; redeem pays what a voucher, verified
by the Ed25519 precompile in the same transaction, adds; close refunds the rest. Each
attack class of issue 23 is refused with its error; money is conserved throughout:
deposit = redeemed + refunded + held."""

from __future__ import annotations

from dataclasses import dataclass, replace

import pytest
from solders.instruction import AccountMeta, Instruction
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from solders.system_program import TransferParams, transfer

from svcpay.program import pda, sessions
from svcpay.program.generated.accounts.session import Session
from svcpay.program.session_client import pack
from svcpay.protocol.voucher import ED25519_PROGRAM, SignedVoucher, ed25519_instruction
from tests.support.asserts import assert_program_error
from tests.support.billing import TOKEN_2022, USDC, Billing
from tests.support.chain import Chain
from tests.support.clock import Clock
from tests.support.token2022 import hook_extra

DEPOSIT = 10 * USDC


@dataclass
class Party:
    chain: Chain
    mint: Pubkey
    payer: Keypair
    payer_token: Pubkey
    key: Keypair  # the session key that signs vouchers
    provider: Keypair
    recipient: Pubkey
    token_program: Pubkey
    extra: tuple[AccountMeta, ...]  # a hooked mint's accounts, on every transfer

    def open(self, session_id: int = 1, deposit: int = DEPOSIT, *, expires_in: int = 3600,
             dispute: int = 60) -> Pubkey:  # fmt: skip
        ix = sessions.open_session(
            self.payer.pubkey(), session_id, signer=self.key.pubkey(), mint=self.mint,
            payer_token=self.payer_token, recipient=self.recipient, deposit=deposit, price=1_000,
            expires_at=self.chain.unix_timestamp() + expires_in, dispute_secs=dispute,
            token_program=self.token_program, extra=self.extra,
        )  # fmt: skip
        self.chain.send_ok([ix], [self.payer])
        return pda.session_address(self.payer.pubkey(), session_id)

    def session(self, address: Pubkey) -> Session:
        data = self.chain.account(address)
        assert data is not None
        return Session.decode(data.data)

    def voucher(self, address: Pubkey, cumulative: int, expiry: int = 0) -> SignedVoucher:
        return SignedVoucher.sign(self.key, address, cumulative, expiry)

    def redeem(self, address: Pubkey, voucher: SignedVoucher, by: Keypair | None = None):  # type: ignore[no-untyped-def]
        ixs = sessions.redeem(self.session(address), address, voucher, extra=self.extra)
        return self.chain.send(ixs, [by or self.provider])

    def balance(self, account: Pubkey) -> int:
        return int(self.chain.token_state(account)["amount"])


@pytest.fixture
def party(chain: Chain, billing: Billing) -> Party:
    """A payer and a provider, with a mint of each token program (tests/program/conftest.py)."""
    payer, provider = chain.funded_keypair(), chain.funded_keypair()
    mint = billing.mint()
    payer_token = billing.token_account(payer.pubkey(), mint, 100 * USDC)
    recipient = billing.token_account(provider.pubkey(), mint)
    extra = hook_extra(chain, mint) if billing.kind == TOKEN_2022 else ()
    return Party(
        chain, mint, payer, payer_token, Keypair(), provider, recipient,
        billing.token_program, extra,
    )  # fmt: skip


def test_open_escrows_the_deposit(party: Party) -> None:
    address = party.open()
    s = party.session(address)
    assert (s.deposit, s.redeemed, s.signer, s.provider) == (
        DEPOSIT, 0, party.key.pubkey(), party.provider.pubkey()
    )  # fmt: skip
    assert party.balance(pda.vault_address(address)) == DEPOSIT
    assert party.balance(party.payer_token) == 90 * USDC


def test_a_voucher_pays_what_it_adds_once(party: Party) -> None:
    address = party.open()
    result = party.redeem(address, party.voucher(address, 3 * USDC))
    assert result.ok, result.logs
    assert result.event("SessionRedeemed").data["amount"] == 3 * USDC
    assert party.redeem(address, party.voucher(address, 5 * USDC)).ok
    assert party.balance(party.recipient) == 5 * USDC
    assert_program_error(party.redeem(address, party.voucher(address, 5 * USDC)), "VoucherNotNewer")
    assert_program_error(party.redeem(address, party.voucher(address, 4 * USDC)), "VoucherNotNewer")
    assert_program_error(
        party.redeem(address, party.voucher(address, DEPOSIT + 1)), "VoucherOverDeposit"
    )
    assert party.balance(party.recipient) == 5 * USDC


def test_forged_and_foreign_vouchers_are_refused(party: Party) -> None:
    address, other = party.open(1), party.open(2)
    forged = SignedVoucher.sign(Keypair(), address, USDC)  # not the session key
    assert_program_error(party.redeem(address, forged), "VoucherNotSigned")
    for_other = party.voucher(other, USDC)  # a real voucher, for another session
    ixs = [ed25519_instruction([for_other])]
    ixs.append(sessions.redeem_instruction(party.session(address), address, for_other, 0))
    assert_program_error(party.chain.send(ixs, [party.provider]), "VoucherNotSigned")
    assert party.balance(party.recipient) == 0


def test_a_signature_over_bytes_in_another_instruction_is_refused(party: Party) -> None:
    """The classic introspection trap: the precompile verifies a signature whose message
    lives in another instruction. Here the voucher's bytes ride at the end of the redeem
    instruction's own data (past its arguments), and the precompile points there."""
    address = party.open()
    v = party.voucher(address, USDC)
    redeem = sessions.redeem_instruction(party.session(address), address, v, 0)
    carrier = Instruction(redeem.program_id, bytes(redeem.data) + v.message, redeem.accounts)
    elsewhere = bytearray(ed25519_instruction([v]).data)
    elsewhere[2 + 8 : 2 + 10] = len(redeem.data).to_bytes(2, "little")  # message offset
    elsewhere[2 + 12 : 2 + 14] = (1).to_bytes(2, "little")  # message instruction: 1
    precompile = Instruction(ED25519_PROGRAM, bytes(elsewhere), [])
    result = party.chain.send([precompile, carrier], [party.provider])
    assert_program_error(result, "VoucherNotSigned")
    assert party.balance(party.recipient) == 0


def test_a_missing_precompile_is_refused(party: Party) -> None:
    address = party.open()
    v = party.voucher(address, USDC)
    alone = sessions.redeem_instruction(party.session(address), address, v, 0)
    assert_program_error(party.chain.send([alone], [party.provider]), "VoucherNotSigned")
    past_the_end = sessions.redeem_instruction(party.session(address), address, v, 7)
    assert_program_error(party.chain.send([past_the_end], [party.provider]), "VoucherNotSigned")


def test_two_redeems_of_one_session_in_one_transaction_fail_whole(party: Party) -> None:
    address = party.open()
    s = party.session(address)
    v = party.voucher(address, USDC)
    ixs = [ed25519_instruction([v])] + [sessions.redeem_instruction(s, address, v, 0)] * 2
    assert_program_error(party.chain.send(ixs, [party.provider]), "VoucherNotNewer")
    assert party.balance(party.recipient) == 0


def test_many_sessions_redeem_in_one_transaction(party: Party) -> None:
    addresses = [party.open(i) for i in range(1, 8)]
    batch = [(party.session(a), a, party.voucher(a, i * USDC)) for i, a in enumerate(addresses, 1)]
    extra = {a: party.extra for a in addresses}
    groups = pack(batch, party.provider.pubkey(), extra=extra)
    assert len(groups) < len(batch) and sum(map(len, groups)) == len(batch)
    for group in groups:  # as many sessions per transaction as fit
        result = party.chain.send(sessions.redeem_many(group, extra=extra), [party.provider])
        assert result.ok, result.logs
    assert party.balance(party.recipient) == 28 * USDC


def test_a_stranger_can_only_pay_the_provider(party: Party, chain: Chain) -> None:
    address = party.open()
    stranger = chain.funded_keypair()
    own = chain.token_account(stranger.pubkey(), party.mint, program_id=party.token_program)
    v = party.voucher(address, USDC)
    s = party.session(address)
    s_into_own = replace(s, recipient=own)
    result = chain.send(sessions.redeem(s_into_own, address, v, extra=party.extra), [stranger])
    assert_program_error(result, "DestinationMismatch")
    assert party.redeem(address, v, by=stranger).ok  # to the provider: allowed
    assert party.balance(party.recipient) == USDC and party.balance(own) == 0


def test_close_refunds_the_rest_and_nothing_redeems_after(party: Party) -> None:
    address = party.open()
    assert party.redeem(address, party.voucher(address, 4 * USDC)).ok
    s = party.session(address)
    result = party.chain.send(
        [sessions.close(s, address, party.provider.pubkey(), extra=party.extra)], [party.provider]
    )
    assert result.ok, result.logs
    assert result.event("SessionClosed").data["refunded"] == 6 * USDC
    assert party.balance(party.payer_token) == 96 * USDC
    assert party.chain.account(pda.vault_address(address)) is None  # closed, rent back
    tomb = party.chain.account(address)  # an empty account of the program (docs/adr/0037)
    assert tomb is not None and tomb.data == b"" and tomb.owner == pda.PROGRAM_ID
    # deposit = redeemed + refunded + held
    assert 4 * USDC + 6 * USDC + 0 == DEPOSIT
    late = sessions.redeem(s, address, party.voucher(address, 5 * USDC), extra=party.extra)
    assert_program_error(party.chain.send(late, [party.provider]), "SessionClosed")
    reopen = sessions.open_session(
        party.payer.pubkey(), 1, signer=party.key.pubkey(), mint=party.mint,
        payer_token=party.payer_token, recipient=party.recipient, deposit=USDC, price=1,
        expires_at=party.chain.unix_timestamp() + 60, dispute_secs=60,
    )  # fmt: skip
    assert not party.chain.send([reopen], [party.payer]).ok  # its address is never reused


def test_the_payer_closes_alone_only_after_the_dispute_window(party: Party, clock: Clock) -> None:
    dispute = clock.days(2)
    address = party.open(dispute=dispute, expires_in=clock.days(30))
    s = party.session(address)
    payer_close = sessions.close(s, address, party.payer.pubkey(), extra=party.extra)
    assert_program_error(party.chain.send([payer_close], [party.payer]), "DisputeWindowOpen")
    assert party.chain.send([sessions.request_close(s, address)], [party.payer]).ok
    assert_program_error(
        party.chain.send([sessions.top_up(s, address, USDC, extra=party.extra)], [party.payer]),
        "SessionNotOpen",
    )
    # the provider may still redeem its last voucher during the window
    assert party.redeem(address, party.voucher(address, 2 * USDC)).ok
    assert_program_error(party.chain.send([payer_close], [party.payer]), "DisputeWindowOpen")
    clock.advance(dispute + 1)
    result = party.chain.send(
        [sessions.close(s, address, party.payer.pubkey(), extra=party.extra)], [party.payer]
    )
    assert result.ok, result.logs
    assert party.balance(party.payer_token) == 98 * USDC


def test_top_up_is_the_payers_and_only_extends(party: Party, chain: Chain) -> None:
    address = party.open()
    s = party.session(address)
    assert chain.send([sessions.top_up(s, address, 5 * USDC, extra=party.extra)], [party.payer]).ok
    assert party.session(address).deposit == 15 * USDC
    assert party.redeem(address, party.voucher(address, 12 * USDC)).ok  # over the first deposit
    stranger = chain.funded_keypair()
    chain.token_account(stranger.pubkey(), party.mint, USDC, program_id=party.token_program)
    theirs = replace(s, payer=stranger.pubkey(), refund=party.payer_token)
    assert_program_error(
        chain.send([sessions.top_up(theirs, address, USDC)], [stranger]), "Unauthorized"
    )
    earlier = sessions.top_up(s, address, USDC, expires_at=s.expires_at - 1, extra=party.extra)
    assert_program_error(chain.send([earlier], [party.payer]), "InvalidExpiry")


def test_a_prefunded_vault_address_still_opens(party: Party, chain: Chain) -> None:
    address = pda.session_address(party.payer.pubkey(), 9)
    vault = pda.vault_address(address)
    griefer = chain.funded_keypair()
    gift = transfer(TransferParams(from_pubkey=griefer.pubkey(), to_pubkey=vault, lamports=10**6))
    chain.send_ok([gift], [griefer])
    assert party.open(9) == address
    assert party.balance(vault) == DEPOSIT
