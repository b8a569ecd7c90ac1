"""subscribe: first charge through the delegate PDA (transfer_checked CPI), clock, events."""

from __future__ import annotations

from svcpay.program import instructions, pda
from svcpay.program.generated.accounts.allowance import Allowance
from svcpay.program.generated.accounts.plan import Plan as PlanAccount
from svcpay.program.generated.accounts.subscription import Subscription
from svcpay.program.generated.types.subscription_status import Active, Paused
from tests.support.asserts import assert_program_error
from tests.support.billing import DAY, USDC, Billing, Plan, Subscriber, deduct_ix
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
    assert f"Program {plan.token_program} invoke [2]" in result.logs

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
    # The second kept the first's approval (no second Approve CPI): both charges used it.
    assert state["delegated_amount"] == U64_MAX - 3 * USDC


def test_subscribing_twice_to_one_plan_fails(billing: Billing) -> None:
    plan = billing.plan(amount=USDC)
    sub = billing.subscriber(plan, balance=5 * USDC)
    assert billing.subscribe(plan, sub).ok
    again = billing.subscribe(plan, sub)
    assert_program_error(again, "AlreadySubscribed")
    assert billing.chain.token_state(sub.token_account)["amount"] == 4 * USDC


def cancel_now(billing: Billing, plan: Plan, sub: Subscriber) -> None:
    ix = instructions.cancel(sub.pubkey, plan.address, sub.pubkey, False)
    billing.chain.send_ok([ix], [sub.keypair])


def test_subscribing_again_after_a_cancel_starts_a_new_subscription(billing: Billing) -> None:
    plan = billing.plan(amount=USDC)
    sub = billing.subscriber(plan, balance=10 * USDC)
    assert billing.subscribe(plan, sub).ok
    cancel_now(billing, plan, sub)
    first = billing.subscription(plan, sub)

    again = billing.subscribe(plan, sub)

    assert again.ok, again.logs
    created = again.event("SubscriptionCreated")
    assert created.data["subscription"] == pda.subscription_address(plan.address, sub.pubkey)
    state = billing.subscription(plan, sub)
    assert isinstance(state.status, Active)
    assert (state.cycles_billed, state.total_paid) == (1, USDC)
    assert state.created_at >= first.created_at
    assert billing.chain.token_state(sub.token_account)["amount"] == 8 * USDC
    plan_state = billing.plan_state(plan)
    assert (plan_state.live_subscriptions, plan_state.total_subscriptions) == (1, 2)
    assert plan_state.total_collected == 2 * USDC
    assert_program_error(billing.subscribe(plan, sub), "AlreadySubscribed")


def test_subscribing_again_resets_or_closes_the_old_allowance(billing: Billing) -> None:
    plan = billing.plan(amount=USDC)
    sub = billing.subscriber(plan, balance=10 * USDC)
    subscription = pda.subscription_address(plan.address, sub.pubkey)
    allowance = pda.allowance_address(subscription)
    assert billing.subscribe(plan, sub, max_overage=5 * USDC).ok
    signer = plan.billing_authority
    billing.chain.send_ok([deduct_ix(plan, sub, 2 * USDC, signer.pubkey())], [signer])
    cancel_now(billing, plan, sub)
    # Without the old allowance account the program cannot tidy it: refused.
    assert_program_error(billing.subscribe(plan, sub), "NoAllowance")

    assert billing.subscribe(plan, sub, max_overage=3 * USDC, previous_allowance=True).ok
    acct = billing.chain.account(allowance)
    assert acct is not None
    state = Allowance.decode(bytes(acct.data))
    assert (state.cap, state.used, state.total_deducted, state.cycle) == (3 * USDC, 0, 0, 1)

    cancel_now(billing, plan, sub)
    result = billing.subscribe(plan, sub, previous_allowance=True)  # no allowance this time
    assert result.ok, result.logs
    assert billing.chain.account(allowance) is None  # closed, rent back to the subscriber
    assert not billing.subscription(plan, sub).has_allowance


def test_a_live_subscription_cannot_be_replaced(billing: Billing) -> None:
    plan = billing.plan(amount=USDC)
    sub = billing.subscriber(plan, balance=10 * USDC)
    assert billing.subscribe(plan, sub).ok
    ix = instructions.pause(sub.pubkey, plan.address, sub.pubkey)
    billing.chain.send_ok([ix], [sub.keypair])
    assert_program_error(billing.subscribe(plan, sub), "AlreadySubscribed")
    assert isinstance(billing.subscription(plan, sub).status, Paused)
