"""collect: renewal at the period end, past due on failure, recovery, grace expiry.

Periods and grace are counted in `clock` days: on the drop-in validator the clock travels,
on solana-test-validator a day is a second and the tests wait.
"""

from __future__ import annotations

import pytest
from solders.instruction import AccountMeta
from solders.pubkey import Pubkey
from spl.token.instructions import revoke
from spl.token.models import RevokeParams

from svcpay.program import pda
from svcpay.program.generated.types.subscription_status import Active, Expired, PastDue
from tests.support.asserts import assert_program_error
from tests.support.billing import USDC, Billing, Plan, Subscriber, collect_ix, deduct_ix
from tests.support.chain import Chain
from tests.support.clock import Clock


def delegate(sub: Subscriber) -> Pubkey:
    return pda.delegate_address(sub.pubkey)


@pytest.fixture
def period(clock: Clock) -> int:
    """Long enough that, on the real validator, the few transactions a test sends right
    after a subscription or a renewal land before the next period end."""
    return clock.days(6)


@pytest.fixture
def grace(clock: Clock) -> int:
    return clock.days(2)


def subscribed(
    billing: Billing, period: int, grace: int, balance: int, cap: int | None = None
) -> tuple[Plan, Subscriber]:
    plan = billing.plan(amount=10 * USDC, period_secs=period, grace_secs=grace)
    sub = billing.subscriber(plan, balance=balance)
    assert billing.subscribe(plan, sub, max_overage=cap).ok
    return plan, sub


def test_renews_when_the_period_has_ended(
    chain: Chain, clock: Clock, billing: Billing, period: int, grace: int
) -> None:
    plan, sub = subscribed(billing, period, grace, balance=30 * USDC)
    first = billing.subscription(plan, sub)
    assert_program_error(billing.collect(plan, sub), "NotDue")

    clock.advance_to(first.current_period_end)
    result = billing.collect(plan, sub)

    assert result.ok, result.logs
    state = billing.subscription(plan, sub)
    assert isinstance(state.status, Active)
    assert (state.cycles_billed, state.total_paid) == (2, 20 * USDC)
    assert state.current_period_start == first.current_period_end  # the cadence holds
    assert state.current_period_end == first.current_period_end + period
    assert chain.token_state(sub.token_account)["amount"] == 10 * USDC
    assert chain.token_state(plan.destination)["amount"] == 20 * USDC
    event = result.event("SubscriptionRenewed")
    assert (event.data["amount"], event.data["cycles_billed"], event.data["recovered"]) == (
        10 * USDC,
        2,
        False,
    )


def test_a_second_collection_in_the_same_period_is_refused(
    chain: Chain, clock: Clock, billing: Billing, period: int, grace: int
) -> None:
    plan, sub = subscribed(billing, period, grace, balance=50 * USDC)
    clock.advance_to(billing.subscription(plan, sub).current_period_end)
    assert billing.collect(plan, sub).ok
    assert_program_error(billing.collect(plan, sub), "NotDue")
    assert chain.token_state(sub.token_account)["amount"] == 30 * USDC


def test_a_failed_renewal_goes_past_due_then_recovers(
    chain: Chain, clock: Clock, billing: Billing, period: int
) -> None:
    # Recovery takes a few transactions after the failure; on the real validator they must
    # land within grace, so this grace is longer than the others.
    grace = clock.days(8)
    plan, sub = subscribed(billing, period, grace, balance=15 * USDC, cap=USDC)
    due = billing.subscription(plan, sub).current_period_end
    clock.advance_to(due)

    failed = billing.collect(plan, sub, has_allowance=True)

    assert failed.ok, "a failed renewal is recorded, not a failed transaction"
    event = failed.event("RenewalFailed")
    assert type(event.data["reason"]).__name__ == "InsufficientFunds"
    state = billing.subscription(plan, sub)
    assert isinstance(state.status, PastDue)
    assert event.data["grace_deadline"] == state.past_due_since + grace
    assert chain.token_state(sub.token_account)["amount"] == 5 * USDC
    signer = plan.billing_authority
    assert_program_error(
        chain.send([deduct_ix(plan, sub, 1, signer.pubkey())], [signer]), "SubscriptionNotActive"
    )

    chain.mint_to(plan.mint, sub.token_account, 10 * USDC, program_id=plan.token_program)
    late = grace // 2
    clock.advance_to(due + late)
    recovered = billing.collect(plan, sub, has_allowance=True)

    assert recovered.ok, recovered.logs
    assert recovered.event("SubscriptionRenewed").data["recovered"] is True
    state = billing.subscription(plan, sub)
    assert isinstance(state.status, Active) and state.past_due_since == 0
    # No charge for time not served: the new period starts at recovery, not at the due date.
    assert state.current_period_start >= due + late
    assert state.current_period_end == state.current_period_start + period
    assert chain.token_state(sub.token_account)["amount"] == 5 * USDC


