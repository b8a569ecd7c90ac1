"""Attack classes against svc_billing, each tried on every instruction it applies to.

Each case builds one scene on the live validator (provider A's plan with subscribers alice and
bob; where a case needs them, provider B's plan on the same mint with subscriber dave, a funded
carol who has not subscribed, a stranger), turns an honest transaction into an attack, and
checks three things: the attack fails with exactly the expected error, every account of the
scene (token accounts, plans, subscriptions, allowances, delegate PDAs) is byte for byte what
it was, and the honest transaction it was made from still goes through afterwards, so the
refusal came from the attack and not from a broken scene.

Two cases are not attacks and must work: addresses funded with lamports before the program
creates its account there, and closing a subscription then subscribing again in one
transaction.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path

import pytest
from solders.instruction import AccountMeta, Instruction
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from solders.system_program import ID as SYSTEM_PROGRAM_ID
from solders.system_program import TransferParams, transfer
from spl.token.constants import TOKEN_PROGRAM_ID
from spl.token.instructions import transfer_checked
from spl.token.models import TransferCheckedParams

from svcpay.program import errors, generated, instructions, pda, sessions
from svcpay.program.generated.accounts.allowance import Allowance
from svcpay.program.generated.accounts.session import Session
from svcpay.program.generated.program_id import PROGRAM_ID
from svcpay.program.generated.types.subscription_status import Active, PastDue
from svcpay.protocol.voucher import SignedVoucher
from tests.support.asserts import assert_program_error
from tests.support.billing import (
    USDC,
    Billing,
    Plan,
    Subscriber,
    collect_ix,
    create_plan_ix,
    deduct_ix,
    subscribe_ix,
)
from tests.support.chain import AccountData, Chain, TxResult
from tests.support.clock import Clock

MEMO_PROGRAM_ID = Pubkey.from_string("MemoSq4gqABAXKb96qnH8TysNcWxMyWCqXgDLGmfcHr")
TOKEN_2022_PROGRAM_ID = Pubkey.from_string("TokenzQdBNbLqP5VEhdkAS6EPFLC1PHnBqCXEpPxuEb")
# "token" is the scene's token program and "other_token" the other one (the scene runs with
# SPL Token and with Token-2022 mints: tests/program/conftest.py).
PROGRAMS = {
    "memo": MEMO_PROGRAM_ID,
    "system": SYSTEM_PROGRAM_ID,
    "svc_billing": PROGRAM_ID,
}

CAP = 5 * USDC  # every subscription of the scene has an allowance of this cap
BALANCE = 20 * USDC  # what each subscriber holds before subscribing (a period is 1 USDC)
SESSION_ID = 1  # alice's session
NEW_PLAN_ID = 1_000  # the id under which provider A creates a further plan
# Failures raised outside svc_billing and Anchor, and how each shows in a failed transaction.
RUNTIME_ERRORS: dict[str, Callable[[TxResult], bool]] = {
    # Anchor hands the SPL unpacking error on: a mint is not a token account, nor the reverse.
    "InvalidAccountData": lambda r: "InvalidAccountData" in str(r.error),
    # The system program will not create an account that exists (SystemError 0).
    "AccountAlreadyInUse": lambda r: (
        '{"Custom": 0}' in str(r.error) and any("already in use" in line for line in r.logs)
    ),
}

# Each instruction's accounts in order, from the IDL the client is generated from: attacks
# name the account they replace, never its position.
_IDL = json.loads((Path(generated.__file__).parent / "idl.json").read_text())
ACCOUNTS: dict[str, list[str]] = {
    ix["name"]: [a["name"] for a in ix["accounts"]] for ix in _IDL["instructions"]
}
SIGNERS = [
    (ix["name"], a["name"])
    for ix in _IDL["instructions"]
    for a in ix["accounts"]
    if a.get("signer")
]


@dataclass
class Attack:
    """One transaction: `prelude` instructions, then `ix` (an instruction called `name`)."""

    name: str
    ix: Instruction
    signers: list[Keypair]
    prelude: list[Instruction] = field(default_factory=list)

    def swap(self, **accounts: Pubkey) -> Attack:
        """This transaction with the named accounts of `ix` replaced."""
        metas = list(self.ix.accounts)
        for account, new in accounts.items():
            i = ACCOUNTS[self.name].index(account)
            metas[i] = AccountMeta(new, metas[i].is_signer, metas[i].is_writable)
        return replace(self, ix=Instruction(self.ix.program_id, self.ix.data, metas))

    def unsigned(self, account: str, payer: Keypair) -> Attack:
        """This transaction with `account` not signing, and `payer` paying the fee."""
        metas = list(self.ix.accounts)
        i = ACCOUNTS[self.name].index(account)
        signer = metas[i].pubkey
        metas[i] = AccountMeta(signer, False, metas[i].is_writable)
        others = [k for k in self.signers if k.pubkey() != signer]
        ix = Instruction(self.ix.program_id, self.ix.data, metas)
        return replace(self, ix=ix, signers=[payer, *others])

    def signed_by(self, account: str, keypair: Keypair) -> Attack:
        """This transaction with the signer `account` replaced by `keypair`, who signs."""
        metas = list(self.ix.accounts)
        i = ACCOUNTS[self.name].index(account)
        old = metas[i].pubkey
        metas[i] = AccountMeta(keypair.pubkey(), True, metas[i].is_writable)
        signers = [keypair if k.pubkey() == old else k for k in self.signers]
        ix = Instruction(self.ix.program_id, self.ix.data, metas)
        return replace(self, ix=ix, signers=signers)

    def after(self, prelude: Attack) -> Attack:
        """This transaction with `prelude`'s instructions first (its first signer pays)."""
        ixs = [*prelude.prelude, prelude.ix]
        required = {m.pubkey for ix in [*ixs, self.ix] for m in ix.accounts if m.is_signer}
        signers = prelude.signers[:1]
        for k in [*prelude.signers, *self.signers]:  # this one's fee payer may sign nothing
            if k.pubkey() in required and k.pubkey() not in {s.pubkey() for s in signers}:
                signers.append(k)
        return replace(self, prelude=ixs, signers=signers)

    def send(self, chain: Chain) -> TxResult:
        return chain.send([*self.prelude, self.ix], self.signers)

    def send_ok(self, chain: Chain) -> TxResult:
        return chain.send_ok([*self.prelude, self.ix], self.signers)


