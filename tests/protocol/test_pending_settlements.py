"""Pending x402 settlements on each backend (memory, SQLite, PostgreSQL): an entry is taken
when due and leased to one reconciler at a time (two gate processes, one table), postponed
with its attempts counted, and removed; SQLite and PostgreSQL keep it across a restart."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from svcpay.protocol.replay import MemoryReplayStore, SqliteReplayStore
from svcpay.schemes.x402_exact.settling import (
    LEASE_SECS,
    MemoryPendingSettlements,
    PendingSettlement,
    PendingSettlements,
    SqlitePendingSettlements,
    shared_with,
)

pytestmark = pytest.mark.anyio
NOW = 1_800_000_000.0


def entry(key: str, next_at: float = NOW) -> PendingSettlement:
    payload = {"x402Version": 2, "payload": {"transaction": "AQID"}, "accepted": {"amount": "5"}}
    requirements = {"amount": "500000", "asset": "mint", "payTo": "wallet"}
    return PendingSettlement(key, 2, payload, requirements, "GET /v1/data", NOW - 10, 0, next_at)


@pytest.fixture(params=["memory", "sqlite", "postgresql"])
async def make(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[Callable[[], PendingSettlements]]:
    """A factory of stores sharing one table (two calls: two gate processes)."""
    if request.param == "memory":
        shared = MemoryPendingSettlements()
        yield lambda: shared
        return
    if request.param == "sqlite":
        yield lambda: SqlitePendingSettlements(tmp_path / "gate.db")
        return
    from svcpay.schemes.x402_exact.pending_postgres import PostgresPendingSettlements

    url = request.getfixturevalue("postgres_url")
    table = f"pending_{uuid.uuid4().hex[:10]}"
    made: list[Any] = []

    def postgres() -> PendingSettlements:
        made.append(PostgresPendingSettlements(url, table=table))
        return made[-1]  # type: ignore[no-any-return]

    yield postgres
    for store in made:
        await store.aclose()


async def test_an_entry_is_taken_when_due_leased_postponed_and_removed(
    make: Callable[[], PendingSettlements],
) -> None:
    store = make()
    await store.add(entry("x402:a"))
    await store.add(entry("x402:b", next_at=NOW + 100))
    assert await store.count() == 2
    [taken] = await store.take_due(NOW, 10)
    assert taken == entry("x402:a")  # the payload and the terms come back as stored
    assert await store.take_due(NOW + LEASE_SECS - 1, 10) == []  # leased
    await store.postpone("x402:a", NOW + 500, 3)
    due = await store.take_due(NOW + 500, 10)
    assert [(e.key, e.attempts) for e in due] == [("x402:b", 0), ("x402:a", 3)]
    await store.remove("x402:a")
    await store.remove("x402:b")
    assert await store.count() == 0 and await store.take_due(NOW + 10_000, 10) == []


async def test_two_processes_never_take_one_entry(make: Callable[[], PendingSettlements]) -> None:
    first, second = make(), make()
    for i in range(20):
        await first.add(entry(f"x402:{i}"))
    takes = await asyncio.gather(*(s.take_due(NOW, 5) for s in [first, second] * 3))
    keys = [e.key for batch in takes for e in batch]
    assert len(keys) == len(set(keys)) == 20
    assert await make().count() == 20  # another process's view (and, on disk, a restart's)


async def test_the_store_lives_where_the_replay_store_does(tmp_path: Path) -> None:
    assert isinstance(shared_with(MemoryReplayStore()), MemoryPendingSettlements)
    store = shared_with(SqliteReplayStore(tmp_path / "replay.db"))
    assert isinstance(store, SqlitePendingSettlements) and store.path.endswith("replay.db")
