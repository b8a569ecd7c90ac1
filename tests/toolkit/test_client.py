"""BillingClient against the local validator: every call, its errors, and its reads."""

from __future__ import annotations

import asyncio

import pytest
from solders.keypair import Keypair
from solders.pubkey import Pubkey

from svcpay.program import errors
from svcpay.program.client import BillingClient, status_name
from tests.support.billing import DAY, USDC
from tests.support.chain import Chain
from tests.support.clock import Clock

pytestmark = pytest.mark.anyio


async def provider_plan(
    chain: Chain, client: BillingClient, amount: int = USDC, period: int = 30 * DAY
) -> tuple[Pubkey, Keypair, Keypair, Pubkey]:
    provider, facilitator = chain.funded_keypair(), chain.funded_keypair()
    mint = chain.create_mint()
    destination = chain.token_account(provider.pubkey(), mint)
    plan = await client.create_plan(
        provider,
        plan_id=1,
        mint=mint,
        destination=destination,
        billing_authority=facilitator.pubkey(),
        amount=amount,
        period_secs=period,
        grace_secs=DAY,
    )
    return plan, provider, facilitator, mint


async def test_subscribe_returns_the_id_a_gate_checks(chain: Chain, client: BillingClient) -> None:
    plan, _, _, mint = await provider_plan(chain, client)
    subscriber = chain.funded_keypair()
    chain.token_account(subscriber.pubkey(), mint, 5 * USDC)

    sub_id = await client.subscribe(str(plan), subscriber, max_overage=2 * USDC)

    assert (await client.is_active(sub_id)) and (await client.is_active(str(sub_id)))
    sub = await client.fetch_subscription(sub_id)
    assert sub is not None and sub.plan == plan and status_name(sub) == "Active"
    allowance = await client.fetch_allowance(sub_id)
    assert allowance is not None and allowance.cap == 2 * USDC
    plan_state = await client.fetch_plan(plan)
    assert plan_state is not None and plan_state.live_subscriptions == 1


async def test_program_errors_raise_exceptions_named_as_in_the_spec(
    chain: Chain, client: BillingClient
) -> None:
    plan, provider, facilitator, mint = await provider_plan(chain, client, amount=10 * USDC)
    poor = chain.funded_keypair()
    chain.token_account(poor.pubkey(), mint, USDC)
    with pytest.raises(errors.InsufficientFunds) as raised:
        (await client.subscribe(plan, poor))
    assert raised.value.code == 6000

    rich = chain.funded_keypair()
    chain.token_account(rich.pubkey(), mint, 50 * USDC)
    sub_id = await client.subscribe(plan, rich, max_overage=USDC)
    (await client.deduct_allowance(sub_id, USDC, facilitator))
    with pytest.raises(errors.AllowanceExhausted):
        (await client.deduct_allowance(sub_id, 1, facilitator))
    (await client.increase_allowance(sub_id, USDC, rich))
    receipt = await client.deduct_allowance(sub_id, USDC, facilitator)
    assert receipt.event("AllowanceDeducted") is not None and receipt.compute_units > 0

    (await client.deprecate_plan(provider, plan))
    late = chain.funded_keypair()
    chain.token_account(late.pubkey(), mint, 50 * USDC)
    with pytest.raises(errors.PlanDeprecated):
        (await client.subscribe(plan, late))


async def test_pause_resume_cancel_and_is_active(chain: Chain, client: BillingClient) -> None:
    plan, provider, _, mint = await provider_plan(chain, client)
    subscriber = chain.funded_keypair()
    chain.token_account(subscriber.pubkey(), mint, 5 * USDC)
    sub_id = await client.subscribe(plan, subscriber)
    (await client.pause(sub_id, subscriber))
    assert not (await client.is_active(sub_id))
    with pytest.raises(errors.SubscriptionNotActive):
        (await client.pause(sub_id, provider))
    with pytest.raises(
        errors.error_class("NotYourDecision")
    ):  # the subscriber paused: theirs to undo
        (await client.resume(sub_id, provider))
    (await client.resume(sub_id, subscriber))
    assert await client.is_active(sub_id)
    (await client.cancel(sub_id, subscriber))
    assert not (await client.is_active(sub_id))


async def test_is_active_is_false_for_unknown_or_malformed_ids(client: BillingClient) -> None:
    assert not (await client.is_active(Pubkey.new_unique()))
    assert not (await client.is_active("not-a-subscription-id"))


async def test_due_subscriptions_and_collect(
    chain: Chain, clock: Clock, client: BillingClient
) -> None:
    period = clock.days(5)
    plan, _, facilitator, mint = await provider_plan(chain, client, period=period)
    wallets = [chain.funded_keypair() for _ in range(3)]
    for kp in wallets:
        chain.token_account(kp.pubkey(), mint, 5 * USDC)
    # Subscribed together, so on the real validator none is due before the check below.
    subs = list(await asyncio.gather(*(client.subscribe(plan, kp) for kp in wallets)))
    assert (await client.due_subscriptions(plan, now=clock.now())) == []

    later = clock.advance(period)
    due = await client.due_subscriptions(plan, now=later)
    assert sorted(str(k) for k, _ in due) == sorted(str(s) for s in subs)
    for key, _ in due:
        assert (await client.collect(key, facilitator)).event("SubscriptionRenewed") is not None
    assert (await client.due_subscriptions(plan, now=later)) == []


async def test_plan_and_subscription_end_of_life(chain: Chain, client: BillingClient) -> None:
    plan, provider, _, mint = await provider_plan(chain, client)
    new_facilitator = chain.funded_keypair().pubkey()
    await client.update_plan(provider, plan, billing_authority=new_facilitator, grace_secs=2 * DAY)
    state = await client.fetch_plan(plan)
    assert state is not None and (state.billing_authority, state.grace_secs) == (
        new_facilitator,
        2 * DAY,
    )

    subscriber = chain.funded_keypair()
    chain.token_account(subscriber.pubkey(), mint, 5 * USDC)
    sub_id = await client.subscribe(plan, subscriber, max_overage=USDC)
    with pytest.raises(errors.error_class("PlanHasSubscribers")):
        await client.close_plan(provider, plan)
    await client.cancel(sub_id, provider)
    await client.close_subscription(sub_id, subscriber)
    assert (
        await client.fetch_subscription(sub_id) is None
        and await client.fetch_allowance(sub_id) is None
    )
    receipt = await client.close_plan(provider, plan)
    assert receipt.event("PlanClosed") is not None and await client.fetch_plan(plan) is None


async def test_subscribe_uses_a_live_subscription_and_replaces_an_ended_one(
    chain: Chain, client: BillingClient
) -> None:
    plan, _, _, mint = await provider_plan(chain, client)
    subscriber = chain.funded_keypair()
    token = chain.token_account(subscriber.pubkey(), mint, 5 * USDC)
    first = await client.subscribe(plan, subscriber, max_overage=USDC)

    assert await client.subscribe(plan, subscriber) == first  # held: nothing charged
    assert chain.token_state(token)["amount"] == 4 * USDC
    held = await client.held_subscription(plan, subscriber.pubkey())
    assert held is not None and held[0] == first

    await client.cancel(first, subscriber)
    assert await client.held_subscription(plan, subscriber.pubkey()) is None
    again = await client.subscribe(plan, subscriber)  # the old allowance is closed for us

    assert again == first  # the same id: X-Svc-Sub keeps working
    assert await client.is_active(again)
    assert chain.token_state(token)["amount"] == 3 * USDC
    assert await client.fetch_allowance(again) is None
