"""`svcpay subscribe` and `svcpay subscription show|pause|resume|cancel`: each changes the
subscription on chain as the program does, signed by the subscriber or the provider."""

from __future__ import annotations

from pathlib import Path

from svcpay.program import pda
from svcpay.program.generated.types.subscription_status import Active, Cancelled, Paused
from tests.cli.conftest import Cli, keyfile
from tests.support.billing import USDC, Billing
from tests.support.chain import Chain


def test_subscribe_pause_resume_and_cancel(
    cli: Cli, chain: Chain, billing: Billing, tmp_path: Path
) -> None:
    plan = billing.plan(amount=10 * USDC)
    subscriber = billing.subscriber(plan, balance=50 * USDC)
    key = keyfile(tmp_path, subscriber.keypair)
    provider_key = keyfile(tmp_path, plan.authority)

    made = cli.ok("subscribe", str(plan.address), "--allowance-cap", "2", "--keypair", key)

    sub_id = str(pda.subscription_address(plan.address, subscriber.pubkey))
    assert made["subscription"] == sub_id and made["status"] == "Active"
    assert made["totalPaid"] == 10 * USDC and made["cyclesBilled"] == 1
    assert made["allowance"] == {"cap": 2 * USDC, "used": 0, "totalDeducted": 0, "cycle": 1}
    assert chain.token_state(subscriber.token_account)["amount"] == 40 * USDC
    assert isinstance(billing.subscription(plan, subscriber).status, Active)
    assert cli.ok("subscription", "show", sub_id) == made
    shown = cli("subscription", "show", sub_id)
    assert shown.code == 0 and "0.00 of 2.00 used this cycle" in shown.out

    paused = cli.ok("subscription", "pause", sub_id, "--keypair", key)
    state = billing.subscription(plan, subscriber)
    assert isinstance(state.status, Paused) and state.paused_at > 0
    assert paused["status"] == "Paused" and paused["signature"]

    assert paused["pausedBy"] == "subscriber"
    refused = cli("subscription", "resume", sub_id, "--keypair", provider_key)
    assert refused.code == 1 and "NotYourDecision" in refused.err  # the subscriber's pause
    assert "Traceback" not in refused.err
    resumed = cli("subscription", "resume", sub_id, "--keypair", key)
    assert resumed.code == 0 and "is now Active" in resumed.out
    assert isinstance(billing.subscription(plan, subscriber).status, Active)

    later = cli.ok("subscription", "cancel", sub_id, "--at-period-end", "--keypair", key)
    state = billing.subscription(plan, subscriber)
    assert isinstance(state.status, Active) and state.cancel_at_period_end
    assert later["cancelAtPeriodEnd"] is True

    cancelled = cli.ok("subscription", "cancel", sub_id, "--keypair", key)
    assert isinstance(billing.subscription(plan, subscriber).status, Cancelled)
    assert cancelled["status"] == "Cancelled"

    again = cli("subscription", "pause", sub_id, "--keypair", key)
    assert again.code == 1 and again.err.startswith("svcpay: SubscriptionEnded: ")


def test_a_stranger_is_refused_by_name(
    cli: Cli, chain: Chain, billing: Billing, tmp_path: Path
) -> None:
    plan = billing.plan(amount=USDC)
    subscriber = billing.subscriber(plan, balance=5 * USDC)
    assert billing.subscribe(plan, subscriber).ok
    sub_id = str(pda.subscription_address(plan.address, subscriber.pubkey))

    refused = cli("subscription", "pause", sub_id, "--keypair",
                  keyfile(tmp_path, chain.funded_keypair()))  # fmt: skip

    assert refused.code == 1 and refused.err.startswith("svcpay: Unauthorized: ")
    assert isinstance(billing.subscription(plan, subscriber).status, Active)


