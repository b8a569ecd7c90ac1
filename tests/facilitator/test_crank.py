"""The billing crank: many renewals per transaction, failures recorded, racing cranks safe."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from solders.keypair import Keypair
from solders.pubkey import Pubkey

from svcpay.facilitator.crank import EXPIRED_RETRY_SECS, _size, pack, run_once
from svcpay.facilitator.store import Store
from svcpay.localnet.process import Localnet
from svcpay.program.client import BillingClient, status_name
from svcpay.program.receipts import Receipt, TransactionError
from tests.support.billing import DAY, USDC
from tests.support.chain import Chain
from tests.support.clock import Clock

pytestmark = pytest.mark.anyio


async def subscribers(
    chain: Chain, client: BillingClient, period: int, n: int, broke: int = 0
) -> tuple[Pubkey, Keypair, list[Pubkey]]:
    """A plan with `n` subscribers who can pay the renewal and `broke` who cannot. They
    subscribe together, so on the real validator their periods end within a second or so."""
    provider, facilitator = chain.funded_keypair(), chain.funded_keypair()
    mint = chain.create_mint()
    destination = chain.token_account(provider.pubkey(), mint)
    plan = await client.create_plan(
        provider, plan_id=1, mint=mint, destination=destination,
        billing_authority=facilitator.pubkey(), amount=USDC, period_secs=period, grace_secs=DAY,
    )  # fmt: skip
    wallets = [chain.funded_keypair() for _ in range(n + broke)]
    for i, kp in enumerate(wallets):
        chain.token_account(kp.pubkey(), mint, 2 * USDC if i < n else USDC)
    subs = await asyncio.gather(
        *(
            client.subscribe(plan, kp, max_overage=USDC if i % 3 == 0 else None)
            for i, kp in enumerate(wallets)
        )
    )
    return plan, facilitator, list(subs)


def test_packing_stays_within_the_transaction_size_limit() -> None:
    from svcpay.program import instructions

    payer = Keypair().pubkey()
    items = [
        (
            Pubkey.new_unique(),
            instructions.collect(
                *(Pubkey.new_unique() for _ in range(5)), has_allowance=i % 2 == 0
            ),
        )
        for i in range(20)
    ]
    groups = pack(items, payer)
    assert sum(len(g) for g in groups) == 20 and len(groups) < 20
    assert all(_size([ix for _, ix in g], payer) <= 1232 for g in groups)


async def test_a_run_renews_every_due_subscription_and_records_failures(
    chain: Chain, clock: Clock, client: BillingClient
) -> None:
    period = clock.days(5)
    plan, facilitator, subs = await subscribers(chain, client, period, n=7, broke=1)
    assert (await run_once(client, facilitator, plan, now=clock.now())).due == 0

    later = clock.advance(period)
    seen: list[int] = []
    summary = await run_once(
        client, facilitator, plan, now=later, progress=lambda s: seen.append(s.transactions)
    )

    assert (summary.due, summary.renewed, summary.renewal_failed, summary.skipped) == (8, 7, 1, 0)
    assert summary.collected == 7 * USDC
    assert summary.transactions < 8 and seen == list(range(1, summary.transactions + 1))
    states = [status_name(s) for s in [await client.fetch_subscription(k) for k in subs] if s]
    assert sorted(states) == ["Active"] * 7 + ["PastDue"]
    left = await client.due_subscriptions(plan, now=later)
    assert [status_name(s) for _, s in left] == ["PastDue"]  # retried on the next run


async def test_racing_cranks_charge_each_subscription_once(
    chain: Chain, clock: Clock, client: BillingClient, validator: Localnet
) -> None:
    # On the real validator the period must outlast the race: a renewed subscription is
    # not due again before the losing crank's collect lands (NotDue).
    period = clock.days(6)
    plan, facilitator, subs = await subscribers(chain, client, period, n=6)
    other = BillingClient.connect(validator.url)
    second_payer = chain.funded_keypair()
    later = clock.advance(period)
    first, second = await asyncio.gather(
        run_once(client, facilitator, plan, now=later),
        run_once(other, second_payer, plan, now=later),
    )
    await other.close()
    # Whether the second crank reads the due list before the first one's collects land is
    # up to the scheduler; either way each subscription is charged exactly once.
    assert first.renewed + second.renewed == 6 and max(first.due, second.due) == 6
    for key in subs:
        sub = await client.fetch_subscription(key)
        assert sub is not None and sub.cycles_billed == 2 and sub.total_paid == 2 * USDC


@pytest.mark.parametrize("expired", [True, False], ids=["expired unlanded", "failed"])
async def test_a_renewal_that_expired_unlanded_is_tried_again_within_seconds(
    chain: Chain, clock: Clock, client: BillingClient, tmp_path: Path, expired: bool
) -> None:
    """Nothing happened on chain when a renewal's blockhash expired before it landed (copies
    dropped, or a lagging node's stale blockhash): it is signed again within seconds, where a
    transaction that failed waits the 60 s penalty (the bench saw renewals 78-85 s late)."""
    period = clock.days(5)
    plan, facilitator, subs = await subscribers(chain, client, period, n=2)
    later = clock.advance(period)

    async def send(*args: object, **kwargs: object) -> Receipt:
        raise TransactionError("transaction X expired before it landed", expired=expired)

    store = Store.open(f"sqlite:///{tmp_path / 'f.db'}")
    try:
        real, client.send = client.send, send  # type: ignore[method-assign]
        try:
            summary = await run_once(client, facilitator, plan, now=later, store=store)
        finally:
            client.send = real  # type: ignore[method-assign]
        leases = [await store.crank.lease(str(key)) for key in subs]
    finally:
        await store.close()
    assert summary.skipped == 2 and summary.renewed == 0
    waits = [int(lease["next_attempt_at"]) - int(time.time()) for lease in leases if lease]
    assert len(waits) == 2
    if expired:
        assert all(w <= EXPIRED_RETRY_SECS for w in waits), waits
        assert summary.next_run_in is not None and summary.next_run_in <= EXPIRED_RETRY_SECS
    else:
        assert all(w >= 55 for w in waits), waits


async def test_a_renewal_due_while_a_pass_runs_starts_then_not_a_pass_later(
    chain: Chain, clock: Clock, client: BillingClient, tmp_path: Path
) -> None:
    """Two subscriptions due 3 s apart, and a first renewal that takes until the second is
    due (a lossy node): the same pass starts the second as soon as it is due. Before, it
    waited for the pass to end, then for one of its own (the bench saw 16 s late).

    The held renewal must still land less than a period after the first was due, or the
    program rightly starts a new period from its landing (`renewal_start`). On
    solana-test-validator a day is a second and each transaction takes a second or two, so
    the period is 15 days (15 s there), and the second wallet is made within the 3 s: with
    a 5 s period and the wallet made after them, a held renewal landed a whole period late
    in 2 of 5 runs."""
    period = clock.days(15)
    plan, facilitator, (first,) = await subscribers(chain, client, period, n=1)
    found = await client.fetch_plan(plan)
    assert found is not None
    wallet = chain.funded_keypair()
    chain.token_account(wallet.pubkey(), found.mint, 2 * USDC)
    started = await client.fetch_subscription(first)
    assert started is not None
    clock.advance_to(started.current_period_start + 3)
    second = await client.subscribe(plan, wallet)
    ends = {}
    for key in (first, second):
        sub = await client.fetch_subscription(key)
        assert sub is not None
        ends[key] = sub.current_period_end
    assert ends[second] >= ends[first] + 3
    clock.advance_to(ends[first])
    real = client.send

    async def slow(*args: Any, **kwargs: Any) -> Receipt:
        while await client.chain_time() <= ends[second]:
            await asyncio.sleep(0.2)
        return await real(*args, **kwargs)

    store = Store.open(f"sqlite:///{tmp_path / 'f.db'}")
    try:
        client.send = slow  # type: ignore[method-assign]
        try:
            summary = await run_once(client, facilitator, plan, store=store)
        finally:
            client.send = real  # type: ignore[method-assign]
    finally:
        await store.close()
    assert (summary.due, summary.renewed, summary.errors) == (2, 2, [])
    for key in (first, second):
        sub = await client.fetch_subscription(key)
        assert sub is not None and sub.current_period_end == ends[key] + period
