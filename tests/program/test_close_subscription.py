"""close_subscription: ended subscriptions return their rent; a closed one cannot come back."""

from __future__ import annotations

from solders.system_program import ID as SYSTEM_PROGRAM_ID
from solders.system_program import TransferParams, transfer

from svcpay.program import instructions, pda
from tests.support.asserts import assert_program_error
from tests.support.billing import USDC, Billing, Plan, Subscriber
from tests.support.chain import Chain


def ended_subscription(chain: Chain, billing: Billing) -> tuple[Plan, Subscriber]:
    """A subscription that paid one period and was cancelled."""
    plan = billing.plan(amount=USDC)
    sub = billing.subscriber(plan, balance=10 * USDC)
    assert billing.subscribe(plan, sub).ok
    cancel = instructions.cancel(sub.pubkey, plan.address, sub.pubkey, False)
    assert chain.send([cancel], [sub.keypair]).ok
    return plan, sub


def test_an_ended_subscription_closes_and_the_subscriber_can_start_over(
    chain: Chain, billing: Billing
) -> None:
    plan = billing.plan(amount=USDC)
    sub = billing.subscriber(plan, balance=10 * USDC)
    assert billing.subscribe(plan, sub, max_overage=USDC).ok
    close = instructions.close_subscription(sub.pubkey, plan.address, has_allowance=True)
    assert_program_error(chain.send([close], [sub.keypair]), "SubscriptionStillLive")

    assert chain.send(
        [instructions.cancel(sub.pubkey, plan.address, sub.pubkey, False)], [sub.keypair]
    ).ok
    result = chain.send([close], [sub.keypair])

    assert result.ok, result.logs
    subscription = pda.subscription_address(plan.address, sub.pubkey)
    assert chain.account(subscription) is None
    assert chain.account(pda.allowance_address(subscription)) is None
    assert result.event("SubscriptionClosed").data["total_paid"] == USDC
    # Starting over creates a fresh subscription (first period charged again, new allowance).
    assert billing.subscribe(plan, sub, max_overage=2 * USDC).ok
    state = billing.subscription(plan, sub)
    assert (state.cycles_billed, state.total_paid) == (1, USDC)


def test_a_closed_subscription_cannot_be_revived(chain: Chain, billing: Billing) -> None:
    plan, sub = ended_subscription(chain, billing)
    subscription = pda.subscription_address(plan.address, sub.pubkey)
    rent = chain.account(subscription).lamports  # type: ignore[union-attr]
    close = instructions.close_subscription(sub.pubkey, plan.address, has_allowance=False)
    # Close, then send the rent straight back in the same transaction (the revival trick).
    refund = transfer(TransferParams(from_pubkey=sub.pubkey, to_pubkey=subscription, lamports=rent))
    assert chain.send([close, refund], [sub.keypair]).ok

    revived = chain.account(subscription)
    assert revived is not None and revived.owner == SYSTEM_PROGRAM_ID and not any(revived.data)
    # If it still passed as a Subscription, closing again would pay the rent out twice.
    again = chain.send([close], [sub.keypair])
    assert not again.ok
    assert chain.account(subscription) == revived


def test_only_the_subscriber_closes(chain: Chain, billing: Billing) -> None:
    plan, sub = ended_subscription(chain, billing)
    provider = plan.authority
    ix = instructions.close_subscription(sub.pubkey, plan.address, has_allowance=False)
    ix.accounts = [
        m if m.pubkey != sub.pubkey else type(m)(provider.pubkey(), True, True) for m in ix.accounts
    ]
    result = chain.send([ix], [provider])
    assert not result.ok
    assert chain.account(pda.subscription_address(plan.address, sub.pubkey)) is not None
