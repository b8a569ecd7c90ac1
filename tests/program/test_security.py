"""Attacks on svc_billing that must fail: each test tries one and checks nothing moved."""

from __future__ import annotations

from solders.instruction import AccountMeta, Instruction
from solders.pubkey import Pubkey
from spl.token.instructions import approve, transfer_checked
from spl.token.models import ApproveParams, TransferCheckedParams

from svcpay.program import instructions, pda
from svcpay.program.generated.program_id import PROGRAM_ID
from tests.support.asserts import assert_program_error
from tests.support.billing import (
    USDC,
    Billing,
    Plan,
    Subscriber,
    collect_ix,
    deduct_ix,
    subscribe_ix,
)
from tests.support.chain import Chain, TxResult
from tests.support.clock import Clock


def swap(ix: Instruction, old: Pubkey, new: Pubkey, signer: bool | None = None) -> Instruction:
    """`ix` with account `old` replaced by `new` (and its signer flag changed if given)."""
    ix.accounts = [
        AccountMeta(new, m.is_signer if signer is None else signer, m.is_writable)
        if m.pubkey == old
        else m
        for m in ix.accounts
    ]
    return ix


def anchor_error(result: TxResult, name: str) -> None:
    assert not result.ok, f"expected {name}, but the transaction succeeded"
    assert f"Error Code: {name}." in "\n".join(result.logs), result.logs


def subscribed(billing: Billing, cap: int | None = USDC) -> tuple[Plan, Subscriber]:
    plan = billing.plan(amount=USDC, period_secs=30 * 86_400)
    sub = billing.subscriber(plan, balance=10 * USDC)
    assert billing.subscribe(plan, sub, max_overage=cap).ok
    return plan, sub


def test_a_missing_signature_is_refused(chain: Chain, billing: Billing) -> None:
    plan = billing.plan(amount=USDC)
    victim = billing.subscriber(plan, balance=10 * USDC)
    attacker = chain.funded_keypair()
    ix = swap(subscribe_ix(plan, victim), victim.pubkey, victim.pubkey, signer=False)
    anchor_error(chain.send([ix], [attacker]), "AccountNotSigner")
    assert chain.token_state(victim.token_account)["amount"] == 10 * USDC


def test_another_plans_subscription_is_refused(chain: Chain, billing: Billing) -> None:
    cheap, sub = subscribed(billing)
    dear = billing.plan(amount=5 * USDC)
    # Deduct under the other plan (whose billing authority the attacker is) from sub's account.
    ix = deduct_ix(dear, sub, USDC, dear.billing_authority.pubkey())
    ix = swap(
        ix,
        pda.subscription_address(dear.address, sub.pubkey),
        pda.subscription_address(cheap.address, sub.pubkey),
    )
    own_allowance = pda.allowance_address(pda.subscription_address(cheap.address, sub.pubkey))
    ix = swap(
        ix, pda.allowance_address(pda.subscription_address(dear.address, sub.pubkey)), own_allowance
    )
    anchor_error(chain.send([ix], [dear.billing_authority]), "ConstraintHasOne")
    assert chain.token_state(sub.token_account)["amount"] == 9 * USDC


def test_a_token_account_of_another_mint_is_refused(chain: Chain, billing: Billing) -> None:
    plan = billing.plan(amount=USDC)
    sub = billing.subscriber(plan, balance=10 * USDC)
    other_mint = billing.mint()
    foreign = billing.token_account(sub.pubkey, other_mint, 10 * USDC)
    ix = swap(subscribe_ix(plan, sub), sub.token_account, foreign)
    assert_program_error(chain.send([ix], [sub.keypair]), "MintMismatch")


def test_someone_elses_token_account_is_refused(chain: Chain, billing: Billing) -> None:
    plan = billing.plan(amount=USDC)
    victim = billing.subscriber(plan, balance=10 * USDC)
    attacker = billing.subscriber(plan, balance=0)
    ix = swap(subscribe_ix(plan, attacker), attacker.token_account, victim.token_account)
    assert_program_error(chain.send([ix], [attacker.keypair]), "TokenAccountMismatch")
    assert chain.token_state(victim.token_account)["amount"] == 10 * USDC


