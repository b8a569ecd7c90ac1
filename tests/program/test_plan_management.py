"""update_plan, deprecate_plan, close_plan: the provider manages, terms never change."""

from __future__ import annotations

from svcpay.program import instructions
from svcpay.program.generated.types.plan_status import Deprecated
from tests.support.asserts import assert_program_error
from tests.support.billing import DAY, USDC, Billing
from tests.support.chain import Chain
from tests.support.clock import Clock


def test_update_changes_billing_authority_and_grace_only(chain: Chain, billing: Billing) -> None:
    plan = billing.plan(amount=USDC, grace_secs=DAY)
    new_facilitator = chain.funded_keypair().pubkey()
    ix = instructions.update_plan(plan.authority.pubkey(), plan.address, new_facilitator, 5 * DAY)
    result = chain.send([ix], [plan.authority])
    assert result.ok, result.logs
    state = billing.plan_state(plan)
    assert (state.billing_authority, state.grace_secs, state.amount) == (
        new_facilitator,
        5 * DAY,
        USDC,
    )
    assert result.event("PlanChanged").data["grace_secs"] == 5 * DAY


def test_only_the_provider_manages_the_plan(chain: Chain, billing: Billing) -> None:
    plan = billing.plan()
    stranger = chain.funded_keypair()
    for ix in (
        instructions.update_plan(stranger.pubkey(), plan.address, grace_secs=0),
        instructions.deprecate_plan(stranger.pubkey(), plan.address),
        instructions.close_plan(stranger.pubkey(), plan.address),
    ):
        assert_program_error(chain.send([ix], [stranger]), "Unauthorized")


def test_invalid_grace_is_refused(chain: Chain, billing: Billing) -> None:
    plan = billing.plan()
    ix = instructions.update_plan(plan.authority.pubkey(), plan.address, grace_secs=-1)
    assert_program_error(chain.send([ix], [plan.authority]), "InvalidGrace")


def test_a_deprecated_plan_takes_no_new_subscribers_but_keeps_its_own(
    chain: Chain, clock: Clock, billing: Billing
) -> None:
    plan = billing.plan(amount=USDC, period_secs=clock.days(2))
    existing = billing.subscriber(plan, balance=5 * USDC)
    assert billing.subscribe(plan, existing).ok
    assert chain.send(
        [instructions.deprecate_plan(plan.authority.pubkey(), plan.address)], [plan.authority]
    ).ok
    assert isinstance(billing.plan_state(plan).status, Deprecated)

    newcomer = billing.subscriber(plan, balance=5 * USDC)
    assert_program_error(billing.subscribe(plan, newcomer), "PlanDeprecated")
    assert chain.token_state(newcomer.token_account)["amount"] == 5 * USDC
    clock.advance_to(billing.subscription(plan, existing).current_period_end)
    assert billing.collect(plan, existing).event("SubscriptionRenewed")


def test_a_plan_closes_only_without_live_subscriptions(chain: Chain, billing: Billing) -> None:
    plan = billing.plan(amount=USDC)
    sub = billing.subscriber(plan, balance=5 * USDC)
    assert billing.subscribe(plan, sub).ok
    close = instructions.close_plan(plan.authority.pubkey(), plan.address)
    assert_program_error(chain.send([close], [plan.authority]), "PlanHasSubscribers")

    assert chain.send(
        [instructions.cancel(sub.pubkey, plan.address, sub.pubkey, False)], [sub.keypair]
    ).ok
    rent = chain.account(plan.address).lamports  # type: ignore[union-attr]
    before = chain.balance(plan.authority.pubkey())
    result = chain.send([close], [plan.authority])

    assert result.ok, result.logs
    assert chain.account(plan.address) is None
    after = chain.balance(plan.authority.pubkey())
    assert after == before + rent - 5000  # the rent back, less the fee