def off_bump(seeds: list[bytes]) -> Pubkey:
    """The address of `seeds` at the highest bump below the canonical one that is off the
    curve: a valid program address that the program itself never derives."""
    _, canonical = Pubkey.find_program_address(seeds, PROGRAM_ID)
    for bump in range(canonical - 1, -1, -1):
        try:
            return Pubkey.create_program_address([*seeds, bytes([bump])], PROGRAM_ID)
        except Exception:  # on the curve: not a program address, try the next bump
            continue
    raise AssertionError(f"no non-canonical bump for {seeds}")


class Scene:
    """Provider A's plan (`plan`) with subscribers alice and bob, built at once; the rest when
    a case first asks for it: provider B's plan (`other`, same mint) with subscriber dave, a
    plan without subscribers (`empty`), carol (funded, not subscribed), a stranger, a mint of
    another kind (`foreign`). Every subscriber subscribes with an allowance of `CAP`.

    Accounts are named `who.part` (`alice.token`, `bob.subscription`, `other.destination`,
    `dave.delegate`, `alice.allowance~` for the allowance at a non-canonical bump, ...); all
    that exist are watched: a refused attack must leave every one of them unchanged."""

    def __init__(self, chain: Chain, billing: Billing, clock: Clock) -> None:
        self.chain, self.billing, self.clock = chain, billing, clock
        self.period = clock.days(3)
        # Long enough that, on the real validator, a past-due subscription recovers in grace.
        self.grace = clock.days(8)
        self.watched: dict[str, Pubkey] = {}
        self.plan_of: dict[str, Plan] = {}
        self.plan = self._plan("plan")
        self.alice = self._subscriber("alice", self.plan)
        self.bob = self._subscriber("bob", self.plan)

    # -- the cast -------------------------------------------------------------------------
    def _plan(self, name: str, mint: Pubkey | None = None) -> Plan:
        plan = self.billing.plan(USDC, self.period, self.grace, mint=mint)
        self.watched |= {
            name: plan.address,
            f"{name}.destination": plan.destination,
            f"{name}.mint": plan.mint,
        }
        return plan

    def _subscriber(self, name: str, plan: Plan, subscribe: bool = True) -> Subscriber:
        sub = self.billing.subscriber(plan, BALANCE)
        self.plan_of[name] = plan
        subscription = pda.subscription_address(plan.address, sub.pubkey)
        self.watched |= {
            f"{name}.token": sub.token_account,
            f"{name}.subscription": subscription,
            f"{name}.allowance": pda.allowance_address(subscription),
            f"{name}.delegate": pda.delegate_address(sub.pubkey),
        }
        if subscribe:
            self.chain.send_ok([subscribe_ix(plan, sub, CAP)], [sub.keypair])
        return sub

    @cached_property
    def other(self) -> Plan:
        return self._plan("other", mint=self.plan.mint)

    @cached_property
    def empty(self) -> Plan:
        return self._plan("empty", mint=self.plan.mint)

    @cached_property
    def dave(self) -> Subscriber:
        return self._subscriber("dave", self.other)

    @cached_property
    def carol(self) -> Subscriber:
        return self._subscriber("carol", self.plan, subscribe=False)

    @cached_property
    def stranger(self) -> Keypair:
        return self.chain.funded_keypair()

    @cached_property
    def stranger_token(self) -> Pubkey:
        token = self.billing.token_account(self.stranger.pubkey(), self.plan.mint, BALANCE)
        self.watched["stranger.token"] = token
        return token

    @cached_property
    def foreign_mint(self) -> Pubkey:
        mint = self.billing.mint()
        self.watched["foreign.mint"] = mint
        return mint

    @cached_property
    def foreign_token(self) -> Pubkey:
        """Provider A's token account of the foreign mint."""
        token = self.billing.token_account(self.plan.authority.pubkey(), self.foreign_mint, BALANCE)
        self.watched["foreign.token"] = token
        return token

    @property
    def new_plan_seeds(self) -> list[bytes]:
        return [
            pda.PLAN_SEED,
            bytes(self.plan.authority.pubkey()),
            NEW_PLAN_ID.to_bytes(8, "little"),
        ]

    def subscriber(self, name: str) -> Subscriber:
        sub: Subscriber = getattr(self, name)
        return sub

    def keypair(self, name: str) -> Keypair:
        """A signer of the scene: `other.authority`, `other.billing`, `bob.wallet`, ..."""
        owner, _, part = name.partition(".")
        if owner in ("plan", "other", "empty"):
            plan: Plan = getattr(self, owner)
            return {"authority": plan.authority, "billing": plan.billing_authority}[part]
        assert part == "wallet", name
        return self.subscriber(owner).keypair

    def address(self, name: str) -> Pubkey:
        """The scene's account called `name` (see the class docstring); built if need be."""
        if name in PROGRAMS:
            return PROGRAMS[name]
        if name in ("token", "other_token"):
            ours = self.billing.token_program
            other = TOKEN_2022_PROGRAM_ID if ours == TOKEN_PROGRAM_ID else TOKEN_PROGRAM_ID
            return ours if name == "token" else other
        owner, _, part = name.partition(".")
        if owner in ("plan", "other", "empty"):
            plan: Plan = getattr(self, owner)
            return {"": plan.address, "destination": plan.destination, "mint": plan.mint}[part]
        if owner == "stranger":
            return self.stranger_token if part == "token" else self.stranger.pubkey()
        if owner == "foreign":
            return self.foreign_token if part == "token" else self.foreign_mint
        if name == "new_plan~":
            return off_bump(self.new_plan_seeds)
        if name == "plan~":
            plan_id = self.billing.plan_state(self.plan).plan_id.to_bytes(8, "little")
            return off_bump([pda.PLAN_SEED, bytes(self.plan.authority.pubkey()), plan_id])
        sub = self.subscriber(owner)
        plan = self.plan_of[owner]
        subscription_seeds = [pda.SUBSCRIPTION_SEED, bytes(plan.address), bytes(sub.pubkey)]
        subscription = pda.subscription_address(plan.address, sub.pubkey)
        match part:
            case "token":
                return sub.token_account
            case "wallet":
                return sub.pubkey
            case "subscription":
                return subscription
            case "allowance":
                return pda.allowance_address(subscription)
            case "delegate":
                return pda.delegate_address(sub.pubkey)
            case "subscription~":
                return off_bump(subscription_seeds)
            case "allowance~":
                return off_bump([pda.ALLOWANCE_SEED, bytes(subscription)])
            case "delegate~":
                return off_bump([pda.DELEGATE_SEED, bytes(sub.pubkey)])
            case "session":
                return pda.session_address(sub.pubkey, SESSION_ID)
            case "vault":
                return pda.vault_address(pda.session_address(sub.pubkey, SESSION_ID))
        raise KeyError(name)

    def snapshot(self) -> dict[str, AccountData | None]:
        return {name: self.chain.account(address) for name, address in self.watched.items()}

    # -- moving the story on ----------------------------------------------------------------
    def make_due(self) -> None:
        """Every subscription of the scene has reached the end of its paid period."""
        ends = [
            self.billing.subscription(plan, self.subscriber(name)).current_period_end
            for name, plan in self.plan_of.items()
            if self.chain.account(self.watched[f"{name}.subscription"]) is not None
        ]
        self.clock.advance_to(max(ends))

    def change(self, kind: str, who: Subscriber, by: Keypair | None = None) -> Attack:
        """pause, resume or cancel (now) of `who`'s subscription to `plan`, by `who`."""
        by = by or who.keypair
        args = (by.pubkey(), self.plan.address, who.pubkey)
        if kind == "cancel":
            return Attack(kind, instructions.cancel(*args, False), [by])
        return Attack(kind, getattr(instructions, kind)(*args), [by])

    def cancel_now(self, who: Subscriber) -> None:
        self.change("cancel", who).send_ok(self.chain)

    def deduct_from(self, who: Subscriber, amount: int) -> None:
        signer = self.plan.billing_authority
        self.chain.send_ok([deduct_ix(self.plan, who, amount, signer.pubkey())], [signer])

    def past_due(self, who: Subscriber) -> None:
        """`who` empties the token account, the renewal fails, then the account is topped up
        again: past due, with the money for the renewal there."""
        balance = self.chain.token_state(who.token_account)["amount"]
        params = TransferCheckedParams(
            program_id=self.plan.token_program,
            source=who.token_account,
            mint=self.plan.mint,
            dest=self.plan.destination,
            owner=who.pubkey,
            amount=balance,
            decimals=6,
        )
        emptied = transfer_checked(params)
        emptied = Instruction(
            emptied.program_id, emptied.data, [*emptied.accounts, *self.plan.extra]
        )
        self.chain.send_ok([emptied], [who.keypair])
        self.make_due()
        failed = self.billing.collect(self.plan, who, has_allowance=True)
        assert failed.ok and failed.event("RenewalFailed"), failed.logs
        assert isinstance(self.billing.subscription(self.plan, who).status, PastDue)
        self.chain.mint_to(
            self.plan.mint, who.token_account, BALANCE, program_id=self.plan.token_program
        )

    # -- honest transactions, one per instruction (alice's unless said otherwise) -------------
    def create_plan(self) -> Attack:
        """Provider A publishes a further plan."""
        provider = self.plan.authority
        self.watched["new_plan"] = pda.plan_address(provider.pubkey(), NEW_PLAN_ID)
        ix = create_plan_ix(
            provider.pubkey(),
            NEW_PLAN_ID,
            self.plan.mint,
            self.plan.destination,
            self.plan.billing_authority.pubkey(),
            USDC,
            self.period,
            self.grace,
            self.billing.token_program,
        )
        return Attack("create_plan", ix, [provider])

    def update_plan(self) -> Attack:
        ix = instructions.update_plan(
            self.plan.authority.pubkey(), self.plan.address, Keypair().pubkey(), self.grace + 1
        )
        return Attack("update_plan", ix, [self.plan.authority])

    def deprecate_plan(self) -> Attack:
        ix = instructions.deprecate_plan(self.plan.authority.pubkey(), self.plan.address)
        return Attack("deprecate_plan", ix, [self.plan.authority])

    def close_plan(self) -> Attack:
        """Provider A closes a plan of its own without subscribers."""
        plan = self._empty_plan_of_a()
        self.watched["empty_of_a"] = plan
        return self.close_plan_at(plan)

    def close_plan_at(self, plan: Pubkey) -> Attack:
        ix = instructions.close_plan(self.plan.authority.pubkey(), plan)
        return Attack("close_plan", ix, [self.plan.authority])

    def _empty_plan_of_a(self) -> Pubkey:
        """Provider A creates a further plan, which nobody subscribes to."""
        provider = self.plan.authority
        ix = create_plan_ix(
            provider.pubkey(),
            NEW_PLAN_ID + 1,
            self.plan.mint,
            self.plan.destination,
            self.plan.billing_authority.pubkey(),
            USDC,
            self.period,
            self.grace,
            self.billing.token_program,
        )
        self.chain.send_ok([ix], [provider])
        return pda.plan_address(provider.pubkey(), NEW_PLAN_ID + 1)

    def subscribe(self) -> Attack:
        """Carol subscribes to `plan`, with an allowance."""
        carol = self.carol
        return Attack("subscribe", subscribe_ix(self.plan, carol, CAP), [carol.keypair])

    def resubscribe(self) -> Attack:
        """Alice cancels, then subscribes to `plan` again (in place, allowance reset)."""
        self.cancel_now(self.alice)
        ix = subscribe_ix(self.plan, self.alice, CAP, previous_allowance=True)
        return Attack("subscribe", ix, [self.alice.keypair])

    def provider_pays_itself(self) -> Attack:
        """Provider A subscribes to its own plan, paying from the plan's destination."""
        provider = Subscriber(self.plan.authority, self.plan.destination)
        subscription = pda.subscription_address(self.plan.address, provider.pubkey)
        self.watched["provider.subscription"] = subscription
        return Attack("subscribe", subscribe_ix(self.plan, provider, CAP), [provider.keypair])

    def collect(self) -> Attack:
        """A stranger renews alice's subscription, which is due."""
        self.make_due()
        return Attack("collect", collect_ix(self.plan, self.alice, True), [self.stranger])

    def collect_past_due(self) -> Attack:
        """A stranger renews alice's past-due subscription, whose account is funded again."""
        self.past_due(self.alice)
        return Attack("collect", collect_ix(self.plan, self.alice, True), [self.stranger])

    def deduct_allowance(self) -> Attack:
        signer = self.plan.billing_authority
        ix = deduct_ix(self.plan, self.alice, USDC, signer.pubkey())
        return Attack("deduct_allowance", ix, [signer])

    def pause(self) -> Attack:
        return self.change("pause", self.alice)

    def resume(self) -> Attack:
        self.change("pause", self.alice).send_ok(self.chain)
        return self.change("resume", self.alice)

    def cancel(self) -> Attack:
        return self.change("cancel", self.alice)

    def set_allowance_cap(self) -> Attack:
        ix = instructions.set_allowance_cap(self.alice.pubkey, self.plan.address, 2 * CAP)
        return Attack("set_allowance_cap", ix, [self.alice.keypair])

    def close_subscription(self) -> Attack:
        """Alice closes her cancelled subscription (and its allowance)."""
        self.cancel_now(self.alice)
        ix = instructions.close_subscription(self.alice.pubkey, self.plan.address, True)
        return Attack("close_subscription", ix, [self.alice.keypair])

    # -- sessions: alice pays provider A's destination (docs/adr/0024) ---------------------
    def _open_session_ix(self) -> Instruction:
        alice, address = self.alice, pda.session_address(self.alice.pubkey, SESSION_ID)
        self.watched |= {"alice.session": address, "alice.vault": pda.vault_address(address)}
        return sessions.open_session(
            alice.pubkey, SESSION_ID, signer=alice.pubkey, mint=self.plan.mint,
            payer_token=alice.token_account, recipient=self.plan.destination, deposit=CAP,
            price=1, expires_at=self.chain.unix_timestamp() + self.clock.days(30),
            dispute_secs=self.clock.days(1), token_program=self.plan.token_program,
            extra=self.plan.extra,
        )  # fmt: skip

    @cached_property
    def session(self) -> Pubkey:
        """Alice's open session."""
        self.chain.send_ok([self._open_session_ix()], [self.alice.keypair])
        return pda.session_address(self.alice.pubkey, SESSION_ID)

    def session_state(self) -> Session:
        found = self.chain.account(self.session)
        assert found is not None
        return Session.decode(found.data)

    def open_session(self) -> Attack:
        return Attack("open_session", self._open_session_ix(), [self.alice.keypair])

    def top_up_session(self) -> Attack:
        ix = sessions.top_up(self.session_state(), self.session, USDC, extra=self.plan.extra)
        return Attack("top_up_session", ix, [self.alice.keypair])

    def redeem_session(self) -> Attack:
        """A stranger redeems alice's voucher: the provider's claim is recorded."""
        voucher = SignedVoucher.sign(self.alice.keypair, self.session, USDC)
        precompile, ix, _ = sessions.redeem(
            self.session_state(), self.session, voucher, extra=self.plan.extra
        )
        return Attack("redeem_session", ix, [self.stranger], prelude=[precompile])

    def withdraw_session(self) -> Attack:
        """A stranger redeems alice's voucher and withdraws: the provider is paid."""
        voucher = SignedVoucher.sign(self.alice.keypair, self.session, USDC)
        precompile, redeem, ix = sessions.redeem(
            self.session_state(), self.session, voucher, extra=self.plan.extra
        )
        return Attack("withdraw_session", ix, [self.stranger], prelude=[precompile, redeem])

    def request_close_session(self) -> Attack:
        ix = sessions.request_close(self.session_state(), self.session)
        return Attack("request_close_session", ix, [self.alice.keypair])

    def close_session(self) -> Attack:
        """Provider A closes alice's session (cooperative)."""
        ix = sessions.close(
            self.session_state(),
            self.session,
            self.plan.authority.pubkey(),
            extra=self.plan.extra,
        )
        return Attack("close_session", ix, [self.plan.authority])