def test_grace_expiry_ends_the_subscription(
    chain: Chain, clock: Clock, billing: Billing, period: int, grace: int
) -> None:
    plan, sub = subscribed(billing, period, grace, balance=10 * USDC)
    clock.advance_to(billing.subscription(plan, sub).current_period_end)
    assert billing.collect(plan, sub).event("RenewalFailed")
    deadline = billing.subscription(plan, sub).past_due_since + grace
    assert billing.plan_state(plan).live_subscriptions == 1

    clock.advance_to(deadline + 1)
    ended = billing.collect(plan, sub)

    assert ended.ok
    assert type(ended.event("SubscriptionEnded").data["status"]).__name__ == "Expired"
    assert isinstance(billing.subscription(plan, sub).status, Expired)
    assert billing.plan_state(plan).live_subscriptions == 0
    chain.mint_to(plan.mint, sub.token_account, 10 * USDC, program_id=plan.token_program)
    assert_program_error(billing.collect(plan, sub), "SubscriptionNotActive")
    assert chain.token_state(sub.token_account)["amount"] == 10 * USDC


def test_renewal_resets_the_allowance_cycle(
    chain: Chain, clock: Clock, billing: Billing, period: int, grace: int
) -> None:
    plan, sub = subscribed(billing, period, grace, balance=30 * USDC, cap=USDC)
    signer = plan.billing_authority
    assert chain.send([deduct_ix(plan, sub, USDC, signer.pubkey())], [signer]).ok
    assert_program_error(
        chain.send([deduct_ix(plan, sub, 1, signer.pubkey())], [signer]), "AllowanceExhausted"
    )

    clock.advance_to(billing.subscription(plan, sub).current_period_end)
    assert billing.collect(plan, sub, has_allowance=True).ok

    assert chain.send([deduct_ix(plan, sub, USDC, signer.pubkey())], [signer]).ok


def test_the_allowance_must_come_along(
    chain: Chain, clock: Clock, billing: Billing, period: int, grace: int
) -> None:
    plan, sub = subscribed(billing, period, grace, balance=30 * USDC, cap=USDC)
    clock.advance_to(billing.subscription(plan, sub).current_period_end)
    assert_program_error(billing.collect(plan, sub, has_allowance=False), "NoAllowance")


def test_a_revoked_delegation_is_recorded_as_past_due(
    chain: Chain, clock: Clock, billing: Billing, period: int, grace: int
) -> None:
    plan, sub = subscribed(billing, period, grace, balance=30 * USDC)
    params = RevokeParams(
        program_id=plan.token_program, account=sub.token_account, owner=sub.pubkey
    )
    chain.send_ok([revoke(params)], [sub.keypair])
    clock.advance_to(billing.subscription(plan, sub).current_period_end)

    result = billing.collect(plan, sub)

    assert type(result.event("RenewalFailed").data["reason"]).__name__ == "DelegationMissing"
    assert chain.token_state(sub.token_account)["amount"] == 20 * USDC


def test_a_renewal_more_than_a_period_late_starts_a_new_cadence(
    chain: Chain, clock: Clock, billing: Billing, grace: int
) -> None:
    period = clock.days(3)  # nothing is checked before the end: a short one waits less
    plan, sub = subscribed(billing, period, grace, balance=50 * USDC)
    end = billing.subscription(plan, sub).current_period_end
    clock.advance_to(end + period + period // 2)

    assert billing.collect(plan, sub).ok

    state = billing.subscription(plan, sub)
    assert state.current_period_start >= end + period  # missed periods are not charged
    assert chain.token_state(sub.token_account)["amount"] == 30 * USDC


def test_a_stranger_with_a_fake_delegate_cannot_push_a_funded_subscription_past_due(
    chain: Chain, clock: Clock, billing: Billing, period: int, grace: int
) -> None:
    plan, sub = subscribed(billing, period, grace, balance=50 * USDC)
    clock.advance_to(billing.subscription(plan, sub).current_period_end)
    stranger = chain.funded_keypair()
    for fake in (stranger.pubkey(), chain.funded_keypair().pubkey(), plan.destination):
        ix = collect_ix(plan, sub)
        ix.accounts = [
            AccountMeta(fake, m.is_signer, m.is_writable) if m.pubkey == delegate(sub) else m
            for m in ix.accounts
        ]
        result = chain.send([ix], [stranger])
        assert_program_error(result, "WrongDelegate")
    assert isinstance(billing.subscription(plan, sub).status, Active)  # not PastDue
    renewed = billing.collect(plan, sub)
    assert renewed.ok and renewed.event("SubscriptionRenewed")


def test_a_revoked_delegation_is_still_recorded_as_a_failed_renewal(
    chain: Chain, clock: Clock, billing: Billing, period: int, grace: int
) -> None:
    plan, sub = subscribed(billing, period, grace, balance=50 * USDC)
    chain.send_ok(
        [
            revoke(
                RevokeParams(
                    program_id=plan.token_program, account=sub.token_account, owner=sub.pubkey
                )
            )
        ],
        [sub.keypair],
    )
    clock.advance_to(billing.subscription(plan, sub).current_period_end)
    failed = billing.collect(plan, sub)
    assert failed.ok
    assert type(failed.event("RenewalFailed").data["reason"]).__name__ == "DelegationMissing"
    assert isinstance(billing.subscription(plan, sub).status, PastDue)
