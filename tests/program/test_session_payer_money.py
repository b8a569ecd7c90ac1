"""A payer's money in a session (issue 38, docs/adr/0037). Whatever the provider does to its
recipient account (closes it, has it frozen by the mint's freeze authority, turns on
Token-2022's memo-required), the payer's close refunds every unredeemed unit; the
recipient's due waits in the vault for `withdraw_session`, and a second close then returns
the rents. A close returns the vault's rent and the session's, less an empty tombstone's,
and the tombstone keeps the address (and so its vouchers) from ever being used again. A
session key that is the provider's, or a small-order Ed25519 point, is refused at open.
Each runs on both validators (scripts/test's solana-test-validator stage runs every
program test but the attack suite)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from solders.instruction import Instruction
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from solders.system_program import CreateAccountParams, create_account
from spl.token.instructions import close_account, freeze_account, initialize_account, thaw_account
from spl.token.models import (
    CloseAccountParams,
    FreezeAccountParams,
    InitializeAccountParams,
    ThawAccountParams,
)

from svcpay.program import pda, sessions
from svcpay.program.generated.accounts.session import Session
from svcpay.protocol import token2022 as t22
from svcpay.protocol.programs import TOKEN_2022_PROGRAM, TOKEN_PROGRAM
from svcpay.protocol.voucher import SignedVoucher, ed25519_instruction
from tests.support.asserts import assert_program_error
from tests.support.billing import USDC
from tests.support.chain import Chain, TxResult
from tests.support.clock import Clock
from tests.support.token2022 import t22_mint

DEPOSIT = 200 * USDC // 1000  # 200,000 base units, as in the report
DISPUTE = 2  # the tests wait it out (a real validator keeps real time)
TOKEN_ACCOUNT_LEN = 165


@dataclass
class Case:
    chain: Chain
    clock: Clock
    mint: Pubkey
    token_program: Pubkey
    payer: Keypair
    payer_token: Pubkey
    provider: Keypair
    recipient: Pubkey
    key: Keypair

    def open(self, session_id: int = 1, signer: Pubkey | None = None) -> TxResult:
        ix = sessions.open_session(
            self.payer.pubkey(), session_id, signer=signer or self.key.pubkey(), mint=self.mint,
            payer_token=self.payer_token, recipient=self.recipient, deposit=DEPOSIT, price=1,
            expires_at=self.chain.unix_timestamp() + 3600, dispute_secs=DISPUTE,
            token_program=self.token_program,
        )  # fmt: skip
        return self.chain.send([ix], [self.payer])

    def opened(self, session_id: int = 1) -> Pubkey:
        result = self.open(session_id)
        assert result.ok, result.logs
        return pda.session_address(self.payer.pubkey(), session_id)

    def session(self, address: Pubkey) -> Session:
        account = self.chain.account(address)
        assert account is not None and account.data, f"no session data at {address}"
        return Session.decode(account.data)

    def redeem_only(self, address: Pubkey, cumulative: int) -> None:
        """The provider records a voucher's claim and does not withdraw it."""
        v = SignedVoucher.sign(self.key, address, cumulative)
        redeem = sessions.redeem_instruction(self.session(address), address, v, 0)
        ixs = [ed25519_instruction([v]), redeem]
        self.chain.send_ok(ixs, [self.provider])

    def close(self, address: Pubkey, by: Keypair) -> TxResult:
        ix = sessions.close(self.session(address), address, by.pubkey())
        return self.chain.send([ix], [by])

    def payer_closes(self, address: Pubkey) -> TxResult:
        """The payer's unilateral close: a request, the dispute window, the close."""
        request = sessions.request_close(self.session(address), address)
        self.chain.send_ok([request], [self.payer])
        self.clock.advance(DISPUTE + 1)
        return self.close(address, self.payer)

    def balance(self, account: Pubkey) -> int:
        return int(self.chain.token_state(account)["amount"])


def case(chain: Chain, clock: Clock, mint: Pubkey, program: Pubkey, recipient: Pubkey | None = None,
         provider: Keypair | None = None) -> Case:  # fmt: skip
    payer, provider = chain.funded_keypair(), provider or chain.funded_keypair()
    payer_token = chain.token_account(payer.pubkey(), mint, DEPOSIT, program_id=program)
    if recipient is None:
        recipient = chain.token_account(provider.pubkey(), mint, program_id=program)
    return Case(chain, clock, mint, program, payer, payer_token, provider, recipient, Keypair())


