"""The Stablecoins guide's table of Token-2022 extensions, row by row (issue 38): each row
names the tests that do what it claims, on a real mint of that extension in the real
validator. The rows no other test covered are checked here: a permanent delegate, accounts
that start frozen, confidential transfers, an interest-bearing and a scaled-UI mint.

A row added to the table without a test, or a test renamed away, fails
`test_every_row_of_the_table_is_checked_by_a_test`."""

from __future__ import annotations

import re
from decimal import Decimal
from pathlib import Path

import pytest
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from spl.token.instructions import (
    get_associated_token_address,
    thaw_account,
    transfer_checked,
)
from spl.token.models import ThawAccountParams, TransferCheckedParams

from svcpay.program.client import BillingClient
from svcpay.protocol.programs import TOKEN_2022_PROGRAM
from tests.program.test_token2022 import (
    balance,
    collect_when_due,
    funded,
    plan_on,
    plan_refused,
    renewal_fails,
)
from tests.support.billing import USDC
from tests.support.chain import Chain
from tests.support.clock import Clock
from tests.support.token2022 import t22_mint

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "guides" / "stablecoins.md"
HERE = "tests/program/test_stablecoins_table.py"
T22 = "tests/program/test_token2022.py"

# Each row of the table (its first cell) -> the tests that check what it says.
ROWS: dict[str, tuple[str, ...]] = {
    "transfer fee": (
        f"{T22}::test_a_transfer_fee_mint_reports_gross_fee_and_net",
        "tests/scenarios/test_fee_mint_payment.py::"
        "test_the_provider_receives_exactly_the_price_and_the_mint_withholds_its_fee",
        f"{T22}::test_a_session_on_a_hooked_fee_mint_escrows_redeems_and_closes",
    ),
    "transfer hook (PYUSD)": (
        f"{T22}::test_a_pyusd_like_mint_runs_subscribe_renewal_and_metered_deduct",
        f"{T22}::test_a_refusing_hook_fails_the_renewal_the_crank_reports_it_and_moves_on",
        "tests/cli/test_token2022.py::test_subscribe_pays_from_the_token_2022_account_through_the_hook",
        f"{T22}::test_a_session_on_a_hooked_fee_mint_escrows_redeems_and_closes",
    ),
    "permanent delegate (PYUSD, USDG)": (
        f"{HERE}::test_a_permanent_delegate_mint_bills_and_its_issuer_can_move_any_holders_tokens",
    ),
    "pausable": (f"{T22}::test_a_mint_paused_mid_period_makes_the_renewal_past_due_until_resumed",),
    "default-frozen accounts": (
        f"{HERE}::test_accounts_that_start_frozen_work_once_thawed",
        "tests/cli/test_frozen.py::test_minting_where_new_accounts_start_frozen_says_so",
    ),
    "confidential transfers": (
        f"{HERE}::test_a_confidential_transfer_mint_bills_from_the_public_balance",
    ),
    "interest-bearing, scaled UI amount": (
        f"{HERE}::test_prices_are_raw_base_units_whatever_wallets_show",
    ),
    "non-transferable": (f"{T22}::test_create_plan_refuses_what_payments_cannot_use",),
    "memo required on the destination": (
        f"{T22}::test_create_plan_refuses_what_payments_cannot_use",
    ),
    "CPI guard on the subscriber's account": (
        f"{T22}::test_a_subscriber_account_with_a_cpi_guard_is_refused_until_it_is_off",
    ),
}


def table_rows() -> list[str]:
    """The first cell of each row of the guide's `| extension | svcpay |` table."""
    lines = GUIDE.read_text().splitlines()
    start = lines.index("| extension | svcpay |")
    rows: list[str] = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append(line.split("|")[1].strip())
    return rows


def test_every_row_of_the_table_is_checked_by_a_test() -> None:
    rows = table_rows()
    assert len(rows) >= 10, rows
    assert set(rows) == set(ROWS), "rows without tests, or tests of rows no longer there"
    for row, tests in ROWS.items():
        for test in tests:
            path, name = test.split("::")
            source = (ROOT / path).read_text()
            assert re.search(rf"^(async )?def {name}\(", source, re.M), f"{row}: {test}"


async def test_a_permanent_delegate_mint_bills_and_its_issuer_can_move_any_holders_tokens(
    chain: Chain, client: BillingClient, clock: Clock
) -> None:
    """Subscribe and renew work; the issuer (the permanent delegate) can take a subscriber's
    tokens without its signature, and the next renewal then fails as unpaid, not as a bug."""
    issuer = chain.payer
    mint = t22_mint(chain, permanent_delegate=issuer.pubkey())
    plan, _, facilitator, destination = await plan_on(chain, client, mint, period=8)
    subscriber, source = funded(chain, mint, 3 * USDC)
    sub = await client.subscribe(plan, subscriber)
    renewed = await collect_when_due(client, clock, sub, facilitator)
    assert renewed.event("SubscriptionRenewed") is not None
    assert balance(chain, destination) == 2 * USDC and balance(chain, source) == USDC

    seized = Keypair()
    to = chain.token_account(seized.pubkey(), mint, program_id=TOKEN_2022_PROGRAM)
    take = transfer_checked(
        TransferCheckedParams(
            program_id=TOKEN_2022_PROGRAM, source=source, mint=mint, dest=to,
            owner=issuer.pubkey(), amount=USDC, decimals=6,
        )
    )  # fmt: skip
    chain.send_ok([take], [issuer])  # the subscriber signed nothing
    assert balance(chain, source) == 0 and balance(chain, to) == USDC

    await renewal_fails(client, clock, sub, facilitator, "InsufficientFunds")


