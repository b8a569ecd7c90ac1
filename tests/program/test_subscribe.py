"""subscribe: first charge through the delegate PDA (SPL transfer_checked CPI), clock, events."""

from __future__ import annotations

from spl.token.constants import TOKEN_PROGRAM_ID

from svcpay.program import pda
from svcpay.program.generated.accounts.allowance import Allowance
from svcpay.program.generated.accounts.plan import Plan as PlanAccount
from svcpay.program.generated.accounts.subscription import Subscription
from svcpay.program.generated.types.subscription_status import Active
from tests.support.asserts import assert_program_error
from tests.support.billing import DAY, USDC, Billing
from tests.support.chain import Chain

U64_MAX = 2**64 - 1


def test_charges_the_first_period_through_the_delegate_pda(chain: Chain, billing: Billing) -> None:
    plan = billing.plan(amount=10 * USDC, period_secs=30 * DAY)
    sub = billing.subscriber(plan, balance=25 * USDC)

    before = chain.unix_timestamp()
    result = billing.subscribe(plan, sub)
    after = chain.unix_timestamp()

    assert result.ok, result.logs
    source = chain.token_state(sub.token_account)
    assert source["amount"] == 15 * USDC
    assert chain.token_state(plan.destination)["amount"] == 10 * USDC
    # The program approved its PDA, and the PDA signed the transfer: only a transfer by the
    # delegate (not the owner) lowers the delegated amount.
    assert source["delegate"] == pda.delegate_address(sub.pubkey)
    assert source["delegated_amount"] == U64_MAX - 10 * USDC
    assert f"Program {TOKEN_PROGRAM_ID} invoke [2]" in result.logs

    address = pda.subscription_address(plan.address, sub.pubkey)
    acct = chain.account(address)
    assert acct is not None
    state = Subscription.decode(bytes(acct.data))
    assert isinstance(state.status, Active)
    assert before <= state.current_period_start <= after  # the Clock sysvar
    assert state.current_period_end == state.current_period_start + 30 * DAY
    assert (state.cycles_billed, state.total_paid, state.has_allowance) == (1, 10 * USDC, False)
    assert state.terms.amount == 10 * USDC and state.terms.destination == plan.destination

    plan_acct = chain.account(plan.address)
    assert plan_acct is not None
    plan_state = PlanAccount.decode(bytes(plan_acct.data))
    assert (plan_state.live_subscriptions, plan_state.total_collected) == (1, 10 * USDC)


def test_emits_subscription_created(chain: Chain, billing: Billing) -> None:
    plan = billing.plan(amount=USDC)
    sub = billing.subscriber(plan, balance=USDC)
    event = billing.subscribe(plan, sub, max_overage=20 * USDC).event("SubscriptionCreated")
    assert event.data["subscription"] == pda.subscription_address(plan.address, sub.pubkey)
    assert event.data["subscriber"] == sub.pubkey
    assert (event.data["amount"], event.data["max_overage"]) == (USDC, 20 * USDC)
    assert event.data["period_end"] == event.data["period_start"] + 30 * DAY


def test_max_overage_creates_the_allowance(chain: Chain, billing: Billing) -> None:
    plan = billing.plan(amount=USDC)
    sub = billing.subscriber(plan, balance=5 * USDC)
    assert billing.subscribe(plan, sub, max_overage=20 * USDC).ok
    subscription = pda.subscription_address(plan.address, sub.pubkey)
    acct = chain.account(pda.allowance_address(subscription))
    assert acct is not None
    allowance = Allowance.decode(bytes(acct.data))
    assert (allowance.subscription, allowance.cap, allowance.used) == (subscription, 20 * USDC, 0)


def test_insufficient_funds_is_refused_with_the_programs_error(
    chain: Chain, billing: Billing
) -> None:
    plan = billing.plan(amount=10 * USDC)
    sub = billing.subscriber(plan, balance=10 * USDC - 1)
    assert_program_error(billing.subscribe(plan, sub), "InsufficientFunds")
    assert chain.token_state(sub.token_account)["amount"] == 10 * USDC - 1
    assert chain.account(pda.subscription_address(plan.address, sub.pubkey)) is None


def test_two_subscriptions_on_one_token_account_share_the_delegate(billing: Billing) -> None:
    first = billing.plan(amount=USDC)
    second = billing.plan(amount=2 * USDC, mint=first.mint)
    sub = billing.subscriber(first, balance=10 * USDC)
    assert billing.subscribe(first, sub).ok
    assert billing.subscribe(second, sub).ok
    state = billing.chain.token_state(sub.token_account)
    assert state["amount"] == 7 * USDC
    assert state["delegate"] == pda.delegate_address(sub.pubkey)
    assert state["delegated_amount"] == U64_MAX - 2 * USDC  # re-approved by the second


def test_subscribing_twice_to_one_plan_fails(billing: Billing) -> None:
    plan = billing.plan(amount=USDC)
    sub = billing.subscriber(plan, balance=5 * USDC)
    assert billing.subscribe(plan, sub).ok
    again = billing.subscribe(plan, sub)
    assert not again.ok
    assert billing.chain.token_state(sub.token_account)["amount"] == 4 * USDC