Build = Callable[[Scene], Attack]
HONEST: dict[str, Build] = {
    "create_plan": Scene.create_plan,
    "update_plan": Scene.update_plan,
    "deprecate_plan": Scene.deprecate_plan,
    "close_plan": Scene.close_plan,
    "subscribe": Scene.subscribe,
    "resubscribe": Scene.resubscribe,
    "collect": Scene.collect,
    "collect_past_due": Scene.collect_past_due,
    "deduct_allowance": Scene.deduct_allowance,
    "pause": Scene.pause,
    "resume": Scene.resume,
    "cancel": Scene.cancel,
    "set_allowance_cap": Scene.set_allowance_cap,
    "close_subscription": Scene.close_subscription,
    "provider_pays_itself": Scene.provider_pays_itself,
    "open_session": Scene.open_session,
    "top_up_session": Scene.top_up_session,
    "redeem_session": Scene.redeem_session,
    "withdraw_session": Scene.withdraw_session,
    "request_close_session": Scene.request_close_session,
    "close_session": Scene.close_session,
}


@pytest.fixture
def scene(chain: Chain, billing: Billing, clock: Clock) -> Scene:
    return Scene(chain, billing, clock)


def is_billing_error(name: str) -> bool:
    try:
        errors.error_class(name)
    except KeyError:
        return False
    return True


