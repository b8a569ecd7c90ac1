"""Builders for svc_billing flows in tests: a provider with a plan, a funded subscriber.

`Billing(chain).plan(amount=...)` creates a provider, its mint and destination and a plan;
`.subscriber(plan, balance)` a funded subscriber; instruction helpers fill every account.
"""

from __future__ import annotations

from dataclasses import dataclass

from solders.instruction import Instruction
from solders.keypair import Keypair
from solders.pubkey import Pubkey

from svcpay.program import instructions, pda
from svcpay.program.generated.accounts.plan import Plan as PlanAccount
from svcpay.program.generated.accounts.subscription import Subscription as SubscriptionAccount
from tests.support.chain import Chain, TxResult

DAY = 24 * 60 * 60
USDC = 10**6  # base units per USDC (6 decimals)


@dataclass
class Plan:
    address: Pubkey
    authority: Keypair
    billing_authority: Keypair
    mint: Pubkey
    destination: Pubkey
    amount: int
    period_secs: int
    result: TxResult


@dataclass
class Subscriber:
    keypair: Keypair
    token_account: Pubkey

    @property
    def pubkey(self) -> Pubkey:
        return self.keypair.pubkey()


def create_plan_ix(
    authority: Pubkey,
    plan_id: int,
    mint: Pubkey,
    destination: Pubkey,
    billing_authority: Pubkey,
    amount: int,
    period_secs: int = 30 * DAY,
    grace_secs: int = 3 * DAY,
) -> Instruction:
    return instructions.create_plan(
        authority, plan_id, mint, destination, billing_authority, amount, period_secs, grace_secs
    )


def subscribe_ix(
    plan: Plan,
    subscriber: Subscriber,
    max_overage: int | None = None,
    previous_allowance: bool = False,
) -> Instruction:
    return instructions.subscribe(
        plan.address,
        subscriber.pubkey,
        subscriber.token_account,
        plan.mint,
        plan.destination,
        max_overage,
        previous_allowance,
    )


def deduct_ix(plan: Plan, subscriber: Subscriber, amount: int, authority: Pubkey) -> Instruction:
    return instructions.deduct_allowance(
        authority,
        plan.address,
        subscriber.pubkey,
        subscriber.token_account,
        plan.mint,
        plan.destination,
        amount,
    )


def collect_ix(plan: Plan, subscriber: Subscriber, has_allowance: bool = False) -> Instruction:
    return instructions.collect(
        plan.address,
        subscriber.pubkey,
        subscriber.token_account,
        plan.mint,
        plan.destination,
        has_allowance,
    )


class Billing:
    def __init__(self, chain: Chain) -> None:
        self.chain = chain
        self._next_plan_id = 1

    def plan(
        self,
        amount: int = 10 * USDC,
        period_secs: int = 30 * DAY,
        grace_secs: int = 3 * DAY,
        decimals: int = 6,
        mint: Pubkey | None = None,
    ) -> Plan:
        """A new provider's plan; pass `mint` to share a mint with another plan."""
        chain = self.chain
        authority = chain.funded_keypair()
        facilitator = chain.funded_keypair()
        mint = mint or chain.create_mint(decimals)
        destination = chain.token_account(authority.pubkey(), mint)
        plan_id = self._next_plan_id
        self._next_plan_id += 1
        result = chain.send_ok(
            [
                create_plan_ix(
                    authority.pubkey(),
                    plan_id,
                    mint,
                    destination,
                    facilitator.pubkey(),
                    amount,
                    period_secs,
                    grace_secs,
                )
            ],
            [authority],
        )
        return Plan(
            pda.plan_address(authority.pubkey(), plan_id),
            authority,
            facilitator,
            mint,
            destination,
            amount,
            period_secs,
            result,
        )

    def subscription(self, plan: Plan, subscriber: Subscriber) -> SubscriptionAccount:
        acct = self.chain.account(pda.subscription_address(plan.address, subscriber.pubkey))
        assert acct is not None, "no subscription"
        return SubscriptionAccount.decode(acct.data)

    def plan_state(self, plan: Plan) -> PlanAccount:
        acct = self.chain.account(plan.address)
        assert acct is not None, "no plan"
        return PlanAccount.decode(acct.data)

    def collect(self, plan: Plan, subscriber: Subscriber, has_allowance: bool = False) -> TxResult:
        """Collects as a third party would: a fresh fee payer, no special authority."""
        cranker = self.chain.funded_keypair()
        return self.chain.send([collect_ix(plan, subscriber, has_allowance)], [cranker])

    def subscriber(self, plan: Plan, balance: int) -> Subscriber:
        kp = self.chain.funded_keypair()
        return Subscriber(kp, self.chain.token_account(kp.pubkey(), plan.mint, balance))

    def subscribe(
        self,
        plan: Plan,
        subscriber: Subscriber,
        max_overage: int | None = None,
        previous_allowance: bool = False,
    ) -> TxResult:
        ix = subscribe_ix(plan, subscriber, max_overage, previous_allowance)
        return self.chain.send([ix], [subscriber.keypair])
