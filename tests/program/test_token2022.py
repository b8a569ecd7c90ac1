"""svc_billing with Token-2022 mints (docs/adr/0030): a PYUSD-like mint (6 decimals, a
transfer hook, a permanent delegate, a zero transfer fee) through create_plan, subscribe,
renewal and metered deduct; a session on a hooked fee mint; a transfer-fee mint's gross,
fee and net; a refusing hook; a mint paused mid-period; the extensions refused at
create_plan; and the token program swapped for the other one. Real Token-2022 on the real
validator, with the workspace's own hook program (programs/svc_test_hook). The other
program tests run with both token programs too (tests/program/conftest.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from solders.keypair import Keypair
from solders.pubkey import Pubkey

from svcpay.facilitator import crank
from svcpay.facilitator.store import Store
from svcpay.gate.chain import ChainSubscriptions
from svcpay.program import errors, instructions, pda
from svcpay.program.client import BillingClient, Receipt, TransactionError, status_name
from svcpay.program.session_client import Sessions
from svcpay.protocol import token2022 as t22
from svcpay.protocol.programs import TOKEN_2022_PROGRAM, TOKEN_PROGRAM
from svcpay.protocol.voucher import SignedVoucher
from tests.support.billing import USDC
from tests.support.chain import Chain
from tests.support.clock import Clock
from tests.support.token2022 import HOOK, hook_transfers, pyusd_like, set_refuse, t22_mint

pytestmark = pytest.mark.anyio


def balance(chain: Chain, account: Pubkey) -> int:
    return chain.token_state(account)["amount"]


async def plan_on(
    chain: Chain, client: BillingClient, mint: Pubkey, *, amount: int = USDC, period: int = 30
) -> tuple[Pubkey, Keypair, Keypair, Pubkey]:
    provider, facilitator = chain.funded_keypair(), chain.funded_keypair()
    destination = chain.token_account(provider.pubkey(), mint, program_id=TOKEN_2022_PROGRAM)
    plan = await client.create_plan(
        provider,
        plan_id=1,
        mint=mint,
        destination=destination,
        billing_authority=facilitator.pubkey(),
        amount=amount,
        period_secs=period,
        grace_secs=3600,
    )
    return plan, provider, facilitator, destination


async def collect_when_due(
    client: BillingClient, clock: Clock, sub: Pubkey, facilitator: Keypair
) -> Receipt:
    """`collect` once the subscription's current period has ended."""
    state = await client.fetch_subscription(sub)
    assert state is not None
    clock.advance_to(state.current_period_end)
    return await client.collect(sub, facilitator)


async def renewal_fails(
    client: BillingClient, clock: Clock, sub: Pubkey, facilitator: Keypair, reason: str
) -> None:
    """The renewal when due fails for `reason`, and the subscription goes past due."""
    failed = await collect_when_due(client, clock, sub, facilitator)
    event = failed.event("RenewalFailed")
    assert event is not None and type(event.data["reason"]).__name__ == reason
    past_due = await client.fetch_subscription(sub)
    assert past_due is not None and status_name(past_due) == "PastDue"


def plan_refused(
    chain: Chain, provider: Keypair, mint: Pubkey, destination: Pubkey, error: str
) -> None:
    """`create_plan` on `mint` paying `destination` fails with the program's `error`."""
    ix = instructions.create_plan(
        provider.pubkey(), 1, mint, destination, provider.pubkey(), USDC, 30, 0,
        token_program=TOKEN_2022_PROGRAM,
    )  # fmt: skip
    result = chain.send([ix], [provider])
    assert not result.ok and result.program_error is not None
    assert result.program_error.name == error, result.logs


def funded(chain: Chain, mint: Pubkey, amount: int) -> tuple[Keypair, Pubkey]:
    who = chain.funded_keypair()
    return who, chain.token_account(who.pubkey(), mint, amount, program_id=TOKEN_2022_PROGRAM)