def thaw(chain: Chain, mint: Pubkey, account: Pubkey) -> None:
    params = ThawAccountParams(
        program_id=TOKEN_2022_PROGRAM, account=account, mint=mint, authority=chain.payer.pubkey()
    )
    chain.send_ok([thaw_account(params)], [chain.payer])


async def test_accounts_that_start_frozen_work_once_thawed(
    chain: Chain, client: BillingClient, clock: Clock
) -> None:
    """A frozen destination is refused at create_plan; once the issuer thaws it, and the
    subscriber's account, the plan bills as on any mint."""
    mint = t22_mint(chain, default_frozen=True, freeze_authority=chain.payer.pubkey())
    provider, facilitator = chain.funded_keypair(), chain.funded_keypair()
    destination = chain.token_account(provider.pubkey(), mint, program_id=TOKEN_2022_PROGRAM)
    plan_refused(chain, provider, mint, destination, "TokenAccountMismatch")

    thaw(chain, mint, destination)
    plan = await client.create_plan(
        provider, plan_id=1, mint=mint, destination=destination,
        billing_authority=facilitator.pubkey(), amount=USDC, period_secs=8, grace_secs=3600,
    )  # fmt: skip
    subscriber = chain.funded_keypair()
    source = chain.token_account(subscriber.pubkey(), mint, program_id=TOKEN_2022_PROGRAM)
    assert source == get_associated_token_address(subscriber.pubkey(), mint, TOKEN_2022_PROGRAM)
    thaw(chain, mint, source)
    chain.mint_to(mint, source, 3 * USDC, program_id=TOKEN_2022_PROGRAM)
    sub = await client.subscribe(plan, subscriber)
    renewed = await collect_when_due(client, clock, sub, facilitator)
    assert renewed.event("SubscriptionRenewed") is not None
    assert balance(chain, destination) == 2 * USDC and balance(chain, source) == USDC


async def test_a_confidential_transfer_mint_bills_from_the_public_balance(
    chain: Chain, client: BillingClient, clock: Clock
) -> None:
    mint = t22_mint(chain, confidential_transfers=True)
    plan, _, facilitator, destination = await plan_on(chain, client, mint, period=8)
    subscriber, source = funded(chain, mint, 3 * USDC)
    sub = await client.subscribe(plan, subscriber, max_overage=USDC)
    await client.deduct_allowance(sub, USDC // 4, facilitator)
    renewed = await collect_when_due(client, clock, sub, facilitator)
    assert renewed.event("SubscriptionRenewed") is not None
    assert balance(chain, destination) == 2 * USDC + USDC // 4
    assert balance(chain, source) == 3 * USDC - 2 * USDC - USDC // 4


@pytest.mark.parametrize(
    "extensions",
    [{"interest_rate": 3_000}, {"scaled_ui_multiplier": 1.5}],
    ids=["interest-bearing 30%", "scaled UI x1.5"],
)
async def test_prices_are_raw_base_units_whatever_wallets_show(
    chain: Chain, client: BillingClient, clock: Clock, extensions: dict[str, object]
) -> None:
    """Interest accrues, or a multiplier scales, only what wallets show: the plan charges
    exactly its raw amount, at subscribe and at each renewal."""
    mint = t22_mint(chain, **extensions)
    plan, _, facilitator, destination = await plan_on(chain, client, mint, period=8)
    subscriber, source = funded(chain, mint, 3 * USDC)
    sub = await client.subscribe(plan, subscriber)
    assert balance(chain, destination) == USDC and balance(chain, source) == 2 * USDC
    renewed = await collect_when_due(client, clock, sub, facilitator)
    assert renewed.event("SubscriptionRenewed") is not None
    assert balance(chain, destination) == 2 * USDC and balance(chain, source) == USDC
    shown = chain.rpc("getTokenAccountBalance", str(destination), {"commitment": "confirmed"})[
        "value"
    ]
    assert shown["amount"] == str(2 * USDC)  # raw; the UI amount is the mint's view of it
    if "scaled_ui_multiplier" in extensions:
        assert shown["uiAmountString"] == "3"  # 2 tokens shown as 3
    else:
        assert Decimal(shown["uiAmountString"]) >= 2  # interest accrues in the view only
