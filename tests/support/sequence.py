"""Seeded multi-actor sequence (model-based) testing of svc_billing.

A `random.Random(seed)` picks actions for several subscribers, the provider (the plans'
authority), the billing authority (the facilitator) and a stranger: subscribe, collect,
deduct_allowance, pause, resume, cancel, set_allowance_cap, close_subscription, and around the
program: top-ups (minting), SPL revoke and re-approve of the delegation, and time travel. Each
action is often sent by someone not allowed to do it.

`Model` is a small copy of the program's rules: it predicts the outcome of every action
(success, or the error it is refused with) and the state it leaves. `SequenceRunner` sends each
action to a real validator and fails (with the seed, the step and the history) when

- the program's outcome or state differs from the model's prediction, or
- an invariant of the chain state breaks (checked from the chain alone, after every step):
  money debited == charges recorded == money credited == the plans' `total_collected`; at
  most one period charge per period, never before the period ends, never of a paused or
  ended subscription; metered usage within the cycle's cap; token supply conserved; the
  program's accounts hold exactly their rent-exempt minimum.

The cluster clock runs on (a second at a time on the drop-in, slots on the real validator),
so an instruction executes at some time in [clock before sending, clock after confirming]:
the model is asked for every second of that window and must explain the outcome and the
state at one of them.
"""

from __future__ import annotations

import base64
import copy
import random
import re
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from solders.instruction import AccountMeta, Instruction
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from spl.token.constants import TOKEN_PROGRAM_ID
from spl.token.instructions import approve, mint_to, revoke
from spl.token.models import ApproveParams, MintToParams, RevokeParams

from svcpay.program import instructions, pda
from svcpay.program.generated import instructions as gen
from svcpay.program.generated.accounts.allowance import Allowance as AllowanceAccount
from svcpay.program.generated.accounts.plan import Plan as PlanAccount
from svcpay.program.generated.accounts.subscription import Subscription as SubscriptionAccount
from svcpay.program.generated.program_id import PROGRAM_ID
from svcpay.protocol import token2022 as t22
from svcpay.protocol.programs import TOKEN_2022_PROGRAM
from tests.support.billing import USDC
from tests.support.chain import Chain, TxResult
from tests.support.clock import Clock
from tests.support.token2022 import HOOK, hook_extra, t22_mint

# The mints a sequence runs on: SPL Token, or Token-2022 with a transfer hook and a 1.5% fee
# (at most 0.01), where the provider receives less than the subscribers pay.
SPL_MINT, FEE_HOOK_MINT = "spl-token", "token-2022-fee-hook"
FEE_BPS, MAX_FEE = 150, 10_000

U64_MAX = 2**64 - 1
OK = "ok"
ACTIVE, PAST_DUE, PAUSED, CANCELLED, EXPIRED = "Active", "PastDue", "Paused", "Cancelled", "Expired"
SUBSCRIBER, PROVIDER = "Subscriber", "Provider"
PROVIDER_ACTOR, BILLING_ACTOR, STRANGER = "provider", "billing", "stranger"
CLOCK_SYSVAR = Pubkey.from_string("SysvarC1ock11111111111111111111111111111111")

# Weights of the actions the runner picks.
KINDS: dict[str, int] = {
    "subscribe": 10,
    "collect": 18,
    "deduct": 14,
    "pause": 7,
    "resume": 7,
    "cancel": 5,
    "set_cap": 5,
    "close": 4,
    "topup": 5,
    "revoke": 2,
    "approve": 5,
    "time": 16,
}
SPL_KINDS = ("topup", "revoke", "approve")


def subscriber_actor(i: int) -> str:
    return f"sub{i}"


# -- the model --------------------------------------------------------------------------------
@dataclass
class PlanModel:
    amount: int
    period: int
    grace: int
    live: int = 0
    total_subscriptions: int = 0
    total_collected: int = 0


@dataclass
class TokenModel:
    """A subscriber's token account: balance and its delegation to the delegate PDA."""

    balance: int
    delegate: bool = False
    delegated: int = 0

    def pull(self, amount: int) -> None:
        """A transfer signed by the delegate (SPL Token clears a used-up delegation)."""
        assert self.balance >= amount and self.delegate and self.delegated >= amount
        self.balance -= amount
        self.delegated -= amount
        if self.delegated == 0:
            self.delegate = False


@dataclass
class SubModel:
    """One subscription (and its allowance, when `has_allowance`)."""

    status: str
    created_at: int
    period_start: int
    period_end: int
    total_paid: int
    has_allowance: bool
    cycles: int = 1
    past_due_since: int = 0
    paused_at: int = 0
    paused_by: str | None = None
    cancel_at_period_end: bool = False
    cancel_by: str | None = None
    cap: int = 0
    used: int = 0
    total_deducted: int = 0
    allowance_cycle: int = 0

    @property
    def live(self) -> bool:
        return self.status not in (CANCELLED, EXPIRED)


@dataclass(frozen=True)
class Action:
    kind: str
    plan: int = 0
    subscriber: int = 0
    actor: str = ""
    amount: int = 0  # deduction, cap, top-up, approval, or seconds of time travel
    flag: bool = False  # at_period_end (cancel); the allowance account is passed (others)
    max_overage: int | None = None

    def describe(self) -> str:
        target = f"p{self.plan}/sub{self.subscriber}"
        if self.kind == "time":
            return f"time +{self.amount}s"
        if self.kind in SPL_KINDS:
            return f"{self.kind} sub{self.subscriber} {self.amount}"
        extra = {
            "subscribe": f" max_overage={self.max_overage} previous_allowance={self.flag}",
            "collect": f" allowance={self.flag}",
            "deduct": f" {self.amount}",
            "cancel": f" at_period_end={self.flag}",
            "set_cap": f" {self.amount}",
            "close": f" allowance={self.flag}",
        }.get(self.kind, "")
        return f"{self.kind} {target} by {self.actor}{extra}"


