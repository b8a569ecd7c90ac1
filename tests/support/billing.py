"""Builders for svc_billing flows in tests: a provider with a plan, a funded subscriber.

`Billing(chain).plan(amount=...)` creates a provider, its mint and destination and a plan;
`.subscriber(plan, balance)` a funded subscriber; instruction helpers fill every account.
"""

from __future__ import annotations

from dataclasses import dataclass

from solders.instruction import Instruction
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from svcpay.program import pda
from svcpay.program.generated import instructions as ix
from svcpay.program.generated.types.create_plan_args import CreatePlanArgs
from svcpay.program.generated.types.subscribe_args import SubscribeArgs

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
    return ix.create_plan(
        {
            "args": CreatePlanArgs(
                plan_id=plan_id,
                amount=amount,
                period_secs=period_secs,
                grace_secs=grace_secs,
                billing_authority=billing_authority,
            )
        },
        {
            "authority": authority,
            "plan": pda.plan_address(authority, plan_id),
            "mint": mint,
            "destination": destination,
        },
    )


def subscribe_ix(plan: Plan, subscriber: Subscriber, max_overage: int | None = None) -> Instruction:
    subscription = pda.subscription_address(plan.address, subscriber.pubkey)
    return ix.subscribe(
        {"args": SubscribeArgs(max_overage=max_overage)},
        {
            "subscriber": subscriber.pubkey,
            "plan": plan.address,
            "subscription": subscription,
            "allowance": pda.allowance_address(subscription) if max_overage is not None else None,
            "subscriber_token": subscriber.token_account,
            "destination": plan.destination,
            "mint": plan.mint,
            "delegate": pda.delegate_address(subscriber.pubkey),
        },
    )


def deduct_ix(plan: Plan, subscriber: Subscriber, amount: int, authority: Pubkey) -> Instruction:
    subscription = pda.subscription_address(plan.address, subscriber.pubkey)
    return ix.deduct_allowance(
        {"amount": amount},
        {
            "authority": authority,
            "plan": plan.address,
            "subscription": subscription,
            "allowance": pda.allowance_address(subscription),
            "subscriber_token": subscriber.token_account,
            "destination": plan.destination,
            "mint": plan.mint,
            "delegate": pda.delegate_address(subscriber.pubkey),
        },
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

    def subscriber(self, plan: Plan, balance: int) -> Subscriber:
        kp = self.chain.funded_keypair()
        return Subscriber(kp, self.chain.token_account(kp.pubkey(), plan.mint, balance))

    def subscribe(
        self, plan: Plan, subscriber: Subscriber, max_overage: int | None = None
    ) -> TxResult:
        return self.chain.send([subscribe_ix(plan, subscriber, max_overage)], [subscriber.keypair])