def assert_refused(result: TxResult, error: str) -> None:
    """The transaction failed with `error`: a svc_billing error (by its code), a runtime
    error (by the transaction error) or an Anchor error (by its log line)."""
    logs = "\n".join(result.logs)
    assert not result.ok, f"expected {error}, but the attack went through:\n{logs}"
    if is_billing_error(error):
        assert_program_error(result, error)
    elif error in RUNTIME_ERRORS:
        assert RUNTIME_ERRORS[error](result), f"expected {error}, got {result.error}\n{logs}"
    else:
        assert f"Error Code: {error}." in logs, f"expected {error}, got {result.error}\n{logs}"


def attempt(scene: Scene, attack: Attack, error: str, honest: Attack | None = None) -> None:
    """Sends `attack`: refused with `error`, nothing of the scene changed; then `honest`, the
    transaction the attack was made from, goes through."""
    before = scene.snapshot()
    assert_refused(attack.send(scene.chain), error)
    after = scene.snapshot()
    changed = [name for name in before if before[name] != after[name]]
    assert not changed, f"the refused attack changed {changed}"
    if honest is not None:
        result = honest.send(scene.chain)
        assert result.ok, "\n".join(["the honest transaction failed:", *result.logs])


def case(build: str, error: str, **swaps: str) -> object:
    """A param: the honest `build` with the named accounts replaced by scene accounts."""
    label = ",".join(f"{account}={lookalike}" for account, lookalike in swaps.items())
    return pytest.param(build, swaps, error, id=f"{build}:{label}")


def attack_on(scene: Scene, build: str, swaps: dict[str, str]) -> tuple[Attack, Attack | None]:
    """The attack (the honest `build` with `swaps` made) and the honest transaction; without
    swaps `build` is an attack already, and there is no honest transaction."""
    honest = HONEST[build](scene)
    if not swaps:
        return honest, None
    attack = honest
    for account, name in swaps.items():
        if (honest.name, account) in SIGNERS:
            attack = attack.signed_by(account, scene.keypair(name))
        else:
            attack = attack.swap(**{account: scene.address(name)})
    return attack, honest


def run_case(scene: Scene, build: str, swaps: dict[str, str], error: str) -> None:
    attack, honest = attack_on(scene, build, swaps)
    attempt(scene, attack, error, honest)


