"""Whole subscription lifecycles over many periods, as a provider sees them.

Periods are a few `clock` days: travelled on the drop-in validator, waited for (a day is a
second) on solana-test-validator."""

from __future__ import annotations

from svcpay.program import instructions
from svcpay.program.generated.types.subscription_status import Active, Expired, PastDue
from tests.support.asserts import assert_program_error
from tests.support.billing import USDC, Billing, deduct_ix
from tests.support.chain import Chain
from tests.support.clock import Clock


def test_three_renewals_then_a_failure_a_recovery_and_finally_expiry(
    chain: Chain, clock: Clock, billing: Billing
) -> None:
    # One-day periods: nothing is checked before a period end, so a period can be short.
    # Grace outlasts the few transactions of a recovery (on the real validator too).
    grace = clock.days(6)
    plan = billing.plan(amount=10 * USDC, period_secs=clock.days(1), grace_secs=grace)
    sub = billing.subscriber(plan, balance=40 * USDC)
    assert billing.subscribe(plan, sub).ok
    for cycle in (2, 3, 4):
        clock.advance_to(billing.subscription(plan, sub).current_period_end)
        assert (
            billing.collect(plan, sub).event("SubscriptionRenewed").data["cycles_billed"] == cycle
        )
    assert chain.token_state(sub.token_account)["amount"] == 0

    clock.advance_to(billing.subscription(plan, sub).current_period_end)
    assert billing.collect(plan, sub).event("RenewalFailed")
    assert isinstance(billing.subscription(plan, sub).status, PastDue)
    chain.mint_to(plan.mint, sub.token_account, 10 * USDC)
    clock.advance(clock.days(1))
    assert billing.collect(plan, sub).event("SubscriptionRenewed").data["recovered"]
    assert isinstance(billing.subscription(plan, sub).status, Active)

    clock.advance_to(billing.subscription(plan, sub).current_period_end)
    assert billing.collect(plan, sub).event("RenewalFailed")
    clock.advance(grace + 1)
    assert billing.collect(plan, sub).event("SubscriptionEnded")
    assert isinstance(billing.subscription(plan, sub).status, Expired)
    state = billing.subscription(plan, sub)
    assert (state.cycles_billed, state.total_paid) == (5, 50 * USDC)
    assert chain.token_state(plan.destination)["amount"] == 50 * USDC


def test_metered_use_to_the_cap_a_raised_cap_and_a_fresh_cycle(
    chain: Chain, clock: Clock, billing: Billing
) -> None:
    plan = billing.plan(amount=10 * USDC, period_secs=clock.days(4), grace_secs=clock.days(2))
    sub = billing.subscriber(plan, balance=100 * USDC)
    assert billing.subscribe(plan, sub, max_overage=2 * USDC).ok
    meter = plan.billing_authority

    def use(amount: int) -> bool:
        return chain.send([deduct_ix(plan, sub, amount, meter.pubkey())], [meter]).ok

    assert all(use(USDC // 2) for _ in range(4))
    assert not use(1)
    assert chain.send(
        [instructions.set_allowance_cap(sub.pubkey, plan.address, 3 * USDC)], [sub.keypair]
    ).ok
    assert use(USDC) and not use(1)

    clock.advance_to(billing.subscription(plan, sub).current_period_end)
    assert billing.collect(plan, sub, has_allowance=True).ok
    assert use(3 * USDC)  # a new cycle, the raised cap kept
    assert chain.token_state(plan.destination)["amount"] == 20 * USDC + 6 * USDC


def test_pause_over_a_renewal_date_then_resume_and_cancel_at_period_end(
    chain: Chain, clock: Clock, billing: Billing
) -> None:
    plan = billing.plan(amount=10 * USDC, period_secs=clock.days(5), grace_secs=clock.days(2))
    sub = billing.subscriber(plan, balance=100 * USDC)
    assert billing.subscribe(plan, sub).ok
    end = billing.subscription(plan, sub).current_period_end
    # Paused early in the period: the paid days left must outlast, on the real validator,
    # the few transactions between the resume and the NotDue check below.
    assert chain.send([instructions.pause(sub.pubkey, plan.address, sub.pubkey)], [sub.keypair]).ok
    clock.advance_to(end)  # the renewal date passes while paused
    assert_program_error(billing.collect(plan, sub), "SubscriptionNotActive")  # nothing charged
    assert chain.send([instructions.resume(sub.pubkey, plan.address, sub.pubkey)], [sub.keypair]).ok
    assert_program_error(billing.collect(plan, sub), "NotDue")  # the paid days left remain

    clock.advance_to(billing.subscription(plan, sub).current_period_end)
    assert billing.collect(plan, sub).ok
    cancel = instructions.cancel(sub.pubkey, plan.address, sub.pubkey, at_period_end=True)
    assert chain.send([cancel], [sub.keypair]).ok
    clock.advance_to(billing.subscription(plan, sub).current_period_end)
    assert billing.collect(plan, sub).event("SubscriptionEnded")
    assert chain.token_state(sub.token_account)["amount"] == 80 * USDC  # two periods, no more
