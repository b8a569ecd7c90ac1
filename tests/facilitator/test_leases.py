"""Crank leases follow the work (issue 28): renewed by a heartbeat while a pass runs, given
back when it ends however it ends, no longer than the shortest period among the due; a pass
that meets an outage gives its leases back without a retry penalty, so another instance
renews at once; the crank asks for its next pass when work is known to come."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from solana.exceptions import SolanaRpcException
from solders.instruction import Instruction
from solders.keypair import Keypair
from solders.pubkey import Pubkey

from svcpay.facilitator.config import ConfigError, FacilitatorConfig
from svcpay.facilitator.crank import (
    MIN_NEXT_RUN_SECS,
    NEXT_RUN_MARGIN_SECS,
    Leases,
    lease_for,
    run_once,
)
from svcpay.facilitator.service import next_run_delay
from svcpay.facilitator.store import Store, now
from svcpay.program.client import BillingClient, Receipt
from tests.facilitator.test_crank import subscribers
from tests.support.chain import Chain
from tests.support.clock import Clock

pytestmark = pytest.mark.anyio


@pytest.fixture
async def store(database_url: str) -> AsyncIterator[Store]:
    s = Store.open(database_url)
    yield s
    await s.close()


async def test_a_running_pass_renews_its_leases_and_gives_them_back(store: Store) -> None:
    keys = [str(Pubkey.new_unique()) for _ in range(3)]
    held = set(await store.crank.claim("a", keys, lease_secs=2))
    assert held == set(keys)
    first = (await store.crank.lease(keys[0]))["lease_until"]  # type: ignore[index]
    async with Leases(store, "a", held, 2) as leases:
        await asyncio.sleep(1.6)  # two heartbeats (every 2/3 s)
        assert (await store.crank.lease(keys[0]))["lease_until"] > first  # type: ignore[index]
        assert await store.crank.claim("b", keys, lease_secs=2) == []  # still held
        leases.done(keys[:1])  # handled: released by the pass itself
        await store.crank.release_many(keys[:1], "a")
    # the pass ended: the rest is free for any instance at once, with no retry penalty
    assert sorted(await store.crank.claim("b", keys, lease_secs=2)) == sorted(keys)
    leases = [await store.crank.lease(k) for k in keys]
    assert all(lease and lease["attempts"] == 0 for lease in leases)


async def test_a_dead_instances_leases_lapse_and_tell_when(store: Store) -> None:
    keys = [str(Pubkey.new_unique()) for _ in range(2)]
    await store.crank.claim("dead", keys, lease_secs=2)  # and then it died: no heartbeat
    assert await store.crank.claim("live", keys, lease_secs=2) == []
    free_at = await store.crank.next_free(keys)
    assert free_at is not None and now() < free_at <= now() + 2
    await asyncio.sleep(free_at - now() + 1.1)
    assert sorted(await store.crank.claim("live", keys, lease_secs=2)) == sorted(keys)


def test_a_lease_is_never_longer_than_the_shortest_period_due() -> None:
    def due(*periods: int) -> list[tuple[Pubkey, Any]]:
        return [
            (Pubkey.new_unique(), SimpleNamespace(terms=SimpleNamespace(period_secs=p)))
            for p in periods
        ]

    assert lease_for(10, due(86_400, 30)) == 10
    assert lease_for(10, due(86_400, 5)) == 5
    assert lease_for(10, due(1)) == 2  # the floor: a heartbeat must land in time
    assert lease_for(10, []) == 10


def test_the_lease_is_configurable_within_bounds(tmp_path: Any) -> None:
    base = {"SVCPAY_FACILITATOR_KEYPAIR_JSON": str(list(bytes(Keypair())))}
    assert FacilitatorConfig.from_env(base).crank_lease_secs == 6
    assert (
        FacilitatorConfig.from_env({**base, "SVCPAY_CRANK_LEASE_SECS": "4"}).crank_lease_secs == 4
    )
    for bad in ("1", "3601", "2.5", "ten"):
        with pytest.raises(ConfigError, match="SVCPAY_CRANK_LEASE_SECS"):
            FacilitatorConfig.from_env({**base, "SVCPAY_CRANK_LEASE_SECS": bad})


class CutAfter(BillingClient):
    """A billing client whose RPC node goes away after `sends` transactions."""

    def __init__(self, inner: BillingClient, sends: int) -> None:
        super().__init__(inner.rpc)
        self.sends = sends

    async def send(self, ixs: list[Instruction], signers: list[Keypair]) -> Receipt:  # type: ignore[override]
        if self.sends <= 0:
            cause = httpx.ConnectError("connection refused")
            error = SolanaRpcException(cause, print, None, "SendTransaction")
            raise error from cause
        self.sends -= 1
        return await super().send(ixs, signers)


async def test_an_outage_mid_pass_ends_it_and_another_instance_renews_at_once(
    chain: Chain, clock: Clock, client: BillingClient, store: Store
) -> None:
    period = clock.days(7)
    plan, payer, subs = await subscribers(chain, client, period, n=24)
    later = clock.advance(period)
    with pytest.raises(SolanaRpcException):  # the pass ends with the outage, raised
        await run_once(
            CutAfter(client, 1), payer, plan, now=later, store=store, instance="a", concurrency=1
        )
    leases = [await store.crank.lease(str(k)) for k in subs]
    assert all(lease and lease["lease_until"] == 0 and lease["attempts"] == 0 for lease in leases)

    summary = await run_once(client, payer, plan, now=later, store=store, instance="b")
    assert summary.skipped == 0 and summary.renewed + 8 >= 24  # the first pass renewed <= 8
    for key in subs:
        sub = await client.fetch_subscription(key)
        assert sub is not None and sub.cycles_billed == 2  # each renewed once, by a or b
    assert summary.next_run_in is not None and 0 < summary.next_run_in <= period


async def test_the_next_pass_comes_when_a_period_ends(
    chain: Chain, clock: Clock, client: BillingClient
) -> None:
    period = clock.days(3)
    plan, payer, _ = await subscribers(chain, client, period, n=2)
    at = clock.now()
    summary = await run_once(client, payer, plan, now=at)
    assert summary.due == 0 and summary.next_run_in is not None
    assert period - 5 <= summary.next_run_in <= period


async def test_a_pass_that_renews_everything_knows_when_the_next_comes(
    chain: Chain, clock: Clock, client: BillingClient
) -> None:
    """Every subscription due and renewed: the next pass comes when the periods just begun
    end, not a whole crank interval after this one (renewals used to drift late)."""
    period = clock.days(3)
    plan, payer, _ = await subscribers(chain, client, period, n=2)
    later = clock.advance(period)
    summary = await run_once(client, payer, plan, now=later)
    assert summary.due == 2 and summary.renewed == 2
    assert summary.next_run_in is not None and period - 10 <= summary.next_run_in <= period


def test_a_slow_pass_does_not_push_the_next_one_back() -> None:
    """The next pass is timed from when the last one read the clock, not from when it ended:
    a pass slowed 8 s by dropped sends and 429s made every renewal after it 8 s late."""
    assert next_run_delay(interval=60, hint=52, took=8) == 52 + NEXT_RUN_MARGIN_SECS - 8
    assert next_run_delay(interval=60, hint=5, took=9) == MIN_NEXT_RUN_SECS  # never a busy loop
    assert next_run_delay(interval=30, hint=52, took=1) == 30  # the interval still bounds it
