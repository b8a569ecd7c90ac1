"""Replay stores (memory, SQLite, PostgreSQL): a key is claimed once until it expires or is
released, also when claims race and when several stores (server processes) share the data."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import anyio
import psycopg
import pytest
from psycopg import sql

from svcpay.protocol.replay import MemoryReplayStore, ReplayStore, SqliteReplayStore
from svcpay.protocol.replay_postgres import PostgresReplayStore, libpq_url

pytestmark = pytest.mark.anyio

ALL = ["memory", "sqlite", "postgres"]
SHARED = ["sqlite", "postgres"]  # stores that several processes can share
LATER = int(time.time()) + 3600

NewStore = Callable[[], ReplayStore]


@pytest.fixture
async def new_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[NewStore]:
    """Makes stores of the test's kind that share their data (memory: the same store)."""
    kind: str = request.param
    made: list[PostgresReplayStore] = []
    memory = MemoryReplayStore()
    if kind == "postgres":
        url, table = request.getfixturevalue("pg_table")

    def make() -> ReplayStore:
        if kind == "memory":
            return memory
        if kind == "sqlite":
            return SqliteReplayStore(tmp_path / "replay.db")
        made.append(PostgresReplayStore(url, table=table))
        return made[-1]

    yield make
    for store in made:
        await store.aclose()


def stores(kinds: list[str]) -> pytest.MarkDecorator:
    return pytest.mark.parametrize("new_store", kinds, indirect=True)


@stores(ALL)
async def test_a_key_is_claimed_once(new_store: NewStore) -> None:
    store = new_store()
    assert await store.claim("tx-1", LATER)
    assert not await store.claim("tx-1", LATER)
    assert await store.claim("tx-2", LATER)


@stores(ALL)
async def test_a_released_key_can_be_claimed_again(new_store: NewStore) -> None:
    store = new_store()
    assert await store.claim("tx-1", LATER)
    await store.release("tx-1")
    await store.release("never-claimed")
    assert await store.claim("tx-1", LATER)
    assert not await store.claim("tx-1", LATER)


@stores(ALL)
async def test_an_expired_claim_no_longer_blocks(new_store: NewStore) -> None:
    store = new_store()
    assert await store.claim("tx-1", int(time.time()) - 1)
    assert await store.claim("tx-1", LATER)
    assert not await store.claim("tx-1", LATER)


@stores(ALL)
async def test_racing_claims_of_one_key_have_one_winner(new_store: NewStore) -> None:
    store = new_store()
    results: list[bool] = []

    async def one() -> None:
        results.append(await store.claim("tx-race", LATER))

    async with anyio.create_task_group() as tg:
        for _ in range(20):
            tg.start_soon(one)
    assert sorted(results) == [False] * 19 + [True]


@stores(SHARED)
async def test_two_stores_racing_for_the_same_keys_have_one_winner_per_key(
    new_store: NewStore,
) -> None:
    """Two stores, as two server processes would have, each with its own connection; their
    first claims also race to create the table."""
    a, b = new_store(), new_store()
    keys = [f"tx-{i}" for i in range(40)]
    wins: dict[str, int] = dict.fromkeys(keys, 0)

    async def claim(store: ReplayStore, key: str) -> None:
        if await store.claim(key, LATER):
            wins[key] += 1

    async with anyio.create_task_group() as tg:
        for key in keys:
            for _ in range(3):
                tg.start_soon(claim, a, key)
                tg.start_soon(claim, b, key)
    assert wins == dict.fromkeys(keys, 1)


RACER = """
import asyncio, sys
from svcpay.protocol.replay_postgres import PostgresReplayStore

async def main(url, table, n, later):
    async with PostgresReplayStore(url, table=table) as store:
        await store.purge_expired()  # connected
        print("ready", flush=True)
        sys.stdin.readline()  # go: both processes are connected
        won = await asyncio.gather(*(store.claim(f"tx-{i}", later) for i in range(n)))
    print(" ".join(str(i) for i, w in enumerate(won) if w))

asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])))
"""


def test_two_server_processes_racing_for_the_same_keys_have_one_winner_per_key(
    pg_table: tuple[str, str],
) -> None:
    url, table = pg_table
    n = 300
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RACER, url, table, str(n), str(LATER)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    for p in procs:
        assert p.stdout is not None and p.stdout.readline() == "ready\n"
    outs = [p.communicate("go\n", timeout=60)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0]
    won = [{int(i) for i in out.split()} for out in outs]
    assert not won[0] & won[1]
    assert won[0] | won[1] == set(range(n))


OPENER = """
import sys, time
from svcpay.protocol.replay import SqliteReplayStore
from svcpay.schemes.x402_exact.idempotency import SqlitePaymentIds

folder, files, start = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
for i in range(files):
    while time.time() < start + i * 0.05:
        pass
    SqliteReplayStore(f"{folder}/{i}.db")
    SqlitePaymentIds(f"{folder}/{i}.db")
print("opened", files)
"""


def test_server_processes_starting_together_on_a_new_file_all_start(tmp_path: Path) -> None:
    # Workers started at once (uvicorn --workers) open a state file that does not exist yet.
    # Switching a new file to WAL fails at once with "database is locked", without SQLite's
    # busy handler, while another process does the same: 12 of 100 such opens failed before.
    files, start = 15, time.time() + 2
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", OPENER, str(tmp_path), str(files), str(start)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(6)
    ]
    results = [p.communicate(timeout=60) for p in procs]
    assert [err.strip().splitlines()[-1:] for _, err in results] == [[]] * len(procs)
    assert [out for out, _ in results] == [f"opened {files}\n"] * len(procs)


async def test_postgres_purges_expired_claims(pg_table: tuple[str, str]) -> None:
    url, table = pg_table
    async with PostgresReplayStore(url, table=table) as store:
        now = int(time.time())
        for i in range(5):
            assert await store.claim(f"old-{i}", now - 10)
        assert await store.claim("live", LATER)
        assert await store.purge_expired() == 5
        assert await store.claim("old-0", now - 10)  # expired again at once
        store._next_sweep = 0  # the next claim sweeps
        assert await store.claim("new", LATER)
        with psycopg.connect(url) as db:
            rows = db.execute(
                sql.SQL("SELECT key FROM {} ORDER BY key").format(sql.Identifier(table))
            )
            assert [r[0] for r in rows] == ["live", "new"]


async def test_postgres_store_reconnects_when_its_connection_is_dropped(
    pg_table: tuple[str, str],
) -> None:
    url, table = pg_table
    async with PostgresReplayStore(url, table=table) as store:
        assert await store.claim("tx-1", LATER)
        assert store._pg.conn is not None
        backend = store._pg.conn.info.backend_pid
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (backend,))
        assert not await store.claim("tx-1", LATER)
        assert store._pg.conn.info.backend_pid != backend
        assert await store.claim("tx-2", LATER)


def test_postgres_store_outlives_its_event_loop(pg_table: tuple[str, str]) -> None:
    """Made outside any loop and used from two `anyio.run`s, as the offline tests do."""
    url, table = pg_table
    store = PostgresReplayStore(url, table=table)
    assert anyio.run(store.claim, "tx-1", LATER)
    assert not anyio.run(store.claim, "tx-1", LATER)
    anyio.run(store.aclose)


def test_sqlalchemy_style_urls_are_accepted() -> None:
    assert libpq_url("postgresql+psycopg://u@h:5/db") == "postgresql://u@h:5/db"
    assert libpq_url("postgres://u@h/db") == "postgresql://u@h/db"
    assert libpq_url("host=h dbname=db") == "host=h dbname=db"
