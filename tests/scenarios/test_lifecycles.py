"""Whole subscription lifecycles over months of (travelled) time, as a provider sees them."""

from __future__ import annotations

import pytest

from svcpay.program import instructions
from svcpay.program.generated.types.subscription_status import Active, Expired, PastDue
from tests.support.asserts import assert_program_error
from tests.support.billing import DAY, USDC, Billing, deduct_ix
from tests.support.chain import Chain

PERIOD, GRACE = 30 * DAY, 3 * DAY


@pytest.fixture(autouse=True)
def needs_time_travel(chain: Chain) -> None:
    if not chain.can_time_travel:
        pytest.skip("months of renewals need the drop-in validator's time travel")


def test_three_renewals_then_a_failure_a_recovery_and_finally_expiry(
    chain: Chain, billing: Billing
) -> None:
    plan = billing.plan(amount=10 * USDC, period_secs=PERIOD, grace_secs=GRACE)
    sub = billing.subscriber(plan, balance=40 * USDC)
    assert billing.subscribe(plan, sub).ok
    for cycle in (2, 3, 4):
        chain.advance_to(billing.subscription(plan, sub).current_period_end)
        assert (
            billing.collect(plan, sub).event("SubscriptionRenewed").data["cycles_billed"] == cycle
        )
    assert chain.token_state(sub.token_account)["amount"] == 0

    chain.advance_to(billing.subscription(plan, sub).current_period_end)
    assert billing.collect(plan, sub).event("RenewalFailed")
    assert isinstance(billing.subscription(plan, sub).status, PastDue)
    chain.mint_to(plan.mint, sub.token_account, 10 * USDC)
    chain.advance_to(chain.unix_timestamp() + DAY)
    assert billing.collect(plan, sub).event("SubscriptionRenewed").data["recovered"]
    assert isinstance(billing.subscription(plan, sub).status, Active)

    chain.advance_to(billing.subscription(plan, sub).current_period_end)
    assert billing.collect(plan, sub).event("RenewalFailed")
    chain.advance_to(chain.unix_timestamp() + GRACE + 1)
    assert billing.collect(plan, sub).event("SubscriptionEnded")
    assert isinstance(billing.subscription(plan, sub).status, Expired)
    state = billing.subscription(plan, sub)
    assert (state.cycles_billed, state.total_paid) == (5, 50 * USDC)
    assert chain.token_state(plan.destination)["amount"] == 50 * USDC


def test_metered_use_to_the_cap_a_raised_cap_and_a_fresh_cycle(
    chain: Chain, billing: Billing
) -> None:
    plan = billing.plan(amount=10 * USDC, period_secs=PERIOD, grace_secs=GRACE)
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

    chain.advance_to(billing.subscription(plan, sub).current_period_end)
    assert billing.collect(plan, sub, has_allowance=True).ok
    assert use(3 * USDC)  # a new cycle, the raised cap kept
    assert chain.token_state(plan.destination)["amount"] == 20 * USDC + 6 * USDC


def test_pause_over_a_renewal_date_then_resume_and_cancel_at_period_end(
    chain: Chain, billing: Billing
) -> None:
    plan = billing.plan(amount=10 * USDC, period_secs=PERIOD, grace_secs=GRACE)
    sub = billing.subscriber(plan, balance=100 * USDC)
    assert billing.subscribe(plan, sub).ok
    end = billing.subscription(plan, sub).current_period_end
    chain.advance_to(end - 5 * DAY)
    assert chain.send([instructions.pause(sub.pubkey, plan.address, sub.pubkey)], [sub.keypair]).ok
    chain.advance_to(end + 40 * DAY)
    assert_program_error(billing.collect(plan, sub), "SubscriptionNotActive")  # nothing charged
    assert chain.send([instructions.resume(sub.pubkey, plan.address, sub.pubkey)], [sub.keypair]).ok
    assert_program_error(billing.collect(plan, sub), "NotDue")  # 5 paid days remain

    chain.advance_to(billing.subscription(plan, sub).current_period_end)
    assert billing.collect(plan, sub).ok
    cancel = instructions.cancel(sub.pubkey, plan.address, sub.pubkey, at_period_end=True)
    assert chain.send([cancel], [sub.keypair]).ok
    chain.advance_to(billing.subscription(plan, sub).current_period_end)
    assert billing.collect(plan, sub).event("SubscriptionEnded")
    assert chain.token_state(sub.token_account)["amount"] == 80 * USDC  # two periods, no more