# -- 1. missing signer ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("instruction", "signer"), [pytest.param(*s, id=f"{s[0]}:{s[1]}") for s in SIGNERS]
)
def test_1_an_account_that_must_sign_but_does_not_is_refused(
    scene: Scene, instruction: str, signer: str
) -> None:
    honest = HONEST[instruction](scene)
    attack = honest.unsigned(signer, payer=scene.stranger)
    attempt(scene, attack, "AccountNotSigner", honest)


# -- 2. wrong owner ------------------------------------------------------------------------

WRONG_OWNER = [
    # Program accounts replaced by accounts of the system program (a funded wallet) or of
    # the token program (a mint, a token account).
    case("create_plan", "MintMismatch", mint="carol.wallet"),
    case("create_plan", "TokenAccountMismatch", destination="carol.wallet"),
    case("update_plan", "AccountOwnedByWrongProgram", plan="alice.token"),
    case("deprecate_plan", "AccountOwnedByWrongProgram", plan="carol.wallet"),
    case("close_plan", "AccountOwnedByWrongProgram", plan="plan.mint"),
    case("subscribe", "AccountOwnedByWrongProgram", plan="plan.mint"),
    case("subscribe", "TokenAccountMismatch", subscriber_token="carol.wallet"),
    case("collect", "AccountOwnedByWrongProgram", plan="stranger.wallet"),
    case("collect", "AccountOwnedByWrongProgram", subscription="alice.token"),
    case("collect", "AccountOwnedByWrongProgram", allowance="alice.wallet"),
    case("deduct_allowance", "AccountOwnedByWrongProgram", plan="plan.destination"),
    case("deduct_allowance", "AccountOwnedByWrongProgram", subscription="alice.wallet"),
    case("deduct_allowance", "AccountOwnedByWrongProgram", allowance="plan.mint"),
    case("deduct_allowance", "TokenAccountMismatch", subscriber_token="alice.wallet"),
    case("pause", "AccountOwnedByWrongProgram", subscription="alice.token"),
    case("resume", "AccountOwnedByWrongProgram", plan="alice.wallet"),
    case("cancel", "AccountOwnedByWrongProgram", subscription="alice.wallet"),
    case("set_allowance_cap", "AccountOwnedByWrongProgram", subscription="alice.token"),
    # init_if_needed: the allowance's address is checked (seeds) before its owner
    case("set_allowance_cap", "ConstraintSeeds", allowance="alice.wallet"),
    case("close_subscription", "AccountOwnedByWrongProgram", subscription="alice.wallet"),
    case("close_subscription", "AccountOwnedByWrongProgram", allowance="plan.mint"),
    case("open_session", "MintMismatch", mint="carol.wallet"),
    case("open_session", "TokenAccountMismatch", payer_token="carol.wallet"),
    case("open_session", "TokenAccountMismatch", recipient="alice.wallet"),
    case("redeem_session", "AccountOwnedByWrongProgram", session="alice.token"),
    case("withdraw_session", "AccountOwnedByWrongProgram", session="alice.token"),
    case("close_session", "AccountOwnedByWrongProgram", session="alice.wallet"),
    # The subscriber's token account replaced by one of the same mint that someone else owns.
    case("subscribe", "TokenAccountMismatch", subscriber_token="stranger.token"),
    case("collect", "TokenAccountMismatch", subscriber_token="stranger.token"),
    case("deduct_allowance", "TokenAccountMismatch", subscriber_token="stranger.token"),
    case("open_session", "TokenAccountMismatch", payer_token="stranger.token"),
    case("top_up_session", "TokenAccountMismatch", payer_token="stranger.token"),
]


@pytest.mark.parametrize(("build", "swaps", "error"), WRONG_OWNER)
def test_2_an_account_of_the_wrong_owner_is_refused(
    scene: Scene, build: str, swaps: dict[str, str], error: str
) -> None:
    run_case(scene, build, swaps, error)


# -- 3. account substitution ---------------------------------------------------------------

SUBSTITUTION = [
    case("create_plan", "ConstraintSeeds", plan="other"),
    case("create_plan", "MintMismatch", mint="foreign.mint"),
    case("create_plan", "MintMismatch", destination="foreign.token"),
    case("update_plan", "Unauthorized", plan="other"),
    case("update_plan", "Unauthorized", authority="other.authority"),
    case("deprecate_plan", "Unauthorized", plan="other"),
    case("close_plan", "Unauthorized", plan="empty"),
    case("subscribe", "ConstraintSeeds", plan="other"),
    case("subscribe", "ConstraintSeeds", subscription="bob.subscription"),
    case("subscribe", "ConstraintSeeds", allowance="bob.allowance"),
    case("subscribe", "MintMismatch", mint="foreign.mint"),
    case("subscribe", "TokenAccountMismatch", subscriber_token="bob.token"),
    case("subscribe", "DestinationMismatch", destination="other.destination"),
    case("subscribe", "ConstraintSeeds", delegate="dave.delegate"),
    case("collect", "ConstraintHasOne", plan="other"),
    case("collect", "ConstraintHasOne", subscription="bob.subscription"),
    case("collect", "ConstraintHasOne", subscription="dave.subscription"),
    case("collect", "ConstraintHasOne", allowance="bob.allowance"),
    case("collect", "TokenAccountMismatch", subscriber_token="bob.token"),
    case("collect", "DestinationMismatch", destination="other.destination"),
    case("collect", "MintMismatch", mint="foreign.mint"),
    case("collect", "WrongDelegate", delegate="dave.delegate"),
    case("deduct_allowance", "Unauthorized", authority="other.billing"),
    case("deduct_allowance", "ConstraintHasOne", plan="other"),
    case("deduct_allowance", "ConstraintHasOne", subscription="bob.subscription"),
    case("deduct_allowance", "ConstraintHasOne", subscription="dave.subscription"),
    case("deduct_allowance", "ConstraintHasOne", allowance="bob.allowance"),
    case("deduct_allowance", "TokenAccountMismatch", subscriber_token="bob.token"),
    case("deduct_allowance", "DestinationMismatch", destination="other.destination"),
    case("deduct_allowance", "MintMismatch", mint="foreign.mint"),
    case("deduct_allowance", "DelegationMissing", delegate="dave.delegate"),
    case("pause", "ConstraintHasOne", plan="other"),
    case("pause", "Unauthorized", subscription="bob.subscription"),
    case("pause", "Unauthorized", authority="other.authority"),
    case("resume", "ConstraintHasOne", plan="other"),
    case("resume", "Unauthorized", subscription="bob.subscription"),
    # The other party of the subscription: the provider cannot undo the subscriber's pause.
    case("resume", "NotYourDecision", authority="plan.authority"),
    case("cancel", "ConstraintHasOne", plan="other"),
    case("cancel", "Unauthorized", subscription="bob.subscription"),
    case("cancel", "Unauthorized", authority="other.authority"),
    case("set_allowance_cap", "ConstraintHasOne", subscriber="bob.wallet"),
    # the allowance's seeds name the subscription: a mismatch fails there first
    case("set_allowance_cap", "ConstraintSeeds", subscription="bob.subscription"),
    case("set_allowance_cap", "ConstraintSeeds", allowance="bob.allowance"),
    case("close_subscription", "ConstraintHasOne", subscriber="bob.wallet"),
    case("close_subscription", "ConstraintHasOne", subscription="bob.subscription"),
    case("close_subscription", "ConstraintHasOne", allowance="bob.allowance"),
    # A session's money goes only where the session says.
    case("withdraw_session", "DestinationMismatch", recipient="stranger.token"),
    case("withdraw_session", "TokenAccountMismatch", vault="alice.token"),
    case("close_session", "DestinationMismatch", recipient="stranger.token"),
    case("close_session", "TokenAccountMismatch", refund="stranger.token"),
    case("close_session", "Unauthorized", closer="carol.wallet"),
    case("close_session", "Unauthorized", payer="stranger.wallet"),
    case("top_up_session", "Unauthorized", payer="bob.wallet"),
    case("request_close_session", "Unauthorized", payer="bob.wallet"),
    case("open_session", "MintMismatch", mint="foreign.mint"),
]