def own_token_account(
    chain: Chain, owner: Keypair, mint: Pubkey, account: Keypair
) -> list[Instruction]:
    """A token account at a keypair's address (not an associated one): its owner can close
    it, and make it again at the same address."""
    create = CreateAccountParams(
        from_pubkey=chain.payer.pubkey(), to_pubkey=account.pubkey(),
        lamports=chain.minimum_balance(TOKEN_ACCOUNT_LEN), space=TOKEN_ACCOUNT_LEN,
        owner=TOKEN_PROGRAM,
    )  # fmt: skip
    init = InitializeAccountParams(
        program_id=TOKEN_PROGRAM, account=account.pubkey(), mint=mint, owner=owner.pubkey()
    )
    return [create_account(create), initialize_account(init)]


def assert_refunded_and_held(
    c: Case, address: Pubkey, result: TxResult, owed: int, *, again: bool = False
) -> None:
    """The close went through: every unredeemed unit is back (now, or `again`: before),
    the due waits."""
    assert result.ok, result.logs
    closed = result.event("SessionClosed").data
    assert (closed["refunded"], closed["unpaid"]) == (0 if again else DEPOSIT - owed, owed)
    assert c.balance(c.payer_token) == DEPOSIT - owed
    assert c.balance(pda.vault_address(address)) == owed
    s = c.session(address)
    assert s.status.kind == "Closed"  # type: ignore[attr-defined]
    assert (s.redeemed, s.withdrawn, s.deposit) == (owed, 0, owed)
    # Closed means closed: no voucher, top-up or request acts on it any more.
    newer = SignedVoucher.sign(c.key, address, owed + 1)
    redeem = [ed25519_instruction([newer]), sessions.redeem_instruction(s, address, newer, 0)]
    assert_program_error(c.chain.send(redeem, [c.provider]), "SessionClosed")
    top_up = sessions.top_up(s, address, 1)
    assert_program_error(c.chain.send([top_up], [c.payer]), "SessionNotOpen")


def assert_buried(c: Case, address: Pubkey, result: TxResult) -> None:
    """The last close: the vault is gone, the session is an empty tombstone of the program."""
    assert result.ok, result.logs
    assert result.event("SessionClosed").data["unpaid"] == 0
    assert c.chain.account(pda.vault_address(address)) is None
    tomb = c.chain.account(address)
    assert tomb is not None and tomb.data == b"" and tomb.owner == pda.PROGRAM_ID
    assert tomb.lamports == c.chain.minimum_balance(0)


def test_a_closed_recipient_account_holds_no_refund(chain: Chain, clock: Clock) -> None:
    """The provider redeems 1 unit, does not withdraw, and closes its own (non-associated)
    recipient account: the payer's close still refunds 199,999. When the provider makes the
    account again, the unit is withdrawn and the session buried."""
    provider, account = chain.funded_keypair(), Keypair()
    mint = chain.create_mint()
    chain.send_ok(own_token_account(chain, provider, mint, account), [chain.payer, account])
    c = case(chain, clock, mint, TOKEN_PROGRAM, recipient=account.pubkey(), provider=provider)
    address = c.opened()
    c.redeem_only(address, 1)
    shut = close_account(
        CloseAccountParams(
            program_id=TOKEN_PROGRAM, account=account.pubkey(), dest=provider.pubkey(),
            owner=provider.pubkey(),
        )
    )  # fmt: skip
    chain.send_ok([shut], [provider])
    assert chain.account(account.pubkey()) is None

    assert_refunded_and_held(c, address, c.payer_closes(address), owed=1)
    s = c.session(address)
    withdraw = sessions.withdraw(s, address)
    assert not chain.send([withdraw], [provider]).ok  # nowhere to pay it yet
    chain.send_ok(own_token_account(chain, provider, mint, account), [chain.payer, account])
    chain.send_ok([withdraw], [provider])
    assert c.balance(account.pubkey()) == 1
    assert_buried(c, address, c.close(address, c.payer))  # the payer takes its rent back


def test_a_frozen_recipient_holds_no_refund(chain: Chain, clock: Clock) -> None:
    """The mint's freeze authority (an issuer blacklisting the provider) freezes the
    recipient: the payer's close refunds; after the thaw the provider's close pays the
    due itself and buries the session."""
    mint = chain.create_mint(freeze_authority=chain.payer.pubkey())
    c = case(chain, clock, mint, TOKEN_PROGRAM)
    address = c.opened()
    c.redeem_only(address, 3_000)
    authority = chain.payer.pubkey()
    freeze = FreezeAccountParams(
        program_id=TOKEN_PROGRAM, account=c.recipient, mint=mint, authority=authority
    )
    chain.send_ok([freeze_account(freeze)], [chain.payer])

    assert_refunded_and_held(c, address, c.payer_closes(address), owed=3_000)
    still_frozen = c.close(address, c.provider)
    assert_refunded_and_held(c, address, still_frozen, owed=3_000, again=True)
    thaw = ThawAccountParams(
        program_id=TOKEN_PROGRAM, account=c.recipient, mint=mint, authority=authority
    )
    chain.send_ok([thaw_account(thaw)], [chain.payer])
    assert_buried(c, address, c.close(address, c.provider))
    assert c.balance(c.recipient) == 3_000
    assert c.balance(c.payer_token) == DEPOSIT - 3_000


