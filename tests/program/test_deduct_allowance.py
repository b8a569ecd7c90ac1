"""deduct_allowance: metered usage against the cap, 128-bit usage math, authority checks."""

from __future__ import annotations

from solders.instruction import AccountMeta

from svcpay.program import pda
from svcpay.program.generated.accounts.allowance import Allowance
from tests.support.asserts import assert_program_error
from tests.support.billing import USDC, Billing, Plan, Subscriber, deduct_ix
from tests.support.chain import Chain, TxResult


def subscribed(billing: Billing, balance: int, cap: int) -> tuple[Plan, Subscriber]:
    plan = billing.plan(amount=USDC)
    sub = billing.subscriber(plan, balance=balance)
    assert billing.subscribe(plan, sub, max_overage=cap).ok
    return plan, sub


def deduct(chain: Chain, plan: Plan, sub: Subscriber, amount: int) -> TxResult:
    signer = plan.billing_authority
    return chain.send([deduct_ix(plan, sub, amount, signer.pubkey())], [signer])


def allowance(chain: Chain, plan: Plan, sub: Subscriber) -> Allowance:
    acct = chain.account(pda.allowance_address(pda.subscription_address(plan.address, sub.pubkey)))
    assert acct is not None
    return Allowance.decode(bytes(acct.data))


def test_moves_usage_to_the_provider(chain: Chain, billing: Billing) -> None:
    plan, sub = subscribed(billing, balance=30 * USDC, cap=20 * USDC)
    result = deduct(chain, plan, sub, 700_000)
    assert result.ok, result.logs
    assert chain.token_state(sub.token_account)["amount"] == 30 * USDC - USDC - 700_000
    assert chain.token_state(plan.destination)["amount"] == USDC + 700_000
    state = allowance(chain, plan, sub)
    assert (state.used, state.total_deducted) == (700_000, 700_000)
    event = result.event("AllowanceDeducted")
    assert (event.data["amount"], event.data["used"], event.data["remaining"]) == (
        700_000,
        700_000,
        20 * USDC - 700_000,
    )
    assert event.data["used_bps"] == 350  # 0.7 of 20 USDC


def test_usage_ratio_uses_128_bit_arithmetic(chain: Chain, billing: Billing) -> None:
    # used * 10_000 overflows u64 here; the program computes it in u128 (__multi3/__udivti3).
    cap = 2**63
    plan, sub = subscribed(billing, balance=2**63, cap=cap)
    used = 2**62 + 12_345
    result = deduct(chain, plan, sub, used)
    assert result.ok, result.logs
    assert result.event("AllowanceDeducted").data["used_bps"] == used * 10_000 // cap == 5_000


def test_deducting_past_the_cap_is_refused(chain: Chain, billing: Billing) -> None:
    plan, sub = subscribed(billing, balance=30 * USDC, cap=2 * USDC)
    assert deduct(chain, plan, sub, 1_500_000).ok
    assert_program_error(deduct(chain, plan, sub, 500_001), "AllowanceExhausted")
    assert deduct(chain, plan, sub, 500_000).ok  # exactly to the cap
    assert allowance(chain, plan, sub).used == 2 * USDC


def test_zero_is_refused(chain: Chain, billing: Billing) -> None:
    plan, sub = subscribed(billing, balance=3 * USDC, cap=USDC)
    assert_program_error(deduct(chain, plan, sub, 0), "ZeroAmount")


def test_only_the_billing_authority_or_provider_may_deduct(chain: Chain, billing: Billing) -> None:
    plan, sub = subscribed(billing, balance=3 * USDC, cap=USDC)
    stranger = chain.funded_keypair()
    result = chain.send([deduct_ix(plan, sub, 1, stranger.pubkey())], [stranger])
    assert_program_error(result, "Unauthorized")
    provider = plan.authority
    assert chain.send([deduct_ix(plan, sub, 1, provider.pubkey())], [provider]).ok


def test_a_subscription_without_allowance_cannot_be_deducted(
    chain: Chain, billing: Billing
) -> None:
    plan = billing.plan(amount=USDC)
    sub = billing.subscriber(plan, balance=3 * USDC)
    assert billing.subscribe(plan, sub).ok
    result = deduct(chain, plan, sub, 1)
    assert not result.ok
    assert "AccountNotInitialized" in "\n".join(result.logs)


def test_a_substitute_delegate_is_refused(chain: Chain, billing: Billing) -> None:
    plan, sub = subscribed(billing, balance=5 * USDC, cap=USDC)
    other = billing.subscriber(plan, balance=5 * USDC)
    assert billing.subscribe(plan, other).ok
    for fake in (pda.delegate_address(other.pubkey), chain.funded_keypair().pubkey()):
        ix = deduct_ix(plan, sub, 1, plan.billing_authority.pubkey())
        ix.accounts = [
            AccountMeta(fake, m.is_signer, m.is_writable)
            if m.pubkey == pda.delegate_address(sub.pubkey)
            else m
            for m in ix.accounts
        ]
        assert_program_error(chain.send([ix], [plan.billing_authority]), "DelegationMissing")
    assert chain.token_state(sub.token_account)["amount"] == 4 * USDC


def test_another_subscriptions_allowance_is_refused(chain: Chain, billing: Billing) -> None:
    plan = billing.plan(amount=USDC)
    small, large = billing.subscriber(plan, 5 * USDC), billing.subscriber(plan, 5 * USDC)
    assert billing.subscribe(plan, small, max_overage=USDC).ok
    assert billing.subscribe(plan, large, max_overage=4 * USDC).ok
    own = pda.allowance_address(pda.subscription_address(plan.address, small.pubkey))
    borrowed = pda.allowance_address(pda.subscription_address(plan.address, large.pubkey))
    ix = deduct_ix(plan, small, 2 * USDC, plan.billing_authority.pubkey())
    ix.accounts = [
        AccountMeta(borrowed, m.is_signer, m.is_writable) if m.pubkey == own else m
        for m in ix.accounts
    ]
    result = chain.send([ix], [plan.billing_authority])
    assert not result.ok
    assert "ConstraintHasOne" in "\n".join(result.logs)
    assert chain.token_state(small.token_account)["amount"] == 4 * USDC