async def test_a_pyusd_like_mint_runs_subscribe_renewal_and_metered_deduct(
    chain: Chain, client: BillingClient, clock: Clock
) -> None:
    mint = pyusd_like(chain)
    plan, _, facilitator, destination = await plan_on(chain, client, mint, period=8)
    subscriber, source = funded(chain, mint, 10 * USDC)

    sub = await client.subscribe(plan, subscriber, max_overage=3 * USDC)
    assert hook_transfers(chain, mint) == 1
    assert balance(chain, destination) == USDC and balance(chain, source) == 9 * USDC

    deducted = await client.deduct_allowance(sub, USDC // 2, facilitator)
    event = deducted.event("AllowanceDeducted")
    assert event is not None
    assert (event.data["amount"], event.data["fee"], event.data["net"]) == (USDC // 2, 0, USDC // 2)
    assert hook_transfers(chain, mint) == 2

    renewed = await collect_when_due(client, clock, sub, facilitator)
    event = renewed.event("SubscriptionRenewed")
    assert event is not None and (event.data["fee"], event.data["net"]) == (0, USDC)
    assert hook_transfers(chain, mint) == 3
    assert balance(chain, destination) == 2 * USDC + USDC // 2
    assert balance(chain, source) == 10 * USDC - 2 * USDC - USDC // 2


async def test_a_transfer_fee_mint_reports_gross_fee_and_net(
    chain: Chain, client: BillingClient, clock: Clock
) -> None:
    """The plan's price is what the subscriber pays; the provider receives it less the
    mint's fee, withheld in the destination: debited = credited + withheld."""
    mint = t22_mint(chain, transfer_fee=(150, 10_000))  # 1.5%, at most 0.01
    plan, _, facilitator, destination = await plan_on(chain, client, mint, amount=3 * USDC // 10)
    subscriber, source = funded(chain, mint, 10 * USDC)

    receipt_sub = await client.subscribe(plan, subscriber, max_overage=USDC)
    info = await client.tokens.mint(mint)
    epoch = chain.rpc("getEpochInfo")["epoch"]
    fee = info.fee_for(3 * USDC // 10, epoch)
    assert fee == 4_500
    dest = t22.token_account_info(TOKEN_2022_PROGRAM, chain.account(destination).data)
    assert dest.amount == 3 * USDC // 10 - fee and dest.withheld_amount == fee
    assert balance(chain, source) == 10 * USDC - 3 * USDC // 10

    deducted = await client.deduct_allowance(receipt_sub, 900_000, facilitator)
    event = deducted.event("AllowanceDeducted")
    assert event is not None
    capped = info.fee_for(900_000, epoch)
    assert capped == 10_000  # the maximum fee
    assert (event.data["amount"], event.data["fee"], event.data["net"]) == (
        900_000,
        capped,
        900_000 - capped,
    )
    dest = t22.token_account_info(TOKEN_2022_PROGRAM, chain.account(destination).data)
    debited = 10 * USDC - balance(chain, source)
    assert debited == dest.amount + dest.withheld_amount


async def test_a_refusing_hook_fails_the_renewal_the_crank_reports_it_and_moves_on(
    chain: Chain, client: BillingClient, clock: Clock, tmp_path: Path
) -> None:
    """The chain cannot record a renewal the hook refused (the transaction fails): the crank
    records `subscription.renewal_failed` (TransferRefused) for webhooks and renews the
    others; the gate refuses the subscription once its renewal is overdue."""
    hooked = pyusd_like(chain)
    plan, _, facilitator, _ = await plan_on(chain, client, hooked, period=8)
    subscriber, _ = funded(chain, hooked, 10 * USDC)
    sub = await client.subscribe(plan, subscriber)
    plain = t22_mint(chain)
    other, _, _, _ = await plan_on(chain, client, plain, period=8)
    other_subscriber, _ = funded(chain, plain, 10 * USDC)
    other_sub = await client.subscribe(other, other_subscriber)

    set_refuse(chain, hooked, True)
    state = await client.fetch_subscription(sub)
    other_state = await client.fetch_subscription(other_sub)
    assert state is not None and other_state is not None
    clock.advance_to(max(state.current_period_end, other_state.current_period_end))

    with pytest.raises(TransactionError) as refused:
        await client.collect(sub, facilitator)
    assert refused.value.failed_in == str(HOOK) and refused.value.rejected
    assert "refuses transfers" in "\n".join(refused.value.logs)

    store = Store.open(f"sqlite:///{tmp_path / 'facilitator.db'}")
    try:
        summary = await crank.run_once(client, facilitator, plan=[plan, other], store=store)
        events = await store.events.read(None)
    finally:
        await store.close()
    assert summary.renewed == 1 and summary.skipped == 1, summary
    assert any(str(sub) in e for e in summary.errors)
    reported = [e for e in events if e.type == "subscription.renewal_failed"]
    assert len(reported) == 1 and reported[0].subscription == str(sub)
    assert reported[0].data["reason"] == "TransferRefused"
    assert reported[0].data["program"] == str(HOOK)
    renewed = await client.fetch_subscription(other_sub)
    assert renewed is not None and renewed.cycles_billed == 2
    still = await client.fetch_subscription(sub)
    assert still is not None and still.cycles_billed == 1 and status_name(still) == "Active"

    # Active on chain, but not renewed long after its period ended: the gate says so.
    subscriptions = ChainSubscriptions(client, ttl=0, overdue_after=2)
    clock.advance_to(state.current_period_end + 3)
    view = await subscriptions.lookup(str(sub))
    assert view is not None and view.status == "Overdue"
    other_view = await subscriptions.lookup(str(other_sub))
    assert other_view is not None and other_view.status == "Active"

    set_refuse(chain, hooked, False)
    await client.collect(sub, facilitator)
    again = await client.fetch_subscription(sub)
    assert again is not None and again.cycles_billed == 2
    view = await subscriptions.lookup(str(sub))
    assert view is not None and view.status == "Active"


async def test_a_mint_paused_mid_period_makes_the_renewal_past_due_until_resumed(
    chain: Chain, client: BillingClient, clock: Clock
) -> None:
    mint = t22_mint(chain, pausable=True)
    plan, _, facilitator, _ = await plan_on(chain, client, mint, period=8)
    subscriber, _ = funded(chain, mint, 10 * USDC)
    sub = await client.subscribe(plan, subscriber)
    chain.send_ok([t22.pause(mint, chain.payer.pubkey())], [chain.payer])
    await renewal_fails(client, clock, sub, facilitator, "MintPaused")

    chain.send_ok([t22.resume(mint, chain.payer.pubkey())], [chain.payer])
    recovered = await client.collect(sub, facilitator)
    event = recovered.event("SubscriptionRenewed")
    assert event is not None and event.data["recovered"] is True


@pytest.mark.parametrize(
    ("extensions", "memo_destination", "error"),
    [
        ({"non_transferable": True}, False, "MintNonTransferable"),
        ({}, True, "DestinationRequiresMemo"),
    ],
    ids=["non-transferable", "memo-required-destination"],
)
def test_create_plan_refuses_what_payments_cannot_use(
    chain: Chain, extensions: dict[str, object], memo_destination: bool, error: str
) -> None:
    mint = t22_mint(chain, **extensions)
    provider = chain.funded_keypair()
    destination = chain.token_account(provider.pubkey(), mint, program_id=TOKEN_2022_PROGRAM)
    if memo_destination:
        grow = t22.reallocate(
            destination, chain.payer.pubkey(), provider.pubkey(), [t22.ExtensionType.MEMO_TRANSFER]
        )
        memo = t22.enable_required_memo_transfers(destination, provider.pubkey())
        chain.send_ok([grow, memo], [chain.payer, provider])
    plan_refused(chain, provider, mint, destination, error)


async def test_a_subscriber_account_with_a_cpi_guard_is_refused_until_it_is_off(
    chain: Chain, client: BillingClient
) -> None:
    """A CPI guard forbids the approval subscribe makes in its CPI: the program says so
    (CpiGuardEnabled) instead of failing inside Token-2022; with the guard off it works."""
    mint = t22_mint(chain)
    plan, _, _, _ = await plan_on(chain, client, mint)
    subscriber, source = funded(chain, mint, 10 * USDC)
    grow = t22.reallocate(
        source, chain.payer.pubkey(), subscriber.pubkey(), [t22.ExtensionType.CPI_GUARD]
    )
    guard = t22.enable_cpi_guard(source, subscriber.pubkey())
    chain.send_ok([grow, guard], [chain.payer, subscriber])
    with pytest.raises(errors.error_class("CpiGuardEnabled")):
        await client.subscribe(plan, subscriber)
    chain.send_ok([t22.disable_cpi_guard(source, subscriber.pubkey())], [subscriber])
    sub = await client.subscribe(plan, subscriber)
    assert await client.is_active(sub)


def test_a_token_2022_mint_with_the_spl_token_program_is_refused(chain: Chain) -> None:
    """The reverse (an SPL Token mint with Token-2022's id) is in test_attacks (class 6)."""
    mint = t22_mint(chain)
    provider = chain.funded_keypair()
    destination = chain.token_account(provider.pubkey(), mint, program_id=TOKEN_2022_PROGRAM)
    ix = instructions.create_plan(
        provider.pubkey(), 1, mint, destination, provider.pubkey(), USDC, 30, 0,
        token_program=TOKEN_PROGRAM,
    )  # fmt: skip
    result = chain.send([ix], [provider])
    assert result.program_error is not None and result.program_error.name == "MintMismatch"
    # A fake token program is refused before anything is read.
    fake = instructions.with_token_program(ix, pda.PROGRAM_ID)
    assert chain.send([fake], [provider]).ok is False


async def test_a_session_on_a_hooked_fee_mint_escrows_redeems_and_closes(
    chain: Chain, client: BillingClient
) -> None:
    """The deposit is what the vault received; a withdrawal reports gross, fee and net; the
    close harvests the vault's withheld fees so it can close, and refunds the rest."""
    mint = t22_mint(chain, transfer_hook=HOOK, transfer_fee=(150, 10_000))
    payer, payer_token = funded(chain, mint, 100 * USDC)
    provider = chain.funded_keypair()
    recipient = chain.token_account(provider.pubkey(), mint, program_id=TOKEN_2022_PROGRAM)
    sessions = Sessions(client)
    address = await sessions.open(
        payer,
        mint=mint,
        recipient=recipient,
        deposit=USDC,
        price=1_000,
        expires_at=chain.unix_timestamp() + 3600,
        dispute_secs=60,
    )
    state = await sessions.fetch(address)
    assert state is not None and state.deposit == USDC - 10_000  # the fee, at its cap
    transfers = hook_transfers(chain, mint)

    (receipt,) = await sessions.redeem([SignedVoucher.sign(payer, address, USDC // 2)], provider)
    withdrawn = receipt.event("SessionWithdrawn")
    assert withdrawn is not None
    assert (withdrawn.data["amount"], withdrawn.data["fee"], withdrawn.data["net"]) == (
        USDC // 2,
        7_500,
        USDC // 2 - 7_500,
    )
    assert balance(chain, recipient) == USDC // 2 - 7_500
    assert hook_transfers(chain, mint) == transfers + 1

    await sessions.close(address, provider)
    assert chain.account(pda.vault_address(address)) is None
    refund = (USDC - 10_000) - USDC // 2
    refund_fee = 7_350  # 1.5% of the refund, rounded up
    assert balance(chain, payer_token) == 100 * USDC - USDC + refund - refund_fee