def test_a_memo_required_recipient_holds_no_refund(chain: Chain, clock: Clock) -> None:
    """Token-2022's memo-required, which the provider turns on and off at will: the payer's
    close refunds; once it is off, the due is paid and the session buried."""
    mint = t22_mint(chain)
    c = case(chain, clock, mint, TOKEN_2022_PROGRAM)
    address = c.opened()
    c.redeem_only(address, 3_000)
    memo = [t22.ExtensionType.MEMO_TRANSFER]
    grow = t22.reallocate(c.recipient, chain.payer.pubkey(), c.provider.pubkey(), memo)
    memo_on = t22.enable_required_memo_transfers(c.recipient, c.provider.pubkey())
    chain.send_ok([grow, memo_on], [chain.payer, c.provider])

    assert_refunded_and_held(c, address, c.payer_closes(address), owed=3_000)
    memo_off = t22.disable_required_memo_transfers(c.recipient, c.provider.pubkey())
    chain.send_ok([memo_off], [c.provider])
    assert_buried(c, address, c.close(address, c.payer))
    assert c.balance(c.recipient) == 3_000


@pytest.mark.parametrize("program", [TOKEN_PROGRAM, TOKEN_2022_PROGRAM], ids=["spl", "t22"])
def test_a_close_returns_both_rents_and_the_tombstone_keeps_the_address(
    chain: Chain, clock: Clock, program: Pubkey
) -> None:
    mint = chain.create_mint(program_id=program)
    c = case(chain, clock, mint, program)
    address = c.opened()
    v = SignedVoucher.sign(c.key, address, 5_000)
    chain.send_ok(sessions.redeem(c.session(address), address, v), [c.provider])
    s = c.session(address)
    session_rent = chain.balance(address)
    vault_rent = chain.balance(pda.vault_address(address))
    before = chain.balance(c.payer.pubkey())
    result = c.close(address, c.provider)  # the provider pays the fee: the payer's delta is rent
    assert_buried(c, address, result)
    returned = chain.balance(c.payer.pubkey()) - before
    assert returned == vault_rent + session_rent - chain.minimum_balance(0)
    print(f"rent returned at close: {returned:,} lamports of {vault_rent + session_rent:,}")
    assert c.balance(c.payer_token) == DEPOSIT - 5_000 and c.balance(c.recipient) == 5_000

    # The tombstone: no old voucher redeems, nothing reopens at the address, no second close.
    newer = SignedVoucher.sign(c.key, address, 6_000)
    redeem = [ed25519_instruction([newer]), sessions.redeem_instruction(s, address, newer, 0)]
    assert_program_error(chain.send(redeem, [c.provider]), "SessionClosed")
    assert not c.open(1).ok
    assert chain.account(address).data == b""  # type: ignore[union-attr]
    close_again = sessions.close(s, address, c.provider.pubkey())
    assert_program_error(chain.send([close_again], [c.provider]), "SessionClosed")


def test_session_keys_the_provider_could_use_are_refused(chain: Chain, clock: Clock) -> None:
    mint = chain.create_mint()
    c = case(chain, clock, mint, TOKEN_PROGRAM)
    assert_program_error(c.open(1, signer=c.provider.pubkey()), "InvalidSessionKey")
    assert_program_error(c.open(2, signer=Pubkey.default()), "InvalidSessionKey")
    p_with_sign = bytes([0xED] + [0xFF] * 30 + [0xFF])  # p, sign bit set: y = 0, small order
    assert_program_error(c.open(3, signer=Pubkey.from_bytes(p_with_sign)), "InvalidSessionKey")
    order_8 = bytes.fromhex("26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05")
    assert_program_error(c.open(4, signer=Pubkey.from_bytes(order_8)), "InvalidSessionKey")
    assert c.open(5, signer=c.payer.pubkey()).ok  # the payer's own key is fine
    chain.mint_to(mint, c.payer_token, DEPOSIT)
    assert c.open(6).ok  # and a fresh session key