@dataclass
class Model:
    """What the program should hold: plans, subscribers' token accounts, subscriptions."""

    plans: list[PlanModel]
    tokens: list[TokenModel]
    subs: dict[tuple[int, int], SubModel] = field(default_factory=dict)
    minted: int = 0

    def party(self, actor: str, subscriber: int) -> str | None:
        if actor == subscriber_actor(subscriber):
            return SUBSCRIBER
        return PROVIDER if actor == PROVIDER_ACTOR else None

    def apply(self, a: Action, now: int) -> str:
        """Applies `a` at cluster time `now`; returns OK or the error the program refuses with."""
        outcome: str = getattr(self, f"_{a.kind}")(a, now)
        return outcome

    def _charge(self, a: Action, amount: int) -> None:
        self.tokens[a.subscriber].pull(amount)
        self.plans[a.plan].total_collected += amount  # the model's record of charges

    def _subscribe(self, a: Action, now: int) -> str:
        plan, token = self.plans[a.plan], self.tokens[a.subscriber]
        if a.actor != subscriber_actor(a.subscriber):
            # The signer's own subscription is checked first, the token account after.
            signer = next(
                (i for i in range(len(self.tokens)) if subscriber_actor(i) == a.actor), None
            )
            mine = self.subs.get((a.plan, signer)) if signer is not None else None
            if mine is not None and mine.live:
                return "AlreadySubscribed"
            if a.max_overage == 0:
                return "ZeroAmount"
            if a.max_overage is None and a.flag != (mine is not None and mine.has_allowance):
                return "NoAllowance"
            return "TokenAccountMismatch"  # someone else's token account
        prev = self.subs.get((a.plan, a.subscriber))
        if prev is not None and prev.live:
            return "AlreadySubscribed"
        had_allowance = prev is not None and prev.has_allowance
        passes_allowance = a.max_overage is not None or a.flag
        if a.max_overage is not None:
            if a.max_overage == 0:
                return "ZeroAmount"
        elif passes_allowance != had_allowance:
            return "NoAllowance"
        if token.balance < plan.amount:
            return "InsufficientFunds"
        if not (token.delegate and token.delegated >= U64_MAX // 2):
            token.delegate, token.delegated = True, U64_MAX  # the Approve CPI
        self._charge(a, plan.amount)
        sub = SubModel(ACTIVE, now, now, now + plan.period, plan.amount, a.max_overage is not None)
        if a.max_overage is not None:
            sub.cap, sub.allowance_cycle = a.max_overage, 1
        self.subs[(a.plan, a.subscriber)] = sub
        plan.live += 1
        plan.total_subscriptions += 1
        return OK

    def _collect(self, a: Action, now: int) -> str:
        sub = self.subs.get((a.plan, a.subscriber))
        if sub is None or (a.flag and not sub.has_allowance):
            return "AccountNotInitialized"
        if sub.status not in (ACTIVE, PAST_DUE):
            return "SubscriptionNotActive"
        if a.flag != sub.has_allowance:
            return "NoAllowance"
        if sub.status == ACTIVE and now < sub.period_end:
            return "NotDue"
        plan, token = self.plans[a.plan], self.tokens[a.subscriber]
        was_past_due = sub.status == PAST_DUE
        if sub.cancel_at_period_end and now >= sub.period_end:
            sub.status = CANCELLED
            plan.live = max(plan.live - 1, 0)
            return OK
        if was_past_due and now > sub.past_due_since + plan.grace:
            sub.status = EXPIRED
            plan.live = max(plan.live - 1, 0)
            return OK
        if token.balance < plan.amount or not token.delegate or token.delegated < plan.amount:
            if not was_past_due:
                sub.status, sub.past_due_since = PAST_DUE, now
            return OK  # a failed renewal is recorded, not refused
        self._charge(a, plan.amount)
        late = now - sub.period_end >= plan.period
        start = now if was_past_due or late else sub.period_end
        sub.period_start, sub.period_end = start, start + plan.period
        sub.cycles += 1
        sub.status, sub.past_due_since = ACTIVE, 0
        sub.total_paid += plan.amount
        if sub.has_allowance:
            sub.used, sub.allowance_cycle = 0, sub.cycles
        return OK

    def _deduct(self, a: Action, now: int) -> str:
        sub = self.subs.get((a.plan, a.subscriber))
        if sub is None or not sub.has_allowance:
            return "AccountNotInitialized"
        if a.actor not in (BILLING_ACTOR, PROVIDER_ACTOR):
            return "Unauthorized"
        if a.amount == 0:
            return "ZeroAmount"
        if sub.status != ACTIVE:
            return "SubscriptionNotActive"
        token = self.tokens[a.subscriber]
        if token.balance < a.amount:
            return "InsufficientFunds"
        if not token.delegate or token.delegated < a.amount:
            return "DelegationMissing"
        if sub.used + a.amount > U64_MAX:
            return "MathOverflow"
        if sub.used + a.amount > sub.cap:
            return "AllowanceExhausted"
        self._charge(a, a.amount)
        sub.used += a.amount
        sub.total_deducted += a.amount
        sub.total_paid += a.amount
        return OK

    def _changeable(self, a: Action, need_live: bool) -> tuple[SubModel | None, str | None, str]:
        """The subscription, the actor's party, or the error that comes first."""
        sub = self.subs.get((a.plan, a.subscriber))
        if sub is None:
            return None, None, "AccountNotInitialized"
        if need_live and not sub.live:
            return None, None, "SubscriptionEnded"
        return sub, self.party(a.actor, a.subscriber), OK

    def _pause(self, a: Action, now: int) -> str:
        sub = self.subs.get((a.plan, a.subscriber))
        if sub is None:
            return "AccountNotInitialized"
        if not sub.live:
            return "SubscriptionEnded"
        if sub.status != ACTIVE:
            return "SubscriptionNotActive"
        party = self.party(a.actor, a.subscriber)
        if party is None:
            return "Unauthorized"
        sub.status, sub.paused_at, sub.paused_by = PAUSED, now, party
        return OK

    def _resume(self, a: Action, now: int) -> str:
        sub, party, error = self._changeable(a, need_live=True)
        if sub is None:
            return error
        if party is None:
            return "Unauthorized"
        if sub.status == PAUSED:
            if sub.paused_by != party:
                return "NotYourDecision"
            sub.period_end = now + max(sub.period_end - sub.paused_at, 0)
            sub.status, sub.paused_at, sub.paused_by = ACTIVE, 0, None
        elif sub.status == ACTIVE and sub.cancel_at_period_end:
            if sub.cancel_by != party:
                return "NotYourDecision"
            sub.cancel_at_period_end, sub.cancel_by = False, None
        else:
            return "NotPaused"
        return OK

    def _cancel(self, a: Action, now: int) -> str:
        sub, party, error = self._changeable(a, need_live=True)
        if sub is None:
            return error
        if party is None:
            return "Unauthorized"
        if a.flag and sub.status == ACTIVE:
            if sub.cancel_by != SUBSCRIBER:
                sub.cancel_by = party
            sub.cancel_at_period_end = True
        else:
            sub.status = CANCELLED
            sub.cancel_at_period_end, sub.cancel_by, sub.paused_by = False, None, None
            plan = self.plans[a.plan]
            plan.live = max(plan.live - 1, 0)
        return OK

    def _set_cap(self, a: Action, now: int) -> str:
        sub = self.subs.get((a.plan, a.subscriber))
        if sub is None:
            return "AccountNotInitialized"
        if a.actor != subscriber_actor(a.subscriber):
            return "ConstraintHasOne"
        if a.amount == 0:
            return "ZeroAmount"
        if not sub.live:
            return "SubscriptionEnded"
        if not sub.has_allowance:  # made without one: it gets one, from this cycle
            sub.has_allowance, sub.used, sub.total_deducted = True, 0, 0
            sub.allowance_cycle = sub.cycles
        sub.cap = a.amount
        return OK

    def _close(self, a: Action, now: int) -> str:
        sub = self.subs.get((a.plan, a.subscriber))
        if sub is None or (a.flag and not sub.has_allowance):
            return "AccountNotInitialized"
        if a.actor != subscriber_actor(a.subscriber):
            return "ConstraintHasOne"
        if sub.live:
            return "SubscriptionStillLive"
        if a.flag != sub.has_allowance:
            return "NoAllowance"
        del self.subs[(a.plan, a.subscriber)]
        return OK

    def _topup(self, a: Action, now: int) -> str:
        self.tokens[a.subscriber].balance += a.amount
        self.minted += a.amount
        return OK

    def _revoke(self, a: Action, now: int) -> str:
        token = self.tokens[a.subscriber]
        token.delegate, token.delegated = False, 0
        return OK

    def _approve(self, a: Action, now: int) -> str:
        token = self.tokens[a.subscriber]
        token.delegate, token.delegated = True, a.amount
        return OK

    def _time(self, a: Action, now: int) -> str:
        return OK

    def view(self) -> dict[str, object]:
        """The model's state, keyed as `Snapshot.view` keys the chain's."""
        out: dict[str, object] = {"supply": self.minted}
        for p, plan in enumerate(self.plans):
            out[f"plan{p}.live"] = plan.live
            out[f"plan{p}.total_subscriptions"] = plan.total_subscriptions
            out[f"plan{p}.total_collected"] = plan.total_collected
        for i, token in enumerate(self.tokens):
            out[f"token{i}"] = (token.balance, token.delegate, token.delegated)
        out["destination"] = sum(plan.total_collected for plan in self.plans)
        for p in range(len(self.plans)):
            for i in range(len(self.tokens)):
                sub = self.subs.get((p, i))
                name = f"p{p}/sub{i}"
                out[name] = None
                out[f"{name}.allowance"] = None
                if sub is None:
                    continue
                out[name] = {
                    "status": sub.status,
                    "created_at": sub.created_at,
                    "period": (sub.period_start, sub.period_end),
                    "past_due_since": sub.past_due_since,
                    "paused": (sub.paused_at, sub.paused_by),
                    "cancel": (sub.cancel_at_period_end, sub.cancel_by),
                    "cycles": sub.cycles,
                    "total_paid": sub.total_paid,
                    "has_allowance": sub.has_allowance,
                }
                if sub.has_allowance:
                    allowance = (sub.cap, sub.used, sub.total_deducted, sub.allowance_cycle)
                    out[f"{name}.allowance"] = allowance
        return out


# -- the chain's state --------------------------------------------------------------------------
@dataclass
class TokenState:
    balance: int
    delegate: Pubkey | None
    delegated: int


@dataclass
class Snapshot:
    """Everything the sequence touches, read in one getMultipleAccounts (one slot)."""

    now: int
    supply: int
    destination: int
    # what a transfer-fee mint withheld in the destination (0 for other mints)
    withheld: int
    plans: list[PlanAccount]
    tokens: list[TokenState]
    subs: dict[tuple[int, int], SubscriptionAccount]
    allowances: dict[tuple[int, int], AllowanceAccount]
    # address -> (lamports, data length) of every account read that the program owns
    program_accounts: dict[Pubkey, tuple[int, int]]

    def view(self, delegates: list[Pubkey]) -> dict[str, object]:
        # What reached the destination: its balance and the fees withheld in it.
        received = self.destination + self.withheld
        out: dict[str, object] = {"supply": self.supply, "destination": received}
        for p, plan in enumerate(self.plans):
            out[f"plan{p}.live"] = plan.live_subscriptions
            out[f"plan{p}.total_subscriptions"] = plan.total_subscriptions
            out[f"plan{p}.total_collected"] = plan.total_collected
        for i, token in enumerate(self.tokens):
            delegate: object = token.delegate == delegates[i]
            if token.delegate is not None and token.delegate != delegates[i]:
                delegate = str(token.delegate)  # never expected: an unknown delegate
            out[f"token{i}"] = (token.balance, delegate, token.delegated)
        for p in range(len(self.plans)):
            for i in range(len(self.tokens)):
                name = f"p{p}/sub{i}"
                sub = self.subs.get((p, i))
                out[name] = None if sub is None else sub_view(sub)
                al = self.allowances.get((p, i))
                out[f"{name}.allowance"] = (
                    None if al is None else (al.cap, al.used, al.total_deducted, al.cycle)
                )
        return out


def kind_of(value: Any) -> str | None:
    """Name of a decoded Borsh enum variant (`Active`, `Provider`), None for None."""
    return None if value is None else str(value.kind)


def sub_view(sub: SubscriptionAccount) -> dict[str, object]:
    return {
        "status": kind_of(sub.status),
        "created_at": sub.created_at,
        "period": (sub.current_period_start, sub.current_period_end),
        "past_due_since": sub.past_due_since,
        "paused": (sub.paused_at, kind_of(sub.paused_by)),
        "cancel": (sub.cancel_at_period_end, kind_of(sub.cancel_requested_by)),
        "cycles": sub.cycles_billed,
        "total_paid": sub.total_paid,
        "has_allowance": sub.has_allowance,
    }


def outcome_of(result: TxResult) -> str:
    """OK, or the name of the error: the program's own, Anchor's, else the raw error."""
    if result.ok:
        return OK
    err = result.program_error
    if err is not None:
        return err.name
    for line in result.logs:
        match = re.search(r"Error Code: (\w+)\.", line)
        if match:
            return match.group(1)
    return f"error {result.error}"


def diff(expected: dict[str, object], actual: dict[str, object]) -> list[str]:
    """`key: model X, chain Y` for each difference (field by field within a subscription)."""
    out = []
    for key in sorted(set(expected) | set(actual)):
        want, got = expected.get(key), actual.get(key)
        if isinstance(want, dict) and isinstance(got, dict):
            out += diff(
                {f"{key}.{k}": v for k, v in want.items()},
                {f"{key}.{k}": v for k, v in got.items()},
            )
        elif want != got:
            out.append(f"{key}: model {want!r}, chain {got!r}")
    return out


# -- the runner ---------------------------------------------------------------------------------
class SequenceFailure(AssertionError):
    """The program disagreed with the model, or an invariant broke."""


@dataclass
class RunStats:
    seed: int
    steps: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    transitions: Counter[str] = field(default_factory=Counter)
    renewals: int = 0
    deductions: int = 0
    first_periods: int = 0
    collected: int = 0
    fees: int = 0  # withheld by a transfer-fee mint, as the events reported
    elapsed: float = 0.0

    def summary(self) -> str:
        refused = sum(n for name, n in self.outcomes.items() if name.split()[-1] != OK)
        return (
            f"seed {self.seed}: {self.steps} steps, {self.steps - refused} ok, {refused} refused, "
            f"{self.first_periods} subscriptions, {self.renewals} renewals, "
            f"{self.deductions} deductions, {self.collected / USDC:.2f} USDC collected, "
            f"{self.elapsed:.1f}s"
        )


@dataclass
class PlanInfo:
    address: Pubkey
    amount: int
    period: int
    grace: int


class SequenceRunner:
    """Runs one seeded sequence against `chain`; `run()` raises SequenceFailure on the first
    disagreement. Every plan, mint and keypair is new, so runs share a validator freely."""

    def __init__(
        self,
        chain: Chain,
        clock: Clock,
        seed: int,
        steps: int,
        subscribers: int = 4,
        max_advance: int | None = None,
        mint_kind: str = SPL_MINT,
    ) -> None:
        assert mint_kind in (SPL_MINT, FEE_HOOK_MINT), mint_kind
        self.mint_kind = mint_kind
        self.token_program = TOKEN_2022_PROGRAM if mint_kind == FEE_HOOK_MINT else TOKEN_PROGRAM_ID
        self.extra: tuple[AccountMeta, ...] = ()
        self.fees = 0  # the fees the program's events reported
        self.chain, self.clock, self.seed, self.steps = chain, clock, seed, steps
        self.rng = random.Random(seed)
        self.n = subscribers
        self.max_advance = max_advance
        self.stats = RunStats(seed)
        self.history: list[str] = []
        self.rent: dict[int, int] = {}

    # -- setup --------------------------------------------------------------------------
    def setup(self) -> None:
        chain, rng, days = self.chain, self.rng, self.clock.days
        self.provider = chain.funded_keypair()
        self.billing = chain.funded_keypair()
        self.stranger = chain.funded_keypair()
        if self.mint_kind == FEE_HOOK_MINT:
            self.mint = t22_mint(chain, 6, transfer_hook=HOOK, transfer_fee=(FEE_BPS, MAX_FEE))
            self.extra = hook_extra(chain, self.mint)
        else:
            self.mint = chain.create_mint(6)
        self.destination = chain.token_account(
            self.provider.pubkey(), self.mint, program_id=self.token_program
        )
        self.plans: list[PlanInfo] = []
        for plan_id in (1, 2):
            amount = rng.choice([1, 4, 10]) * USDC
            period, grace = days(rng.randint(1, 3)), days(rng.choice([0, 1, 3, 6]))
            ix = instructions.create_plan(
                self.provider.pubkey(),
                plan_id,
                self.mint,
                self.destination,
                self.billing.pubkey(),
                amount,
                period,
                grace,
                token_program=self.token_program,
            )
            chain.send_ok([ix], [self.provider])
            address = pda.plan_address(self.provider.pubkey(), plan_id)
            self.plans.append(PlanInfo(address, amount, period, grace))
        self.subscribers: list[Keypair] = []
        self.token_accounts: list[Pubkey] = []
        self.funded: list[int] = []
        for _ in range(self.n):
            kp = chain.funded_keypair()
            balance = rng.choice([0, 5, 12, 30, 60, 100]) * USDC
            self.subscribers.append(kp)
            self.token_accounts.append(
                chain.token_account(kp.pubkey(), self.mint, balance, program_id=self.token_program)
            )
            self.funded.append(balance)
        self.delegates = [pda.delegate_address(kp.pubkey()) for kp in self.subscribers]
        self.actors: dict[str, Keypair] = {
            subscriber_actor(i): kp for i, kp in enumerate(self.subscribers)
        }
        self.actors |= {
            PROVIDER_ACTOR: self.provider,
            BILLING_ACTOR: self.billing,
            STRANGER: self.stranger,
        }
        self.model = Model(
            [PlanModel(p.amount, p.period, p.grace) for p in self.plans],
            [TokenModel(balance) for balance in self.funded],
            minted=sum(self.funded),
        )
        self.sub_addresses = {
            (p, i): pda.subscription_address(plan.address, kp.pubkey())
            for p, plan in enumerate(self.plans)
            for i, kp in enumerate(self.subscribers)
        }
        self.allowance_addresses = {
            key: pda.allowance_address(address) for key, address in self.sub_addresses.items()
        }
        # Invariant bookkeeping, from the chain alone.
        self.ended_paid = [0] * len(self.plans)  # total_paid of replaced or closed generations
        self.subscribed = [0] * len(self.plans)  # successful subscribes per plan
        self.periods: dict[tuple[int, int], list[tuple[int, int]]] = {}  # charged periods
        self.cycle_usage: dict[tuple[int, int], int] = {}  # deducted in the current cycle
        self.cap_below_usage: dict[tuple[int, int], bool] = {}
        self.start = self.clock.now()
        self.snapshot = self.read()
        self.check_model(self.model, self.snapshot, "setup")

    # -- reading the chain ------------------------------------------------------------
    def read(self) -> Snapshot:
        keys = list(self.sub_addresses)
        addresses = [CLOCK_SYSVAR, self.mint, self.destination]
        addresses += [p.address for p in self.plans] + self.token_accounts
        addresses += [self.sub_addresses[k] for k in keys]
        addresses += [self.allowance_addresses[k] for k in keys]
        config = {"encoding": "base64", "commitment": "confirmed"}
        values = self.chain.rpc("getMultipleAccounts", [str(a) for a in addresses], config)
        raw: list[tuple[Pubkey, int, bytes] | None] = [
            None
            if v is None
            else (Pubkey.from_string(v["owner"]), v["lamports"], base64.b64decode(v["data"][0]))
            for v in values["value"]
        ]
        accounts = dict(zip(addresses, raw, strict=True))

        def data(address: Pubkey) -> bytes:
            acct = accounts[address]
            assert acct is not None, f"{address} is missing"
            return acct[2]

        program = {
            address: (acct[1], len(acct[2]))
            for address, acct in accounts.items()
            if acct is not None and acct[0] == PROGRAM_ID
        }
        subs, allowances = {}, {}
        for key in keys:
            if accounts[self.sub_addresses[key]] is not None:
                subs[key] = SubscriptionAccount.decode(data(self.sub_addresses[key]))
            if accounts[self.allowance_addresses[key]] is not None:
                allowances[key] = AllowanceAccount.decode(data(self.allowance_addresses[key]))
        return Snapshot(
            now=int.from_bytes(data(CLOCK_SYSVAR)[32:40], "little", signed=True),
            supply=int.from_bytes(data(self.mint)[36:44], "little"),
            destination=token_state(data(self.destination)).balance,
            withheld=(
                t22.token_account_info(TOKEN_2022_PROGRAM, data(self.destination)).withheld_amount
                if self.mint_kind == FEE_HOOK_MINT
                else 0
            ),
            plans=[PlanAccount.decode(data(p.address)) for p in self.plans],
            tokens=[token_state(data(t)) for t in self.token_accounts],
            subs=subs,
            allowances=allowances,
            program_accounts=program,
        )

    # -- choosing actions -------------------------------------------------------------
    def choose(self) -> Action:
        rng = self.rng
        weights = dict(KINDS)
        if sum(1 for sub in self.model.subs.values() if sub.live) < self.n // 2:
            weights["subscribe"] *= 4  # little to act on yet
        kind = rng.choices(list(weights), weights=list(weights.values()))[0]
        p, i = self.target(kind)
        sub = self.model.subs.get((p, i))
        owner = subscriber_actor(i)
        if rng.random() < 0.25:
            actor = rng.choice(list(self.actors))
        else:
            actor = {
                "deduct": rng.choice([BILLING_ACTOR, PROVIDER_ACTOR]),
                "pause": rng.choice([owner, PROVIDER_ACTOR]),
                "resume": rng.choice([owner, PROVIDER_ACTOR]),
                "cancel": rng.choice([owner, PROVIDER_ACTOR]),
                "collect": rng.choice(list(self.actors)),
            }.get(kind, owner)
        has_allowance = sub is not None and sub.has_allowance
        wrong = rng.random() < 0.07  # the accounts a careless client would pass
        if kind == "subscribe":
            overage = None
            if rng.random() < 0.6:
                overage = 0 if rng.random() < 0.05 else rng.randint(1, 20) * USDC // 2
            return Action(kind, p, i, actor, flag=has_allowance != wrong, max_overage=overage)
        if kind in ("collect", "close"):
            return Action(kind, p, i, actor, flag=has_allowance != wrong)
        if kind == "deduct":
            left = max(sub.cap - sub.used, 0) if sub is not None else 0
            amount = rng.choices(
                [rng.randint(1, 3 * USDC), max(left, 1), left + 1, 0, rng.randint(20, 99) * USDC],
                weights=[10, 2, 2, 1, 1],
            )[0]
            return Action(kind, p, i, actor, amount=amount)
        if kind == "cancel":
            return Action(kind, p, i, actor, flag=rng.random() < 0.6)
        if kind == "set_cap":
            used = sub.used if sub is not None else 0
            cap = rng.choice(
                [rng.randint(1, 20) * USDC // 2, rng.randint(1, 20) * USDC // 2, 0, max(used, 1)]
            )
            if used > 1 and rng.random() < 0.15:
                cap = rng.randint(1, used - 1)  # below what was already deducted
            return Action(kind, p, i, actor, amount=cap)
        if kind == "topup":
            return Action(kind, 0, i, owner, amount=rng.randint(5, 40) * USDC)
        if kind == "revoke":
            return Action(kind, 0, i, owner)
        if kind == "approve":
            amount = rng.choice(
                [U64_MAX, U64_MAX, U64_MAX // 2, rng.randint(1, 30) * USDC, 0, rng.randint(1, 99)]
            )
            if any(s.status == PAST_DUE for (_, j), s in self.model.subs.items() if j == i):
                amount = U64_MAX if rng.random() < 0.7 else amount  # back from past due, mostly
            return Action(kind, 0, i, owner, amount=amount)
        if kind == "time":
            return Action(kind, p, i, amount=self.advance_seconds(p, sub))
        return Action(kind, p, i, actor)  # pause, resume

    def target(self, kind: str) -> tuple[int, int]:
        """Mostly a (plan, subscriber) the action can do something to; sometimes any."""
        rng, subs, tokens = self.rng, self.model.subs, self.model.tokens
        if kind in SPL_KINDS:
            short = max(plan.amount for plan in self.plans)
            past_due = {i for (_, i), sub in subs.items() if sub.status == PAST_DUE}
            # Top-ups mostly for who cannot pay, approvals for who revoked; past due first.
            poor = [i for i in range(self.n) if tokens[i].balance < short]
            revoked = [i for i in range(self.n) if tokens[i].delegated < short]
            needy = {
                "topup": [i for i in poor if i in past_due] or poor + sorted(past_due),
                "approve": [i for i in revoked if i in past_due] or revoked,
            }.get(kind, [])
            if needy and rng.random() < 0.6:
                return 0, rng.choice(needy)
            return 0, rng.randrange(self.n)
        if kind == "collect" and rng.random() < 0.3:
            kind = "retry"  # of a past-due renewal, maybe a recovery
        keys = sorted(self.sub_addresses)
        pool = [key for key in keys if likely_target(kind, subs.get(key))]
        if pool and rng.random() < 0.8:
            return rng.choice(pool)
        return rng.choice(keys)

    def advance_seconds(self, p: int, sub: SubModel | None) -> int:
        """Up to one of a subscription's coming edges (due, grace deadline), or a random
        fraction or multiple of a period."""
        rng, plan, now = self.rng, self.plans[p], self.snapshot.now
        edges = []
        if sub is not None and sub.live:
            edges = [sub.period_end, sub.period_end + 1, sub.period_end + plan.period]
            if sub.status == PAST_DUE:
                deadline = sub.past_due_since + plan.grace
                edges += [deadline, deadline + 1]
        edges = [edge for edge in edges if edge > now]
        if edges and rng.random() < 0.4:
            seconds = rng.choice(edges) - now
        else:
            factor = rng.choice([0.05, 0.1, 0.25, 0.5, 0.5, 0.9, 1.0, 1.5, 3.0])
            seconds = max(int(plan.period * factor), 1)
        return min(seconds, self.max_advance) if self.max_advance else seconds

    # -- sending --------------------------------------------------------------------------
    def transaction(self, a: Action) -> tuple[list[Instruction], list[Keypair]]:
        plan = self.plans[a.plan].address
        owner = self.subscribers[a.subscriber]
        token = self.token_accounts[a.subscriber]
        signer = self.actors.get(a.actor, owner)
        key = (a.plan, a.subscriber)
        sub, allowance = self.sub_addresses[key], self.allowance_addresses[key]
        mint, dest, me = self.mint, self.destination, signer.pubkey()
        ix: Instruction
        routed = {"token_program": self.token_program, "extra": self.extra}
        if a.kind == "subscribe":
            ix = instructions.subscribe(
                plan, me, token, mint, dest, a.max_overage, a.flag, **routed
            )
        elif a.kind == "collect":
            ix = instructions.collect(plan, owner.pubkey(), token, mint, dest, a.flag, **routed)
        elif a.kind == "deduct":
            ix = instructions.deduct_allowance(
                me, plan, owner.pubkey(), token, mint, dest, a.amount, **routed
            )
        elif a.kind == "pause":
            ix = instructions.pause(me, plan, owner.pubkey())
        elif a.kind == "resume":
            ix = instructions.resume(me, plan, owner.pubkey())
        elif a.kind == "cancel":
            ix = instructions.cancel(me, plan, owner.pubkey(), a.flag)
        elif a.kind == "set_cap":  # built here: the signer need not be the subscriber
            ix = gen.set_allowance_cap(
                {"cap": a.amount}, {"subscriber": me, "subscription": sub, "allowance": allowance}
            )
        elif a.kind == "close":
            ix = gen.close_subscription(
                {"subscriber": me, "subscription": sub, "allowance": allowance if a.flag else None}
            )
        elif a.kind == "topup":
            payer = self.chain.payer  # the authority of the mints Chain creates
            minted = MintToParams(
                program_id=self.token_program,
                mint=mint,
                dest=token,
                mint_authority=payer.pubkey(),
                amount=a.amount,
            )
            return [mint_to(minted)], [payer]
        elif a.kind == "revoke":
            revoked = RevokeParams(
                program_id=self.token_program, account=token, owner=owner.pubkey()
            )
            return [revoke(revoked)], [owner]
        elif a.kind == "approve":
            delegate = self.delegates[a.subscriber]
            params = ApproveParams(
                program_id=self.token_program,
                source=token,
                delegate=delegate,
                owner=owner.pubkey(),
                amount=a.amount,
            )
            return [approve(params)], [owner]
        else:
            raise ValueError(f"unknown action {a.kind}")
        return [ix], [signer]

    # -- one step -----------------------------------------------------------------------
    def run(self, progress: Callable[[int], None] | None = None) -> RunStats:
        began = time.monotonic()
        self.setup()
        for step in range(1, self.steps + 1):
            self.step(step)
            if progress is not None:
                progress(step)
        self.stats.elapsed = time.monotonic() - began
        self.stats.fees = self.fees
        return self.stats

    def step(self, step: int) -> None:
        a = self.choose()
        pre = self.snapshot
        logs: list[str] = []
        if a.kind == "time":
            self.clock.advance_to(pre.now + a.amount)
            outcome = OK
        else:
            t0 = self.clock.now()
            result = self.chain.send(*self.transaction(a))
            outcome, logs = outcome_of(result), result.logs
            for event in result.events:
                if "fee" not in event.data:
                    continue
                fee, amount = int(event.data["fee"]), int(event.data["amount"])
                expected = (
                    0
                    if self.mint_kind == SPL_MINT
                    else min(-(-amount * FEE_BPS // 10_000), MAX_FEE)
                )
                if fee != expected or int(event.data["net"]) != amount - fee:
                    self.fail(
                        step, f"{event.name}: fee {fee} on {amount}, the mint's is {expected}"
                    )
                self.fees += fee
        post = self.read()
        if a.kind == "time":
            t0 = post.now
        self.record(step, a, t0, outcome)
        # The model at every second the instruction may have executed at.
        candidates: list[tuple[str, Model]] = []
        for now in range(t0, max(t0, post.now) + 1):
            model = copy.deepcopy(self.model)
            candidates.append((model.apply(a, now), model))
        matching = [model for predicted, model in candidates if predicted == outcome]
        if not matching:
            predicted = " or ".join(sorted({c[0] for c in candidates}))
            self.fail(
                step,
                f"the model predicted {predicted}, the program answered {outcome}"
                + ("\n  logs:\n    " + "\n    ".join(logs[-12:]) if logs else ""),
            )
        chain_view = post.view(self.delegates)
        diffs: list[str] = []
        for model in matching:
            diffs = diff(model.view(), chain_view)
            if not diffs:
                self.count(a, outcome, self.model, model)
                self.model = model
                break
        else:
            self.fail(
                step, "the chain's state differs from the model's:\n    " + "\n    ".join(diffs)
            )
        self.check_invariants(step, a, outcome, pre, post)
        self.snapshot = post
        self.stats.steps = step
        self.stats.collected = sum(plan.total_collected for plan in post.plans)

    def count(self, a: Action, outcome: str, before: Model, after: Model) -> None:
        """Counts outcomes and the status changes they made (what the sequence covered)."""
        self.stats.outcomes[f"{a.kind} {outcome}"] += 1
        key = (a.plan, a.subscriber)
        old, new = before.subs.get(key), after.subs.get(key)
        if a.kind in SPL_KINDS or a.kind == "time" or outcome != OK:
            return
        was = "none" if old is None else old.status
        now = "none" if new is None else new.status
        if old is not None and new is not None and old.cycles < new.cycles:
            now += " (renewed)"
        if a.kind == "subscribe":
            token = before.tokens[a.subscriber]
            kept = token.delegate and token.delegated >= U64_MAX // 2
            now += " (approval kept)" if kept else " (Approve CPI)"
        if a.kind == "cancel" and new is not None and new.cancel_at_period_end:
            now += f" + cancel at period end by {new.cancel_by}"
        self.stats.transitions[f"{a.kind}: {was} -> {now}"] += 1

    def record(self, step: int, a: Action, t0: int, outcome: str) -> None:
        day = self.clock.days(1)
        self.history.append(
            f"{step:4d} day {(t0 - self.start) / day:7.2f} {a.describe()} -> {outcome}"
        )

    def fail(self, step: int, what: str, tail: int = 60) -> None:
        __tracebackhide__ = True
        shown = self.history[-tail:]
        plans = ", ".join(
            f"p{p}: {plan.amount / USDC:g} USDC every {plan.period}s, grace {plan.grace}s"
            for p, plan in enumerate(self.plans)
        )
        raise SequenceFailure(
            f"seed {self.seed}, step {step}: {what}\n"
            f"  plans: {plans}; starting balances {[b / USDC for b in self.funded]} USDC\n"
            f"  history (the last {len(shown)} of {len(self.history)} steps):\n    "
            + "\n    ".join(shown)
            + f"\n  reproduce: {self.reproduce()}"
        )

    def reproduce(self) -> str:
        if self.chain.can_time_travel:
            return f"scripts/fuzz-program --seeds 1 --start-seed {self.seed} --steps {self.steps}"
        return "pytest --validator=solana-test-validator tests/program/test_sequence.py"

    def check_model(self, model: Model, snap: Snapshot, where: str) -> None:
        diffs = diff(model.view(), snap.view(self.delegates))
        if diffs:
            raise SequenceFailure(f"seed {self.seed}, {where}: " + "; ".join(diffs))

    # -- invariants, from the chain alone ------------------------------------------------
    def check_invariants(
        self, step: int, a: Action, outcome: str, pre: Snapshot, post: Snapshot
    ) -> None:
        broken: list[str] = []
        ok = outcome == OK
        target = (a.plan, a.subscriber)
        owner_acts = a.actor == subscriber_actor(a.subscriber)
        if ok and a.kind == "topup":
            self.funded[a.subscriber] += a.amount
        subscribed = ok and a.kind == "subscribe" and owner_acts
        if (subscribed or (ok and a.kind == "close")) and target in pre.subs:
            self.ended_paid[a.plan] += pre.subs[target].total_paid  # that generation is gone
        if subscribed:
            self.subscribed[a.plan] += 1

        # Money: debited == recorded == credited == collected; supply conserved.
        debited = sum(f - t.balance for f, t in zip(self.funded, post.tokens, strict=True))
        recorded = sum(self.ended_paid) + sum(s.total_paid for s in post.subs.values())
        collected = sum(plan.total_collected for plan in post.plans)
        model_recorded = sum(plan.total_collected for plan in self.model.plans)
        # With a transfer-fee mint: debited = credited + withheld, and the fees withheld are
        # those the events reported, each the mint's fee on its amount.
        received = post.destination + post.withheld
        if not debited == recorded == received == collected == model_recorded:
            broken.append(
                f"money: debited {debited}, subscriptions' total_paid {recorded}, "
                f"destination {post.destination} + withheld {post.withheld}, plans' "
                f"total_collected {collected}, model's charges {model_recorded}"
            )
        if post.withheld != self.fees:
            broken.append(f"fees: withheld {post.withheld}, the events' fees {self.fees}")
        for p, plan in enumerate(post.plans):
            paid = self.ended_paid[p] + sum(s.total_paid for k, s in post.subs.items() if k[0] == p)
            if plan.total_collected != paid:
                broken.append(f"plan{p}: total_collected {plan.total_collected} != paid {paid}")
            live = sum(1 for k, s in post.subs.items() if k[0] == p and is_live(s))
            if plan.live_subscriptions != live:
                broken.append(f"plan{p}: live_subscriptions {plan.live_subscriptions} != {live}")
            if plan.total_subscriptions != self.subscribed[p]:
                broken.append(f"plan{p}: total_subscriptions {plan.total_subscriptions}")
        balances = sum(t.balance for t in post.tokens) + post.destination + post.withheld
        if not post.supply == balances == sum(self.funded):
            broken.append(
                f"supply: mint {post.supply}, balances {balances}, minted {sum(self.funded)}"
            )

        # Rent: every program account holds exactly its rent-exempt minimum.
        for address, (lamports, size) in post.program_accounts.items():
            if size not in self.rent:
                self.rent[size] = self.chain.minimum_balance(size)
            if lamports != self.rent[size]:
                broken.append(f"{address}: {lamports} lamports, rent is {self.rent[size]}")
        expected_program = len(post.plans) + len(post.subs) + len(post.allowances)
        if len(post.program_accounts) != expected_program:
            broken.append("an account at a program address is not the program's")

        for key in self.sub_addresses:
            broken += self.check_subscription(key, a, ok, pre, post)
        if broken:
            self.fail(step, "invariant broken:\n    " + "\n    ".join(broken))

    def check_subscription(
        self, key: tuple[int, int], a: Action, ok: bool, pre: Snapshot, post: Snapshot
    ) -> list[str]:
        broken: list[str] = []
        name = f"p{key[0]}/sub{key[1]}"
        plan = self.plans[key[0]]
        before, after = pre.subs.get(key), post.subs.get(key)
        targeted = (a.plan, a.subscriber) == key and a.kind not in SPL_KINDS
        by_owner = a.actor == subscriber_actor(key[1])
        allowance, pre_allowance = post.allowances.get(key), pre.allowances.get(key)
        if (allowance is not None) != (after is not None and after.has_allowance):
            broken.append(f"{name}: allowance account present: {allowance is not None}")
        if after is None:
            if before is not None and not (targeted and ok and a.kind == "close"):
                broken.append(f"{name}: the subscription disappeared")
            return broken
        status = kind_of(after.status)
        # The account's constants.
        if (
            after.subscriber != self.subscribers[key[1]].pubkey()
            or after.plan != plan.address
            or after.token_account != self.token_accounts[key[1]]
            or after.terms.amount != plan.amount
            or after.terms.period_secs != plan.period
            or after.terms.destination != self.destination
            or after.terms.mint != self.mint
        ):
            broken.append(f"{name}: plan, subscriber, token account or terms changed")
        if (status == PAUSED) != (after.paused_by is not None):
            broken.append(f"{name}: {status} with paused_by {after.paused_by}")
        if after.cancel_at_period_end != (after.cancel_requested_by is not None):
            broken.append(f"{name}: cancel_at_period_end without who asked, or the reverse")
        if status == PAST_DUE and after.past_due_since == 0:
            broken.append(f"{name}: past due since 0")
        if status == ACTIVE and after.past_due_since != 0:
            broken.append(f"{name}: active but past due since {after.past_due_since}")
        if status == ACTIVE and after.current_period_end - after.current_period_start < plan.period:
            broken.append(f"{name}: a paid period shorter than the plan's")

        new_generation = targeted and ok and a.kind == "subscribe" and by_owner
        if new_generation:
            if before is not None and is_live(before):
                broken.append(f"{name}: a live subscription was replaced")
            if after.cycles_billed != 1 or after.total_paid != plan.amount:
                broken.append(f"{name}: a new subscription did not pay exactly one period")
            self.periods[key] = [(after.current_period_start, after.current_period_end)]
            self.stats.first_periods += 1
            self.cycle_usage[key] = 0
            self.cap_below_usage[key] = False
        elif before is None:
            broken.append(f"{name}: a subscription appeared without a subscribe")
            return broken
        else:
            cycles = after.cycles_billed - before.cycles_billed
            paid = after.total_paid - before.total_paid
            deducted = 0
            if allowance is not None and pre_allowance is not None:
                deducted = allowance.total_deducted - pre_allowance.total_deducted
            if cycles not in (0, 1) or deducted < 0 or paid < 0:
                broken.append(f"{name}: {cycles} cycles, {paid} paid, {deducted} deducted")
            if cycles == 1:  # a period charge
                was = kind_of(before.status)
                periods = self.periods.setdefault(key, [])
                last_end = max((end for _, end in periods), default=0)
                if not (targeted and a.kind == "collect"):
                    broken.append(f"{name}: a period charged by {a.kind}")
                if was not in (ACTIVE, PAST_DUE):
                    broken.append(f"{name}: collect charged a {was} subscription")
                if post.now < before.current_period_end:
                    broken.append(f"{name}: charged before its period ended")
                if after.current_period_start < max(before.current_period_end, last_end):
                    broken.append(
                        f"{name}: the new period starts at {after.current_period_start}, "
                        f"before the end of the paid one ({before.current_period_end})"
                    )
                if after.current_period_end - after.current_period_start != plan.period:
                    broken.append(f"{name}: a renewed period of the wrong length")
                if paid != plan.amount:
                    broken.append(f"{name}: a renewal charged {paid}")
                periods.append((after.current_period_start, after.current_period_end))
                self.stats.renewals += 1
            elif paid != deducted:
                broken.append(f"{name}: paid {paid} without a renewal, deducted {deducted}")
            if deducted and not (targeted and a.kind == "deduct" and deducted == a.amount):
                broken.append(f"{name}: {deducted} deducted by {a.kind}")
            if deducted:
                self.stats.deductions += 1
            if deducted and kind_of(before.status) != ACTIVE:
                broken.append(f"{name}: usage deducted from a {kind_of(before.status)} one")

            # Metered usage within the cycle's cap.
            if allowance is not None:
                if pre_allowance is None or allowance.cycle != pre_allowance.cycle:
                    self.cycle_usage[key] = 0
                    self.cap_below_usage[key] = False
                self.cycle_usage[key] = self.cycle_usage.get(key, 0) + deducted
                if deducted and allowance.used > allowance.cap:
                    broken.append(f"{name}: a deduction took usage past the cap")
                if targeted and ok and a.kind == "set_cap":
                    # The subscriber may lower the cap below this cycle's usage ("usage
                    # already deducted stays deducted"); nothing more is deducted after.
                    self.cap_below_usage[key] = allowance.cap < allowance.used
        if allowance is not None:
            if allowance.subscription != self.sub_addresses[key]:
                broken.append(f"{name}: the allowance belongs to {allowance.subscription}")
            if allowance.cycle != after.cycles_billed:
                broken.append(f"{name}: allowance cycle {allowance.cycle} != {after.cycles_billed}")
            if self.cycle_usage.get(key, 0) != allowance.used:
                usage = self.cycle_usage.get(key)
                broken.append(f"{name}: used {allowance.used}, deducted this cycle {usage}")
            if allowance.used > allowance.cap and not self.cap_below_usage.get(key):
                broken.append(f"{name}: used {allowance.used} > cap {allowance.cap}")
        return broken


def likely_target(kind: str, sub: SubModel | None) -> bool:
    """Whether `kind` can succeed on `sub`, roughly (the runner aims most actions there)."""
    if kind == "subscribe":
        return sub is None or not sub.live
    if sub is None:
        return False
    if kind == "deduct":
        return sub.has_allowance and sub.live
    if kind == "set_cap":
        return sub.live  # one without an allowance gets one
    if kind == "close":
        return not sub.live
    if kind == "resume":
        return sub.status == PAUSED or sub.cancel_at_period_end
    if kind == "retry":
        return sub.status == PAST_DUE
    return sub.live


def is_live(sub: SubscriptionAccount) -> bool:
    return kind_of(sub.status) not in (CANCELLED, EXPIRED)


def token_state(data: bytes) -> TokenState:
    """Balance and delegation of an SPL token account (its 165-byte layout)."""
    has_delegate = int.from_bytes(data[72:76], "little") == 1
    return TokenState(
        int.from_bytes(data[64:72], "little"),
        Pubkey.from_bytes(data[76:108]) if has_delegate else None,
        int.from_bytes(data[121:129], "little"),
    )


def run_sequence(
    chain: Chain,
    clock: Clock,
    seed: int,
    steps: int,
    subscribers: int = 4,
    max_advance: int | None = None,
    progress: Callable[[int], None] | None = None,
    mint_kind: str = SPL_MINT,
) -> RunStats:
    """One seeded sequence of `steps` actions on a mint of `mint_kind`; raises
    SequenceFailure on a disagreement."""
    runner = SequenceRunner(chain, clock, seed, steps, subscribers, max_advance, mint_kind)
    return runner.run(progress)