@pytest.mark.parametrize(("build", "swaps", "error"), SUBSTITUTION)
def test_3_a_look_alike_of_another_plan_or_subscriber_is_refused(
    scene: Scene, build: str, swaps: dict[str, str], error: str
) -> None:
    run_case(scene, build, swaps, error)


# -- 4. type cosplay -----------------------------------------------------------------------

COSPLAY = [
    case("create_plan", "MintMismatch", mint="plan.destination"),
    case("create_plan", "TokenAccountMismatch", destination="plan.mint"),
    case("update_plan", "AccountDiscriminatorMismatch", plan="alice.subscription"),
    case("deprecate_plan", "AccountDiscriminatorMismatch", plan="alice.allowance"),
    case("close_plan", "AccountDiscriminatorMismatch", plan="alice.subscription"),
    case("subscribe", "AccountDiscriminatorMismatch", plan="bob.subscription"),
    case("subscribe", "TokenAccountMismatch", subscriber_token="plan.mint"),
    case("subscribe", "MintMismatch", mint="carol.token"),
    case("collect", "AccountDiscriminatorMismatch", plan="alice.subscription"),
    case("collect", "AccountDiscriminatorMismatch", subscription="plan"),
    case("collect", "AccountDiscriminatorMismatch", subscription="alice.allowance"),
    case("collect", "AccountDiscriminatorMismatch", allowance="alice.subscription"),
    case("collect", "TokenAccountMismatch", subscriber_token="plan.mint"),
    case("collect", "MintMismatch", mint="alice.token"),
    case("deduct_allowance", "AccountDiscriminatorMismatch", plan="alice.subscription"),
    case("deduct_allowance", "AccountDiscriminatorMismatch", subscription="alice.allowance"),
    case("deduct_allowance", "AccountDiscriminatorMismatch", allowance="plan"),
    case("deduct_allowance", "TokenAccountMismatch", subscriber_token="plan.mint"),
    case("pause", "AccountDiscriminatorMismatch", plan="alice.subscription"),
    case("resume", "AccountDiscriminatorMismatch", subscription="plan"),
    case("cancel", "AccountDiscriminatorMismatch", subscription="alice.allowance"),
    case("set_allowance_cap", "AccountDiscriminatorMismatch", subscription="alice.allowance"),
    case("set_allowance_cap", "ConstraintSeeds", allowance="alice.subscription"),
    case("close_subscription", "AccountDiscriminatorMismatch", subscription="alice.allowance"),
    case("close_subscription", "AccountDiscriminatorMismatch", allowance="plan"),
    case("redeem_session", "AccountDiscriminatorMismatch", session="alice.subscription"),
    case("withdraw_session", "AccountDiscriminatorMismatch", session="alice.subscription"),
    case("top_up_session", "AccountDiscriminatorMismatch", session="plan"),
    case("close_session", "AccountDiscriminatorMismatch", session="alice.allowance"),
    case("open_session", "MintMismatch", mint="alice.token"),
    case("open_session", "TokenAccountMismatch", payer_token="plan.mint"),
]


@pytest.mark.parametrize(("build", "swaps", "error"), COSPLAY)
def test_4_an_account_of_another_type_is_refused(
    scene: Scene, build: str, swaps: dict[str, str], error: str
) -> None:
    run_case(scene, build, swaps, error)


# -- 5. re-initialisation, and addresses funded in advance -----------------------------------


def create_plan_again(s: Scene) -> Attack:
    """Provider A creates its plan a second time (same id), on other terms."""
    plan_id = s.billing.plan_state(s.plan).plan_id
    ix = create_plan_ix(
        s.plan.authority.pubkey(),
        plan_id,
        s.plan.mint,
        s.address("other.destination"),
        s.plan.authority.pubkey(),
        100 * USDC,
        s.period,
        s.grace,
    )
    return Attack("create_plan", ix, [s.plan.authority])


def subscribe_again_while(state: str, max_overage: int | None = CAP) -> Build:
    """Alice, who used 2 of her 5 USDC allowance, subscribes again while her subscription is
    `state`: a fresh one would forget what she used (or, without `max_overage`, close the
    allowance) and restart the paid period."""

    def build(s: Scene) -> Attack:
        alice = s.alice
        s.deduct_from(alice, 2 * USDC)
        if state == "paused":
            s.change("pause", alice).send_ok(s.chain)
        elif state == "past_due":
            s.past_due(alice)
        elif state == "cancel_pending":
            ix = instructions.cancel(alice.pubkey, s.plan.address, alice.pubkey, True)
            s.chain.send_ok([ix], [alice.keypair])
        ix = subscribe_ix(s.plan, alice, max_overage, previous_allowance=True)
        return Attack("subscribe", ix, [alice.keypair])

    return build


