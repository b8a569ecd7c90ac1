"""set_allowance_cap: the subscriber raises the cap and is served again."""

from __future__ import annotations

from svcpay.program import instructions, pda
from svcpay.program.generated import instructions as gen
from tests.support.asserts import assert_program_error
from tests.support.billing import USDC, Billing, deduct_ix
from tests.support.chain import Chain


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