def test_subscribe_reports_funds_and_missing_accounts(
    cli: Cli, chain: Chain, billing: Billing, tmp_path: Path
) -> None:
    plan = billing.plan(amount=10 * USDC)
    poor = billing.subscriber(plan, balance=USDC)
    broke = cli("subscribe", str(plan.address), "--keypair", keyfile(tmp_path, poor.keypair))
    assert broke.code == 1 and broke.err.startswith("svcpay: InsufficientFunds: ")

    no_account = chain.funded_keypair()  # holds no token account of the mint
    missing = cli("subscribe", str(plan.address), "--keypair", keyfile(tmp_path, no_account))
    assert missing.code == 3 and "paying token account" in missing.err

    not_a_plan = cli("subscribe", str(poor.token_account), "--keypair",
                     keyfile(tmp_path, poor.keypair, "again.json"))  # fmt: skip
    assert not_a_plan.code == 3 and "no plan at" in not_a_plan.err

    own = cli("subscribe", str(plan.address), "--keypair", keyfile(tmp_path, plan.authority))
    assert own.code == 1 and "the plan's own destination" in own.err


def test_show_tells_plans_and_subscriptions_apart(
    cli: Cli, billing: Billing, tmp_path: Path
) -> None:
    plan = billing.plan(amount=USDC)
    subscriber = billing.subscriber(plan, balance=5 * USDC)
    assert billing.subscribe(plan, subscriber).ok
    sub_id = str(pda.subscription_address(plan.address, subscriber.pubkey))

    as_plan = cli("plan", "show", sub_id)
    assert as_plan.code == 3 and "not a plan" in as_plan.err
    as_sub = cli("subscription", "show", str(plan.address))
    assert as_sub.code == 3 and "not a subscription" in as_sub.err


def test_an_allowance_is_added_to_a_subscription_made_without_one(
    cli: Cli, chain: Chain, billing: Billing, tmp_path: Path
) -> None:
    """As after `svcpay pay --yes` subscribed with no allowance (issue 38): `subscription
    allowance` adds one, and sets its cap after; `subscribe --allowance-cap` on the
    subscription held does the same, charging nothing."""
    plan = billing.plan(amount=USDC)
    subscriber = billing.subscriber(plan, balance=5 * USDC)
    assert billing.subscribe(plan, subscriber).ok
    sub_id = str(pda.subscription_address(plan.address, subscriber.pubkey))
    key = keyfile(tmp_path, subscriber.keypair)
    assert cli.ok("subscription", "show", sub_id)["allowance"] is None

    added = cli("subscription", "allowance", sub_id, "2", "--keypair", key)
    assert added.code == 0, added.err
    assert "allowance added: 2.00 per cycle" in added.out
    assert "0.00 of 2.00 used this cycle" in added.out
    raised = cli.ok("subscription", "allowance", sub_id, "3.5", "--keypair", key)
    assert raised["allowance"] == {"cap": 3_500_000, "used": 0, "totalDeducted": 0, "cycle": 1}
    assert raised["action"] == "changed"
    same = cli.ok("subscription", "allowance", sub_id, "3500000u", "--keypair", key)
    assert same["action"] == "unchanged"

    stranger = keyfile(tmp_path, chain.funded_keypair(), "stranger.json")
    refused = cli("subscription", "allowance", sub_id, "9", "--keypair", stranger)
    assert refused.code == 1 and "only its subscriber may set its allowance" in refused.err
    zero = cli("subscription", "allowance", sub_id, "0", "--keypair", key)
    assert zero.code == 2 and "amount must be greater than zero: '0'" in zero.err

    other = billing.subscriber(plan, balance=5 * USDC)
    assert billing.subscribe(plan, other).ok
    other_key = keyfile(tmp_path, other.keypair, "other.json")
    held = cli("subscribe", str(plan.address), "--allowance-cap", "1", "--keypair", other_key)
    assert held.code == 0, held.err
    assert "already subscribed, nothing charged; allowance added: 1.00 per cycle" in held.out
    assert chain.token_state(other.token_account)["amount"] == 4 * USDC  # one period, once
