"""set_allowance_cap: the subscriber raises the cap and is served again; a subscription
made without an allowance gets one (issue 38), starting with the cycle it is in, and
renews and closes with it."""

from __future__ import annotations

from svcpay.program import instructions, pda
from svcpay.program.generated import instructions as gen
from svcpay.program.generated.accounts.allowance import Allowance
from tests.support.asserts import assert_program_error
from tests.support.billing import USDC, Billing, deduct_ix
from tests.support.chain import Chain
from tests.support.clock import Clock


def test_raising_the_cap_serves_again(chain: Chain, billing: Billing) -> None:
    plan = billing.plan(amount=USDC)
    sub = billing.subscriber(plan, balance=10 * USDC)
    assert billing.subscribe(plan, sub, max_overage=USDC).ok
    signer = plan.billing_authority
    assert chain.send([deduct_ix(plan, sub, USDC, signer.pubkey())], [signer]).ok
    assert_program_error(
        chain.send([deduct_ix(plan, sub, 1, signer.pubkey())], [signer]), "AllowanceExhausted"
    )

    result = chain.send(
        [instructions.set_allowance_cap(sub.pubkey, plan.address, 3 * USDC)], [sub.keypair]
    )

    assert result.ok, result.logs
    event = result.event("AllowanceCapChanged")
    assert (event.data["old_cap"], event.data["new_cap"], event.data["used"]) == (
        USDC,
        3 * USDC,
        USDC,
    )
    assert chain.send([deduct_ix(plan, sub, 2 * USDC, signer.pubkey())], [signer]).ok


def test_only_the_subscriber_sets_the_cap_and_never_to_zero(chain: Chain, billing: Billing) -> None:
    plan = billing.plan(amount=USDC)
    sub = billing.subscriber(plan, balance=10 * USDC)
    assert billing.subscribe(plan, sub, max_overage=USDC).ok
    ix = instructions.set_allowance_cap(sub.pubkey, plan.address, 0)
    assert_program_error(chain.send([ix], [sub.keypair]), "ZeroAmount")
    provider = plan.authority
    subscription = pda.subscription_address(plan.address, sub.pubkey)
    accounts = {
        "subscriber": provider.pubkey(),
        "subscription": subscription,
        "allowance": pda.allowance_address(subscription),
    }
    result = chain.send([gen.set_allowance_cap({"cap": 5 * USDC}, accounts)], [provider])  # type: ignore[arg-type]
    assert not result.ok
    assert "ConstraintHasOne" in "\n".join(result.logs)