@pytest.mark.parametrize(
    ("build", "error"),
    [
        pytest.param(create_plan_again, "AccountAlreadyInUse", id="create_plan:same-plan_id"),
        pytest.param(subscribe_again_while("active"), "AlreadySubscribed", id="subscribe:active"),
        pytest.param(
            subscribe_again_while("active", None),
            "AlreadySubscribed",
            id="subscribe:active-dropping-the-allowance",
        ),
        pytest.param(subscribe_again_while("paused"), "AlreadySubscribed", id="subscribe:paused"),
        pytest.param(
            subscribe_again_while("past_due"), "AlreadySubscribed", id="subscribe:past-due"
        ),
        pytest.param(
            subscribe_again_while("cancel_pending"),
            "AlreadySubscribed",
            id="subscribe:cancel-at-period-end-pending",
        ),
    ],
)
def test_5_a_live_account_cannot_be_initialised_again(
    scene: Scene, build: Build, error: str
) -> None:
    attack = build(scene)
    attempt(scene, attack, error)
    if attack.name == "subscribe":  # what alice used of her allowance is still on record
        allowance = scene.chain.account(scene.address("alice.allowance"))
        assert allowance is not None
        assert Allowance.decode(allowance.data).used == 2 * USDC


def fee(chain: Chain, result: TxResult) -> int:
    """The fee `result`'s transaction paid, as the cluster recorded it."""
    config = {"encoding": "base64", "commitment": "confirmed", "maxSupportedTransactionVersion": 0}
    return int(chain.rpc("getTransaction", result.signature, config)["meta"]["fee"])


def rent(chain: Chain, address: Pubkey) -> int:
    """The rent-exempt minimum of the account at `address`."""
    acct = chain.account(address)
    assert acct is not None
    return chain.minimum_balance(len(acct.data))


@pytest.mark.parametrize(
    "prefund",
    [pytest.param(1_000_000, id="below-rent"), pytest.param(50_000_000, id="above-rent")],
)
@pytest.mark.parametrize("target", ["plan", "subscription", "allowance", "delegate"])
def test_5_an_address_funded_before_its_account_is_created_still_works(
    scene: Scene, target: str, prefund: int
) -> None:
    chain = scene.chain
    if target == "plan":
        create = scene.create_plan()
        address = scene.watched["new_plan"]
    else:
        carol = scene.carol
        create = Attack(
            "subscribe",
            subscribe_ix(scene.plan, carol, None if target == "subscription" else CAP),
            [carol.keypair],
        )
        address = scene.address(f"carol.{target}")
    payer = create.signers[0]
    gift = TransferParams(from_pubkey=chain.payer.pubkey(), to_pubkey=address, lamports=prefund)
    chain.send_ok([transfer(gift)], [chain.payer])
    balance = chain.balance(payer.pubkey())

    result = create.send(chain)

    assert result.ok, result.logs
    if target == "plan":
        created = [address]
    elif target == "subscription":
        created = [scene.address("carol.subscription")]
    else:
        created = [scene.address("carol.subscription"), scene.address("carol.allowance")]
    # The payer paid only the rent that the prefunded lamports did not already cover.
    shortfall = sum(max(0, rent(chain, a) - (prefund if a == address else 0)) for a in created)
    assert balance - chain.balance(payer.pubkey()) == fee(chain, result) + shortfall
    funded = chain.account(address)
    assert funded is not None
    if target == "delegate":  # a signer only: still a system account, its lamports untouched
        assert (funded.owner, funded.lamports, funded.data) == (SYSTEM_PROGRAM_ID, prefund, b"")
        state = chain.token_state(scene.carol.token_account)
        assert (state["amount"], state["delegate"]) == (BALANCE - USDC, address)
        return
    # Nothing lost: the account keeps the prefunded lamports, and gives them all back on close.
    assert funded.owner == PROGRAM_ID
    assert funded.lamports == max(prefund, rent(chain, address))
    if target == "plan":
        close = scene.close_plan_at(address)
    else:
        scene.cancel_now(scene.carol)
        close = Attack(
            "close_subscription",
            instructions.close_subscription(
                scene.carol.pubkey, scene.plan.address, target == "allowance"
            ),
            [scene.carol.keypair],
        )
    refund = sum(chain.account(a).lamports for a in created)  # type: ignore[union-attr]
    balance = chain.balance(payer.pubkey())
    closed = close.send(chain)
    assert closed.ok, closed.logs
    assert chain.balance(payer.pubkey()) - balance == refund - fee(chain, closed)
    assert all(chain.account(a) is None for a in created)


# -- 6. fake programs ----------------------------------------------------------------------

FAKE_PROGRAMS = [
    case("create_plan", "InvalidProgramId", system_program="memo"),
    case("create_plan", "InvalidProgramId", system_program="token"),
    case("subscribe", "InvalidProgramId", token_program="system"),
    case("subscribe", "InvalidProgramId", token_program="memo"),
    # An SPL Token mint with Token-2022 passed as its program: the mint is not its.
    case("subscribe", "MintMismatch", token_program="other_token"),
    case("subscribe", "InvalidProgramId", system_program="memo"),
    case("subscribe", "InvalidProgramId", system_program="token"),
    case("resubscribe", "InvalidProgramId", system_program="svc_billing"),
    case("resubscribe", "InvalidProgramId", token_program="svc_billing"),
    case("collect", "InvalidProgramId", token_program="memo"),
    # An SPL Token mint with Token-2022 passed as its program: the mint is not its.
    case("collect", "MintMismatch", token_program="other_token"),
    case("collect", "InvalidProgramId", token_program="system"),
    case("collect_past_due", "InvalidProgramId", token_program="svc_billing"),
    case("deduct_allowance", "InvalidProgramId", token_program="memo"),
    # An SPL Token mint with Token-2022 passed as its program: the mint is not its.
    case("deduct_allowance", "MintMismatch", token_program="other_token"),
    case("deduct_allowance", "InvalidProgramId", token_program="system"),
    case("open_session", "InvalidProgramId", token_program="memo"),
    case("open_session", "InvalidProgramId", system_program="memo"),
    case("withdraw_session", "MintMismatch", token_program="memo"),
    case("close_session", "MintMismatch", token_program="svc_billing"),
]


@pytest.mark.parametrize(("build", "swaps", "error"), FAKE_PROGRAMS)
def test_6_a_program_other_than_the_token_or_system_program_is_refused(
    scene: Scene, build: str, swaps: dict[str, str], error: str
) -> None:
    run_case(scene, build, swaps, error)


# -- 7. duplicate mutable accounts ---------------------------------------------------------

