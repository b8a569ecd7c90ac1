"""pause, resume, cancel: by the subscriber or the provider, never by anyone else."""

from __future__ import annotations

from collections.abc import Callable

from solders.instruction import Instruction
from solders.keypair import Keypair
from solders.pubkey import Pubkey

from svcpay.program import instructions
from svcpay.program.generated.types import party
from svcpay.program.generated.types.subscription_status import Active, Cancelled, Paused
from tests.support.asserts import assert_program_error
from tests.support.billing import DAY, USDC, Billing, Plan, Subscriber, collect_ix, deduct_ix
from tests.support.chain import Chain, TxResult
from tests.support.clock import Clock

PERIOD = 30 * DAY  # for tests that never reach the period end


def subscribed(
    billing: Billing, balance: int = 50 * USDC, cap: int | None = None, period: int = PERIOD
) -> tuple[Plan, Subscriber]:
    plan = billing.plan(amount=10 * USDC, period_secs=period)
    sub = billing.subscriber(plan, balance=balance)
    assert billing.subscribe(plan, sub, max_overage=cap).ok
    return plan, sub


def act(
    chain: Chain,
    ix_for: Callable[[Pubkey, Pubkey, Pubkey], Instruction],
    plan: Plan,
    sub: Subscriber,
    signer: Keypair,
) -> TxResult:
    return chain.send([ix_for(signer.pubkey(), plan.address, sub.pubkey)], [signer])


def test_the_subscriber_pauses_and_access_stops(chain: Chain, billing: Billing) -> None:
    plan, sub = subscribed(billing, cap=USDC)
    result = act(chain, instructions.pause, plan, sub, sub.keypair)
    assert result.ok, result.logs
    state = billing.subscription(plan, sub)
    assert isinstance(state.status, Paused) and state.paused_at > 0
    assert type(result.event("SubscriptionStatusChanged").data["status"]).__name__ == "Paused"
    signer = plan.billing_authority
    assert_program_error(
        chain.send([deduct_ix(plan, sub, 1, signer.pubkey())], [signer]), "SubscriptionNotActive"
    )
    assert_program_error(
        chain.send([collect_ix(plan, sub, True)], [signer]), "SubscriptionNotActive"
    )


def test_resume_credits_the_paid_time_left(chain: Chain, clock: Clock, billing: Billing) -> None:
    plan, sub = subscribed(billing, period=clock.days(7))
    end = billing.subscription(plan, sub).current_period_end
    # Paused with about 5 paid days left: enough, on the real validator, for the resume and
    # the collect below to land before the credited time runs out.
    clock.advance_to(end - clock.days(5))
    assert act(chain, instructions.pause, plan, sub, sub.keypair).ok
    paused_at = billing.subscription(plan, sub).paused_at
    clock.advance_to(end + clock.days(1))

    assert act(chain, instructions.resume, plan, sub, sub.keypair).ok

    state = billing.subscription(plan, sub)
    assert isinstance(state.status, Active) and state.paused_at == 0
    resumed_at = state.current_period_end - (end - paused_at)
    assert end + clock.days(1) <= resumed_at <= clock.now()
    assert_program_error(billing.collect(plan, sub), "NotDue")


def test_a_stranger_cannot_change_a_subscription(chain: Chain, billing: Billing) -> None:
    plan, sub = subscribed(billing)
    stranger = chain.funded_keypair()
    for ix in (instructions.pause, instructions.resume):
        assert_program_error(act(chain, ix, plan, sub, stranger), "Unauthorized")
    cancel = instructions.cancel(stranger.pubkey(), plan.address, sub.pubkey, False)
    assert_program_error(chain.send([cancel], [stranger]), "Unauthorized")
    assert isinstance(billing.subscription(plan, sub).status, Active)


def test_only_an_active_subscription_pauses_and_only_a_paused_one_resumes(
    chain: Chain, billing: Billing
) -> None:
    plan, sub = subscribed(billing)
    assert_program_error(act(chain, instructions.resume, plan, sub, sub.keypair), "NotPaused")
    assert act(chain, instructions.pause, plan, sub, sub.keypair).ok
    assert_program_error(
        act(chain, instructions.pause, plan, sub, sub.keypair), "SubscriptionNotActive"
    )


