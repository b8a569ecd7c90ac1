"""Builders for svc_billing flows in tests: a provider with a plan, a funded subscriber.

`Billing(chain).plan(amount=...)` creates a provider, its mint and destination and a plan;
`.subscriber(plan, balance)` a funded subscriber; instruction helpers fill every account.
`Billing(chain, SPL_TOKEN | TOKEN_2022)` picks the plans' mints: SPL Token, or PYUSD-like
Token-2022 ones (a transfer hook, a permanent delegate, a zero transfer fee), whose every
transfer carries the hook's accounts.
"""

from __future__ import annotations

from dataclasses import dataclass

from solders.instruction import AccountMeta, Instruction
from solders.keypair import Keypair
from solders.pubkey import Pubkey

from svcpay.program import instructions, pda
from svcpay.program.client import BillingClient
from svcpay.program.generated.accounts.plan import Plan as PlanAccount
from svcpay.program.generated.accounts.subscription import Subscription as SubscriptionAccount
from svcpay.protocol.programs import TOKEN_2022_PROGRAM, TOKEN_PROGRAM
from tests.support.chain import Chain, TxResult
from tests.support.token2022 import hook_extra, pyusd_like

SPL_TOKEN, TOKEN_2022 = "spl-token", "token-2022"
TOKEN_KINDS = (SPL_TOKEN, TOKEN_2022)

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
    token_program: Pubkey = TOKEN_PROGRAM
    # a hooked mint's accounts, appended to each transfer (the test hook's depend on the mint)
    extra: tuple[AccountMeta, ...] = ()


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
    token_program: Pubkey = TOKEN_PROGRAM,
) -> Instruction:
    return instructions.create_plan(
        authority, plan_id, mint, destination, billing_authority, amount, period_secs,
        grace_secs, token_program=token_program,
    )  # fmt: skip


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
        token_program=plan.token_program,
        extra=plan.extra,
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
        token_program=plan.token_program,
        extra=plan.extra,
    )


def collect_ix(plan: Plan, subscriber: Subscriber, has_allowance: bool = False) -> Instruction:
    return instructions.collect(
        plan.address,
        subscriber.pubkey,
        subscriber.token_account,
        plan.mint,
        plan.destination,
        has_allowance,
        token_program=plan.token_program,
        extra=plan.extra,
    )


class Billing:
    def __init__(self, chain: Chain, kind: str = SPL_TOKEN) -> None:
        assert kind in TOKEN_KINDS, kind
        self.chain = chain
        self.kind = kind
        self.token_program = TOKEN_2022_PROGRAM if kind == TOKEN_2022 else TOKEN_PROGRAM
        self._next_plan_id = 1

    def mint(self, decimals: int = 6) -> Pubkey:
        """A new mint of this Billing's kind."""
        if self.kind == TOKEN_2022:
            return pyusd_like(self.chain, decimals)
        return self.chain.create_mint(decimals)

    def token_account(self, owner: Pubkey, mint: Pubkey, amount: int = 0) -> Pubkey:
        return self.chain.token_account(owner, mint, amount, program_id=self.token_program)

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
        mint = mint or self.mint(decimals)
        destination = self.token_account(authority.pubkey(), mint)
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
                    self.token_program,
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
            self.token_program,
            hook_extra(chain, mint) if self.kind == TOKEN_2022 else (),
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
        return Subscriber(kp, self.token_account(kp.pubkey(), plan.mint, balance))

    def subscribe(
        self,
        plan: Plan,
        subscriber: Subscriber,
        max_overage: int | None = None,
        previous_allowance: bool = False,
    ) -> TxResult:
        ix = subscribe_ix(plan, subscriber, max_overage, previous_allowance)
        return self.chain.send([ix], [subscriber.keypair])


@dataclass
class Subscribed:
    """A plan on chain billed by `biller`, and one subscriber to it (with an allowance)."""

    plan: Pubkey
    mint: Pubkey
    destination: Pubkey
    biller: Keypair
    subscriber: Keypair
    subscription: Pubkey


async def subscribed(
    chain: Chain, client: BillingClient, *, amount: int, period: int, overage: int, plan_id: int = 1
) -> Subscribed:
    """A provider's plan (`amount` a `period`) in a new mint, and a subscriber holding 50
    periods' worth, subscribed through `client` with `overage` of metered allowance."""
    provider, biller = chain.funded_keypair(), chain.funded_keypair()
    mint = chain.create_mint()
    destination = chain.token_account(provider.pubkey(), mint)
    plan = await client.create_plan(
        provider, plan_id=plan_id, mint=mint, destination=destination,
        billing_authority=biller.pubkey(), amount=amount, period_secs=period,
    )  # fmt: skip
    subscriber = chain.funded_keypair()
    chain.token_account(subscriber.pubkey(), mint, 50 * USDC)
    sub_id = await client.subscribe(plan, subscriber, max_overage=overage)
    return Subscribed(plan, mint, destination, biller, subscriber, sub_id)
