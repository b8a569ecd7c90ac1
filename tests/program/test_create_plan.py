"""create_plan: a PDA created through a System Program CPI, an event, the terms checks."""

from __future__ import annotations

import pytest
from solders.system_program import ID as SYSTEM_PROGRAM_ID

from svcpay.program.generated.accounts.plan import Plan
from svcpay.program.generated.program_id import PROGRAM_ID
from svcpay.program.generated.types.plan_status import Active
from tests.support.asserts import assert_program_error
from tests.support.billing import DAY, USDC, Billing, create_plan_ix
from tests.support.chain import Chain


def test_creates_the_plan_account_through_a_system_program_cpi(
    chain: Chain, billing: Billing
) -> None:
    before = chain.unix_timestamp()
    plan = billing.plan(amount=500_000, period_secs=30 * DAY, grace_secs=2 * DAY)
    after = chain.unix_timestamp()

    acct = chain.account(plan.address)
    assert acct is not None and acct.owner == PROGRAM_ID
    assert acct.lamports == chain.minimum_balance(len(acct.data))
    assert f"Program {SYSTEM_PROGRAM_ID} invoke [2]" in plan.result.logs
    state = Plan.decode(bytes(acct.data))
    assert (state.authority, state.mint, state.destination) == (
        plan.authority.pubkey(),
        plan.mint,
        plan.destination,
    )
    assert state.billing_authority == plan.billing_authority.pubkey()
    assert (state.amount, state.period_secs, state.grace_secs, state.decimals) == (
        500_000,
        30 * DAY,
        2 * DAY,
        6,
    )
    assert isinstance(state.status, Active)
    assert before <= state.created_at <= after  # read from the Clock sysvar


def test_emits_plan_created(billing: Billing) -> None:
    plan = billing.plan(amount=10 * USDC)
    event = plan.result.event("PlanCreated")
    assert event.data["plan"] == plan.address
    assert event.data["amount"] == 10 * USDC
    assert event.data["destination"] == plan.destination


@pytest.mark.parametrize(
    ("amount", "period", "grace", "error"),
    [
        (0, 30 * DAY, 0, "ZeroAmount"),
        (USDC, 0, 0, "InvalidPeriod"),
        (USDC, 367 * DAY, 0, "InvalidPeriod"),
        (USDC, 30 * DAY, -1, "InvalidGrace"),
        (USDC, 30 * DAY, 91 * DAY, "InvalidGrace"),
    ],
)
def test_rejects_invalid_terms(
    chain: Chain, billing: Billing, amount: int, period: int, grace: int, error: str
) -> None:
    authority = chain.funded_keypair()
    mint = billing.mint()
    destination = billing.token_account(authority.pubkey(), mint)
    ix = create_plan_ix(
        authority.pubkey(), 7, mint, destination, authority.pubkey(), amount, period, grace,
        billing.token_program,
    )  # fmt: skip
    assert_program_error(chain.send([ix], [authority]), error)


def test_rejects_a_destination_of_another_mint(chain: Chain, billing: Billing) -> None:
    authority = chain.funded_keypair()
    mint, other = billing.mint(), billing.mint()
    destination = billing.token_account(authority.pubkey(), other)
    ix = create_plan_ix(
        authority.pubkey(), 1, mint, destination, authority.pubkey(), USDC,
        token_program=billing.token_program,
    )  # fmt: skip
    assert_program_error(chain.send([ix], [authority]), "MintMismatch")


def test_an_existing_plan_cannot_be_reinitialised(chain: Chain, billing: Billing) -> None:
    plan = billing.plan(amount=10 * USDC)
    before = chain.account(plan.address)
    ix = create_plan_ix(
        plan.authority.pubkey(), 1, plan.mint, plan.destination, plan.authority.pubkey(), USDC
    )
    assert not chain.send([ix], [plan.authority]).ok
    assert chain.account(plan.address) == before