def test_cancel_now_ends_the_subscription(chain: Chain, billing: Billing) -> None:
    plan, sub = subscribed(billing)
    ix = instructions.cancel(plan.authority.pubkey(), plan.address, sub.pubkey, False)
    assert chain.send([ix], [plan.authority]).ok
    assert isinstance(billing.subscription(plan, sub).status, Cancelled)
    assert billing.plan_state(plan).live_subscriptions == 0
    assert_program_error(
        act(chain, instructions.resume, plan, sub, sub.keypair), "SubscriptionEnded"
    )
    assert_program_error(billing.collect(plan, sub), "SubscriptionNotActive")


def test_cancel_at_period_end_serves_the_period_then_ends(
    chain: Chain, clock: Clock, billing: Billing
) -> None:
    plan, sub = subscribed(billing, cap=USDC, period=clock.days(4))
    ix = instructions.cancel(sub.pubkey, plan.address, sub.pubkey, True)
    assert chain.send([ix], [sub.keypair]).ok
    signer = plan.billing_authority
    assert chain.send([deduct_ix(plan, sub, 1, signer.pubkey())], [signer]).ok  # still served

    clock.advance_to(billing.subscription(plan, sub).current_period_end)
    ended = billing.collect(plan, sub, has_allowance=True)

    assert type(ended.event("SubscriptionEnded").data["status"]).__name__ == "Cancelled"
    assert chain.token_state(sub.token_account)["amount"] == 40 * USDC - 1  # no renewal charged


def test_resume_withdraws_a_pending_cancel(chain: Chain, billing: Billing) -> None:
    plan, sub = subscribed(billing)
    assert chain.send(
        [instructions.cancel(sub.pubkey, plan.address, sub.pubkey, True)], [sub.keypair]
    ).ok
    assert billing.subscription(plan, sub).cancel_at_period_end
    assert act(chain, instructions.resume, plan, sub, sub.keypair).ok
    assert not billing.subscription(plan, sub).cancel_at_period_end


def test_the_provider_cannot_undo_the_subscribers_pause(chain: Chain, billing: Billing) -> None:
    plan, sub = subscribed(billing)
    assert act(chain, instructions.pause, plan, sub, sub.keypair).ok
    assert billing.subscription(plan, sub).paused_by == party.Subscriber()
    result = act(chain, instructions.resume, plan, sub, plan.authority)
    assert_program_error(result, "NotYourDecision")
    assert isinstance(billing.subscription(plan, sub).status, Paused)
    assert act(chain, instructions.resume, plan, sub, sub.keypair).ok


def test_the_provider_cannot_withdraw_the_subscribers_cancel(
    chain: Chain, clock: Clock, billing: Billing
) -> None:
    plan, sub = subscribed(billing, period=clock.days(3))
    ix = instructions.cancel(sub.pubkey, plan.address, sub.pubkey, True)
    assert chain.send([ix], [sub.keypair]).ok
    # The provider scheduling the same cancel does not make it theirs to withdraw.
    ix = instructions.cancel(plan.authority.pubkey(), plan.address, sub.pubkey, True)
    assert chain.send([ix], [plan.authority]).ok
    result = act(chain, instructions.resume, plan, sub, plan.authority)
    assert_program_error(result, "NotYourDecision")

    clock.advance_to(billing.subscription(plan, sub).current_period_end)
    before = chain.token_state(sub.token_account)["amount"]
    ended = billing.collect(plan, sub)
    assert type(ended.event("SubscriptionEnded").data["status"]).__name__ == "Cancelled"
    assert chain.token_state(sub.token_account)["amount"] == before  # no period charged


def test_the_subscriber_cannot_lift_the_providers_pause(chain: Chain, billing: Billing) -> None:
    plan, sub = subscribed(billing)
    assert act(chain, instructions.pause, plan, sub, plan.authority).ok  # e.g. for abuse
    assert billing.subscription(plan, sub).paused_by == party.Provider()
    assert_program_error(act(chain, instructions.resume, plan, sub, sub.keypair), "NotYourDecision")
    # The subscriber can still leave; the provider lifts its own pause.
    assert act(chain, instructions.resume, plan, sub, plan.authority).ok
    ix = instructions.cancel(sub.pubkey, plan.address, sub.pubkey, False)
    assert chain.send([ix], [sub.keypair]).ok