def test_a_subscription_made_without_an_allowance_gets_one(
    chain: Chain, billing: Billing, clock: Clock
) -> None:
    plan = billing.plan(amount=USDC, period_secs=clock.days(6))
    sub = billing.subscriber(plan, balance=10 * USDC)
    assert billing.subscribe(plan, sub).ok
    signer = plan.billing_authority
    assert not chain.send([deduct_ix(plan, sub, 1, signer.pubkey())], [signer]).ok
    subscription = pda.subscription_address(plan.address, sub.pubkey)
    address = pda.allowance_address(subscription)
    lamports = chain.balance(sub.pubkey)

    added = chain.send(
        [instructions.set_allowance_cap(sub.pubkey, plan.address, 2 * USDC)], [sub.keypair]
    )

    assert added.ok, added.logs
    event = added.event("AllowanceCapChanged")
    assert (event.data["old_cap"], event.data["new_cap"], event.data["used"]) == (0, 2 * USDC, 0)
    account = chain.account(address)
    assert account is not None and chain.balance(sub.pubkey) < lamports - account.lamports + 1
    state = Allowance.decode(bytes(account.data))
    assert (state.subscription, state.cap, state.used, state.cycle) == (
        subscription,
        2 * USDC,
        0,
        1,
    )
    assert billing.subscription(plan, sub).has_allowance
    assert chain.send([deduct_ix(plan, sub, USDC, signer.pubkey())], [signer]).ok

    # the crank now renews it with its allowance, whose cycle starts again
    clock.advance_to(billing.subscription(plan, sub).current_period_end)
    assert_program_error(billing.collect(plan, sub), "NoAllowance")
    renewed = billing.collect(plan, sub, has_allowance=True)
    assert renewed.ok, renewed.logs
    account = chain.account(address)
    assert account is not None
    state = Allowance.decode(bytes(account.data))
    assert (state.used, state.total_deducted, state.cycle) == (0, USDC, 2)

    # a second call only changes the cap: nothing is created or reset
    assert chain.send([deduct_ix(plan, sub, USDC // 2, signer.pubkey())], [signer]).ok
    again = chain.send(
        [instructions.set_allowance_cap(sub.pubkey, plan.address, 3 * USDC)], [sub.keypair]
    )
    assert again.ok, again.logs
    assert again.event("AllowanceCapChanged").data["old_cap"] == 2 * USDC
    account = chain.account(address)
    assert account is not None
    state = Allowance.decode(bytes(account.data))
    assert (state.cap, state.used, state.total_deducted, state.cycle) == (
        3 * USDC, USDC // 2, USDC + USDC // 2, 2,
    )  # fmt: skip

    # it closes with the subscription, its rent back to the subscriber
    cancel = instructions.cancel(sub.pubkey, plan.address, sub.pubkey, at_period_end=False)
    assert chain.send([cancel], [sub.keypair]).ok
    before = chain.balance(sub.pubkey)
    close = instructions.close_subscription(sub.pubkey, plan.address, has_allowance=True)
    closed = chain.send([close], [sub.keypair])
    assert closed.ok, closed.logs
    assert chain.account(address) is None
    assert chain.balance(sub.pubkey) > before + account.lamports - 10_000  # less the fee


def test_an_added_allowance_is_closed_when_the_subscriber_comes_back_without_one(
    chain: Chain, billing: Billing
) -> None:
    """Subscribing again (ADR 0015) without max_overage closes an allowance added later,
    as it closes one made at subscribe."""
    plan = billing.plan(amount=USDC)
    sub = billing.subscriber(plan, balance=10 * USDC)
    assert billing.subscribe(plan, sub).ok
    add = instructions.set_allowance_cap(sub.pubkey, plan.address, USDC)
    assert chain.send([add], [sub.keypair]).ok
    cancel = instructions.cancel(sub.pubkey, plan.address, sub.pubkey, at_period_end=False)
    assert chain.send([cancel], [sub.keypair]).ok
    address = pda.allowance_address(pda.subscription_address(plan.address, sub.pubkey))
    assert chain.account(address) is not None
    again = billing.subscribe(plan, sub, previous_allowance=True)
    assert again.ok, again.logs
    assert chain.account(address) is None and not billing.subscription(plan, sub).has_allowance


def test_only_its_subscriber_adds_an_allowance_and_only_while_it_lives(
    chain: Chain, billing: Billing
) -> None:
    plan = billing.plan(amount=USDC)
    sub = billing.subscriber(plan, balance=10 * USDC)
    assert billing.subscribe(plan, sub).ok
    subscription = pda.subscription_address(plan.address, sub.pubkey)
    for intruder in (plan.authority, plan.billing_authority):  # the provider's keys
        accounts = {
            "subscriber": intruder.pubkey(),
            "subscription": subscription,
            "allowance": pda.allowance_address(subscription),
        }
        result = chain.send([gen.set_allowance_cap({"cap": USDC}, accounts)], [intruder])  # type: ignore[arg-type]
        assert not result.ok and "ConstraintHasOne" in "\n".join(result.logs)
        assert chain.account(pda.allowance_address(subscription)) is None

    cancel = instructions.cancel(sub.pubkey, plan.address, sub.pubkey, at_period_end=False)
    assert chain.send([cancel], [sub.keypair]).ok
    late = instructions.set_allowance_cap(sub.pubkey, plan.address, USDC)
    assert_program_error(chain.send([late], [sub.keypair]), "SubscriptionEnded")
    close = instructions.close_subscription(sub.pubkey, plan.address, has_allowance=False)
    assert chain.send([close], [sub.keypair]).ok