def test_renewal_money_only_goes_to_the_plans_destination(chain: Chain, billing: Billing) -> None:
    plan, sub = subscribed(billing, cap=None)
    thief = billing.token_account(chain.funded_keypair().pubkey(), plan.mint)
    ix = swap(collect_ix(plan, sub), plan.destination, thief)
    assert_program_error(chain.send([ix], [chain.payer]), "DestinationMismatch")


def test_a_fake_plan_is_refused(chain: Chain, billing: Billing) -> None:
    plan = billing.plan(amount=USDC)
    sub = billing.subscriber(plan, balance=10 * USDC)
    fake = chain.funded_keypair().pubkey()  # an account the program does not own
    ix = swap(subscribe_ix(plan, sub), plan.address, fake)
    anchor_error(chain.send([ix], [sub.keypair]), "AccountOwnedByWrongProgram")


def test_a_subscription_at_a_non_canonical_bump_is_refused(chain: Chain, billing: Billing) -> None:
    plan = billing.plan(amount=USDC)
    sub = billing.subscriber(plan, balance=10 * USDC)
    seeds = [pda.SUBSCRIPTION_SEED, bytes(plan.address), bytes(sub.pubkey)]
    _, canonical = Pubkey.find_program_address(seeds, PROGRAM_ID)
    other = None
    for bump in range(canonical - 1, -1, -1):
        try:
            other = Pubkey.create_program_address([*seeds, bytes([bump])], PROGRAM_ID)
            break
        except Exception:
            continue
    assert other is not None
    ix = swap(subscribe_ix(plan, sub), pda.subscription_address(plan.address, sub.pubkey), other)
    anchor_error(chain.send([ix], [sub.keypair]), "ConstraintSeeds")


def test_a_stranger_cannot_raise_someone_elses_cap(chain: Chain, billing: Billing) -> None:
    plan, sub = subscribed(billing)
    stranger = chain.funded_keypair()
    ix = instructions.set_allowance_cap(sub.pubkey, plan.address, 100 * USDC)
    ix = swap(ix, sub.pubkey, stranger.pubkey(), signer=True)
    anchor_error(chain.send([ix], [stranger]), "ConstraintHasOne")
    signer = plan.billing_authority
    assert_program_error(
        chain.send([deduct_ix(plan, sub, 2 * USDC, signer.pubkey())], [signer]),
        "AllowanceExhausted",
    )


def test_amounts_at_the_u64_limit_fail_cleanly_on_overflow(
    chain: Chain, clock: Clock, billing: Billing
) -> None:
    u64_max = 2**64 - 1
    plan = billing.plan(amount=u64_max, period_secs=clock.days(1))
    sub = billing.subscriber(plan, balance=u64_max)
    assert billing.subscribe(plan, sub).ok  # total_collected is now u64::MAX
    # The provider sends it all back; the next renewal would push the counters past u64.
    back = transfer_checked(
        TransferCheckedParams(
            program_id=plan.token_program,
            source=plan.destination,
            mint=plan.mint,
            dest=sub.token_account,
            owner=plan.authority.pubkey(),
            amount=u64_max,
            decimals=6,
        )
    )
    back = Instruction(back.program_id, back.data, [*back.accounts, *plan.extra])
    chain.send_ok([back], [plan.authority])
    # The first charge used up the delegation; the subscriber re-approves the program.
    approval = ApproveParams(
        program_id=plan.token_program,
        source=sub.token_account,
        delegate=pda.delegate_address(sub.pubkey),
        owner=sub.pubkey,
        amount=u64_max,
    )
    chain.send_ok([approve(approval)], [sub.keypair])
    clock.advance_to(billing.subscription(plan, sub).current_period_end)

    assert_program_error(billing.collect(plan, sub), "MathOverflow")
    assert chain.token_state(sub.token_account)["amount"] == u64_max  # nothing moved