DUPLICATES = [
    # The subscriber's token account twice (as the destination too), or the destination twice.
    case("collect", "DuplicateAccount", destination="alice.token"),
    case("collect", "DuplicateAccount", subscriber_token="plan.destination"),
    case("collect_past_due", "DuplicateAccount", destination="alice.token"),
    case("deduct_allowance", "DuplicateAccount", destination="alice.token"),
    case("deduct_allowance", "DuplicateAccount", subscriber_token="plan.destination"),
    case("subscribe", "DestinationMismatch", destination="carol.token"),
    case("subscribe", "DuplicateAccount", subscriber_token="plan.destination"),
    # The provider subscribes to its own plan, paying from the plan's destination itself.
    case("provider_pays_itself", "DuplicateAccount"),
    # One program account in two mutable places.
    case("close_subscription", "AccountDiscriminatorMismatch", allowance="alice.subscription"),
    case("collect", "AccountDiscriminatorMismatch", allowance="alice.subscription"),
    case("deduct_allowance", "AccountDiscriminatorMismatch", subscription="plan"),
    case("open_session", "DuplicateAccount", recipient="alice.token"),
    case("top_up_session", "DuplicateAccount", payer_token="alice.vault"),
]


@pytest.mark.parametrize(("build", "swaps", "error"), DUPLICATES)
def test_7_the_same_account_in_two_mutable_places_is_refused(
    scene: Scene, build: str, swaps: dict[str, str], error: str
) -> None:
    run_case(scene, build, swaps, error)


# -- 8. non-canonical bumps ----------------------------------------------------------------

NON_CANONICAL = [
    case("create_plan", "ConstraintSeeds", plan="new_plan~"),
    case("subscribe", "ConstraintSeeds", allowance="carol.allowance~"),
    case("subscribe", "ConstraintSeeds", delegate="carol.delegate~"),
    case("resubscribe", "ConstraintSeeds", subscription="alice.subscription~"),
    case("resubscribe", "ConstraintSeeds", allowance="alice.allowance~"),
    # Nothing can exist at a non-canonical address: where the program does not re-derive an
    # address, the account found there is not one of its own.
    case("update_plan", "AccountNotInitialized", plan="plan~"),
    case("collect", "AccountNotInitialized", plan="plan~"),
    case("collect", "AccountNotInitialized", subscription="alice.subscription~"),
    case("collect", "AccountNotInitialized", allowance="alice.allowance~"),
    case("collect", "WrongDelegate", delegate="alice.delegate~"),
    case("deduct_allowance", "AccountNotInitialized", allowance="alice.allowance~"),
    case("deduct_allowance", "DelegationMissing", delegate="alice.delegate~"),
    case("pause", "AccountNotInitialized", subscription="alice.subscription~"),
    case("set_allowance_cap", "ConstraintSeeds", allowance="alice.allowance~"),
    case("close_subscription", "AccountNotInitialized", subscription="alice.subscription~"),
]


@pytest.mark.parametrize(("build", "swaps", "error"), NON_CANONICAL)
def test_8_an_address_at_a_non_canonical_bump_is_refused(
    scene: Scene, build: str, swaps: dict[str, str], error: str
) -> None:
    run_case(scene, build, swaps, error)


# -- 9. another subscriber's delegate ------------------------------------------------------

OTHER_DELEGATE = [
    case("subscribe", "ConstraintSeeds", delegate="bob.delegate"),
    case("resubscribe", "ConstraintSeeds", delegate="bob.delegate"),
    case("deduct_allowance", "DelegationMissing", delegate="bob.delegate"),
    case("collect", "WrongDelegate", delegate="bob.delegate"),
    case("collect_past_due", "WrongDelegate", delegate="bob.delegate"),
]


@pytest.mark.parametrize(("build", "swaps", "error"), OTHER_DELEGATE)
def test_9_another_subscribers_delegate_is_refused(
    scene: Scene, build: str, swaps: dict[str, str], error: str
) -> None:
    attack, honest = attack_on(scene, build, swaps)
    before = scene.billing.subscription(scene.plan, scene.alice)
    # Bob's delegate is real and holds bob's live approval: it just is not alice's.
    bob = scene.chain.token_state(scene.bob.token_account)
    assert bob["delegate"] == scene.address("bob.delegate") and bob["delegated_amount"] > 0
    attempt(scene, attack, error, honest)
    if attack.name == "collect":
        # Refused, not recorded as alice's failed renewal; the real renewal then went through.
        state = scene.billing.subscription(scene.plan, scene.alice)
        assert isinstance(state.status, Active) and state.past_due_since == 0
        assert state.cycles_billed == before.cycles_billed + 1


# -- 10. close, then reuse -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("when", "error"),
    [
        pytest.param("same-transaction", "AccountNotInitialized", id="same-transaction"),
        pytest.param("later-transaction", "AccountNotInitialized", id="later-transaction"),
        pytest.param("later-after-refunding-the-rent", "AccountOwnedByWrongProgram", id="revived"),
    ],
)
@pytest.mark.parametrize("reuse", ["deduct_allowance", "collect", "pause", "set_allowance_cap"])
def test_10_a_closed_subscription_cannot_be_used_again(
    scene: Scene, reuse: str, when: str, error: str
) -> None:
    attack = HONEST[reuse](scene)
    close = scene.close_subscription()
    subscription = scene.address("alice.subscription")
    if when == "same-transaction":
        attack = attack.after(close)
    else:
        revive: list[Instruction] = []
        if when != "later-transaction":  # close, and send the rent straight back
            rent_back = scene.chain.account(subscription).lamports  # type: ignore[union-attr]
            back = TransferParams(
                from_pubkey=scene.alice.pubkey, to_pubkey=subscription, lamports=rent_back
            )
            revive.append(transfer(back))
        scene.chain.send_ok([close.ix, *revive], close.signers)
    attempt(scene, attack, error)


def test_10_closing_then_subscribing_again_in_one_transaction_starts_afresh(scene: Scene) -> None:
    chain, alice, plan = scene.chain, scene.alice, scene.plan
    scene.deduct_from(alice, 2 * USDC)
    first = scene.billing.subscription(plan, alice)
    close = scene.close_subscription()
    again = Attack("subscribe", subscribe_ix(plan, alice, CAP), [alice.keypair]).after(close)
    balance = chain.token_state(alice.token_account)["amount"]

    result = again.send(chain)

    assert result.ok, result.logs
    assert result.event("SubscriptionClosed") and result.event("SubscriptionCreated")
    state = scene.billing.subscription(plan, alice)
    assert isinstance(state.status, Active)
    assert (state.cycles_billed, state.total_paid, state.has_allowance) == (1, USDC, True)
    assert state.created_at >= first.created_at
    allowance = chain.account(scene.address("alice.allowance"))
    assert allowance is not None
    fresh = Allowance.decode(allowance.data)
    assert (fresh.cap, fresh.used, fresh.total_deducted, fresh.cycle) == (CAP, 0, 0, 1)
    assert chain.token_state(alice.token_account)["amount"] == balance - USDC
    plan_state = scene.billing.plan_state(plan)
    assert (plan_state.live_subscriptions, plan_state.total_subscriptions) == (2, 3)
