"""Seeded random sequences of sessions, against a small model of their rules (issue 23).

Payers open sessions with a provider, top them up, sign vouchers (often stale, over the
deposit, for another session or by the wrong key), ask to close; the provider, the payer or
a stranger redeem and close, often too early or without the right. After every step the
program's outcome must be the model's, and money must add up from the chain alone: for each
session, deposits = redeemed + refunded + held; the provider never holds more than the payer
signed; the token supply does not change.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace

import pytest
from solders.keypair import Keypair
from solders.pubkey import Pubkey

from svcpay.localnet.process import TEST_VALIDATOR, backend
from svcpay.program import pda, sessions
from svcpay.program.generated.accounts.session import Session
from svcpay.protocol.voucher import SignedVoucher
from tests.support.billing import TOKEN_2022, USDC, Billing
from tests.support.chain import Chain, TxResult
from tests.support.clock import Clock
from tests.support.token2022 import hook_extra

DROP_IN_SEEDS, DROP_IN_STEPS = (1, 2), 120
TEST_VALIDATOR_SEEDS, TEST_VALIDATOR_STEPS = (3,), 25
OK = "ok"


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "seed" in metafunc.fixturenames:
        real = backend() == TEST_VALIDATOR
        metafunc.parametrize("seed", TEST_VALIDATOR_SEEDS if real else DROP_IN_SEEDS)


@dataclass
class Model:
    """One session as the program should see it."""

    payer: Keypair
    payer_token: Pubkey
    key: Keypair
    deposit: int
    expires_at: int
    dispute: int
    redeemed: int = 0
    refunded: int = 0
    signed: int = 0  # the highest cumulative the payer ever signed
    status: str = "Open"
    close_requested_at: int = 0
    deposits: list[int] = field(default_factory=list)

    def payer_may_close_from(self) -> int:
        """The first time the payer may close alone."""
        ends = [self.expires_at + self.dispute]
        if self.status == "Closing":
            ends.append(self.close_requested_at + self.dispute)
        return min(ends)


class Run:
    def __init__(self, chain: Chain, clock: Clock, seed: int, billing: Billing) -> None:
        self.chain, self.clock, self.rng = chain, clock, random.Random(seed)
        self.mint = billing.mint()
        self.token_program = billing.token_program
        self.extra = hook_extra(chain, self.mint) if billing.kind == TOKEN_2022 else ()
        self.provider = chain.funded_keypair()
        self.recipient = billing.token_account(self.provider.pubkey(), self.mint)
        self.stranger = chain.funded_keypair()
        self.payers = [chain.funded_keypair() for _ in range(2)]
        self.tokens = {p.pubkey(): billing.token_account(p.pubkey(), self.mint, 1_000 * USDC)
                       for p in self.payers}  # fmt: skip
        self.sessions: dict[Pubkey, Model] = {}
        self.seen: dict[Pubkey, Session] = {}
        self.next_id = 1
        self.outcomes: dict[str, int] = {}
        self.supply = self.total()

    def total(self) -> int:
        accounts = [self.recipient, *self.tokens.values()]
        accounts += [pda.vault_address(a) for a in self.sessions]
        return sum(self.balance(a) for a in accounts)

    def balance(self, account: Pubkey) -> int:
        return int(self.chain.token_state(account)["amount"]) if self.chain.account(account) else 0

    def state(self, address: Pubkey) -> Session:
        """The session; for a closed one (an empty tombstone, docs/adr/0037) the last state
        seen, which instructions aimed at it are still built from."""
        found = self.chain.account(address)
        assert found is not None
        if found.data:
            self.seen[address] = Session.decode(found.data)
        return self.seen[address]

    def expect(self, result: TxResult, want: str, what: str) -> None:
        got = OK if result.ok else (result.program_error.name if result.program_error else "failed")
        self.outcomes[f"{what}: {got}"] = self.outcomes.get(f"{what}: {got}", 0) + 1
        if want == "failed":
            assert not result.ok, f"{what}: expected a refusal, it succeeded"
        else:
            assert got == want, f"{what}: expected {want}, got {got}: {result.error}"

    # -- actions --------------------------------------------------------------------------
    def open(self) -> None:
        payer = self.rng.choice(self.payers)
        deposit = self.rng.randint(1, 20) * USDC
        key = Keypair()
        now = self.chain.unix_timestamp()
        expires_at = now + self.clock.days(self.rng.randint(2, 6))
        dispute = self.clock.days(1)
        ix = sessions.open_session(
            payer.pubkey(), self.next_id, signer=key.pubkey(), mint=self.mint,
            payer_token=self.tokens[payer.pubkey()], recipient=self.recipient, deposit=deposit,
            price=1_000, expires_at=expires_at, dispute_secs=dispute,
            token_program=self.token_program, extra=self.extra,
        )  # fmt: skip
        address = pda.session_address(payer.pubkey(), self.next_id)
        self.next_id += 1
        result = self.chain.send([ix], [payer])
        after = self.chain.unix_timestamp()
        # The program ran at some time between `now` and `after`: an expiry already past by
        # then is refused (on solana-test-validator a day is a second, and a loaded machine
        # may take that long to land it).
        want = "InvalidExpiry" if expires_at <= after and not result.ok else OK
        self.expect(result, want, "open")
        if want != OK:
            return
        model = Model(payer, self.tokens[payer.pubkey()], key, deposit, expires_at, dispute)
        model.deposits.append(deposit)
        self.sessions[address] = model

    def pick(self) -> tuple[Pubkey, Model] | None:
        if not self.sessions:
            return None
        address = self.rng.choice(sorted(self.sessions, key=str))
        return address, self.sessions[address]

    def top_up(self, address: Pubkey, m: Model) -> None:
        amount = self.rng.randint(1, 5) * USDC
        state = self.state(address)
        if m.status == "Closed":  # a tombstone: no session to top up, whoever asks
            ix = sessions.top_up(state, address, amount, extra=self.extra)
            self.expect(self.chain.send([ix], [m.payer]), "failed", "top-up")
            return
        if self.rng.random() < 0.2:  # a stranger tops up another's session
            theirs = replace(state, payer=self.stranger.pubkey())
            ix = sessions.top_up(theirs, address, amount, extra=self.extra)
            self.expect(self.chain.send([ix], [self.stranger]), "Unauthorized", "top-up")
            return
        want = OK if m.status == "Open" else "SessionNotOpen"
        ix = sessions.top_up(state, address, amount, extra=self.extra)
        self.expect(self.chain.send([ix], [m.payer]), want, "top-up")
        if want == OK:
            m.deposit += amount
            m.deposits.append(amount)

    def redeem(self, address: Pubkey, m: Model) -> None:
        roll = self.rng.random()
        if roll < 0.6:  # a fresh voucher, sometimes past the deposit
            cumulative = m.redeemed + self.rng.randint(1, USDC)
            if self.rng.random() < 0.15:
                cumulative = m.deposit + 1
            voucher = SignedVoucher.sign(m.key, address, cumulative)
        elif roll < 0.8:  # stale: what was already redeemed, or less
            stale = max(0, m.redeemed - self.rng.randint(0, 1))
            voucher = SignedVoucher.sign(m.key, address, stale)
        else:  # forged: another key
            voucher = SignedVoucher.sign(Keypair(), address, m.redeemed + 1)
        if voucher.signer == m.key.pubkey():
            m.signed = max(m.signed, voucher.cumulative)
        by = self.rng.choice([self.provider, self.stranger])
        result = self.chain.send(
            sessions.redeem(self.state(address), address, voucher, extra=self.extra), [by]
        )
        if m.status == "Closed":
            want = "SessionClosed"
        elif voucher.signer != m.key.pubkey():
            want = "VoucherNotSigned"
        elif voucher.cumulative <= m.redeemed:
            want = "VoucherNotNewer"
        elif voucher.cumulative > m.deposit:
            want = "VoucherOverDeposit"
        else:
            want = OK
        self.expect(result, want, "redeem")
        if want == OK:
            m.redeemed = voucher.cumulative

    def request_close(self, address: Pubkey, m: Model) -> None:
        ix = sessions.request_close(self.state(address), address)
        want = {"Open": OK, "Closed": "failed"}.get(m.status, "SessionNotOpen")
        before = self.chain.unix_timestamp()
        result = self.chain.send([ix], [m.payer])
        after = self.chain.unix_timestamp()
        self.expect(result, want, "request close")
        if want == OK:
            m.status, m.close_requested_at = "Closing", self.state(address).close_requested_at
            assert before <= m.close_requested_at <= after  # the time it ran

    def close(self, address: Pubkey, m: Model) -> None:
        by = self.rng.choice([self.provider, m.payer, self.stranger])
        who = {id(self.provider): "provider", id(m.payer): "payer"}.get(id(by), "stranger")
        ix = sessions.close(self.state(address), address, by.pubkey(), extra=self.extra)
        before = self.chain.unix_timestamp()
        result = self.chain.send([ix], [by])
        after = self.chain.unix_timestamp()
        if m.status == "Closed":
            want = "SessionClosed"
        elif who == "provider":
            want = OK
        elif who == "stranger":
            want = "Unauthorized"
        else:  # the payer, only after the window: the program ran at some time in between
            from_ = m.payer_may_close_from()
            if before >= from_:
                want = OK
            elif after < from_:
                want = "DisputeWindowOpen"
            else:
                want = OK if result.ok else "DisputeWindowOpen"
        self.expect(result, want, f"close by the {who}")
        if want == OK:
            m.refunded = m.deposit - m.redeemed
            m.status = "Closed"

    def close_all(self) -> None:
        for address, m in self.sessions.items():
            if m.status != "Closed":
                ix = sessions.close(
                    self.state(address), address, self.provider.pubkey(), extra=self.extra
                )
                self.expect(self.chain.send([ix], [self.provider]), OK, "close by the provider")
                m.refunded, m.status = m.deposit - m.redeemed, "Closed"
            self.check()

    def advance(self) -> None:
        self.clock.advance(self.clock.days(self.rng.randint(1, 3)))

    # -- invariants ---------------------------------------------------------------------------
    def check(self) -> None:
        redeemed = 0
        for address, m in self.sessions.items():
            found = self.chain.account(address)
            assert found is not None, address
            if m.status == "Closed":  # buried: an empty account of the program, rent returned
                assert found.data == b"" and found.lamports == self.chain.minimum_balance(0)
            else:
                s = self.state(address)
                assert s.redeemed == m.redeemed and type(s.status).__name__ == m.status, address
            held = self.balance(pda.vault_address(address))
            assert sum(m.deposits) == m.redeemed + m.refunded + held  # money is conserved
            assert m.redeemed <= m.signed  # the provider never holds more than was signed
            redeemed += m.redeemed
        assert self.balance(self.recipient) == redeemed
        assert self.total() == self.supply  # no token created or lost

    def step(self) -> None:
        # Redeems mostly; a session is closed about every tenth step.
        actions = ["open"] * 2 + ["top_up"] * 2 + ["redeem"] * 10 + ["request_close", "close"]
        actions += ["advance"]
        action = self.rng.choice(actions if self.sessions else ["open"])
        if action == "open":
            self.open()
        elif action == "advance":
            self.advance()
        else:
            picked = self.pick()
            if picked is not None:
                getattr(self, action)(*picked)
        self.check()


def test_random_session_sequences_conserve_money(
    chain: Chain, clock: Clock, seed: int, billing: Billing
) -> None:
    """On an SPL Token mint and on a PYUSD-like Token-2022 one (tests/program/conftest.py)."""
    run = Run(chain, clock, seed, billing)
    steps = DROP_IN_STEPS if chain.can_time_travel else TEST_VALIDATOR_STEPS
    for _ in range(steps):
        run.step()
    run.close_all()  # the provider settles up: every vault empties, every refund goes back
    print(sorted(run.outcomes.items()))
    assert run.outcomes.get("redeem: ok", 0) > 0  # the sequence went somewhere
    paid_in = sum(sum(m.deposits) for m in run.sessions.values())
    redeemed = sum(m.redeemed for m in run.sessions.values())
    assert sum(run.balance(t) for t in run.tokens.values()) == 2_000 * USDC - redeemed
    assert run.balance(run.recipient) == redeemed <= paid_in
