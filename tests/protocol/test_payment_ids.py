"""Payment-identifier stores (memory, SQLite, PostgreSQL): an id is taken once, answers its
stored response to the same payload and 409 to another, and is shared by the stores (server
processes) that share the data, so a resend reaching another worker is recognised."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import anyio
import psycopg
import pytest
from psycopg import sql

from svcpay.protocol.replay import MemoryReplayStore, SqliteReplayStore
from svcpay.protocol.replay_postgres import PostgresReplayStore
from svcpay.schemes.decision import RawHeaders
from svcpay.schemes.x402_exact import idempotency, idempotency_postgres
from svcpay.schemes.x402_exact.idempotency import (
    MemoryPaymentIds,
    PaymentIdStore,
    SqlitePaymentIds,
    fingerprint,
    shared_with,
)
from svcpay.schemes.x402_exact.idempotency_postgres import PostgresPaymentIds

pytestmark = pytest.mark.anyio

ALL = ["memory", "sqlite", "postgres"]
SHARED = ["sqlite", "postgres"]
SCOPE = "GET /v1/data"
FIRST = fingerprint({"x402Version": 2, "payload": {"transaction": "AAAA"}})
OTHER = fingerprint({"x402Version": 2, "payload": {"transaction": "BBBB"}})
HEADERS: RawHeaders = [(b"content-type", b"application/json"), (b"payment-response", b"eyJ9\xe9")]
BODY = b'{"data": 42}\x00\xff'

NewStore = Callable[..., PaymentIdStore]


@pytest.fixture
def pg_ids_table(request: pytest.FixtureRequest) -> Iterator[tuple[str, str]]:
    url: str = request.getfixturevalue("postgres_url")
    table = f"payment_ids_{uuid.uuid4().hex[:12]}"
    yield url, table
    with psycopg.connect(url, autocommit=True) as db:
        db.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(table)))


@pytest.fixture
async def new_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[NewStore]:
    """Makes stores of the test's kind that share their data (memory: one store)."""
    kind: str = request.param
    made: list[PostgresPaymentIds] = []
    memories: dict[str, MemoryPaymentIds] = {}
    if kind == "postgres":
        url, table = request.getfixturevalue("pg_ids_table")

    def make(**limits: float) -> PaymentIdStore:
        if kind == "memory":
            return memories.setdefault(json.dumps(limits), MemoryPaymentIds(**limits))  # type: ignore[arg-type]
        if kind == "sqlite":
            return SqlitePaymentIds(tmp_path / "ids.db", **limits)  # type: ignore[arg-type]
        made.append(PostgresPaymentIds(url, table=table, **limits))  # type: ignore[arg-type]
        return made[-1]

    yield make
    for store in made:
        await store.aclose()


def stores(kinds: list[str]) -> pytest.MarkDecorator:
    return pytest.mark.parametrize("new_store", kinds, indirect=True)


@stores(ALL)
async def test_an_id_is_taken_then_answers_its_stored_response(new_store: NewStore) -> None:
    store = new_store()
    assert await store.begin(SCOPE, "pay_1", FIRST) is None
    busy = await store.begin(SCOPE, "pay_1", FIRST)  # the first request is still served
    assert busy is not None and busy.status == 409 and (b"retry-after", b"1") in busy.headers
    await store.finish(SCOPE, "pay_1", 200, HEADERS, BODY)
    stored = await store.begin(SCOPE, "pay_1", FIRST)
    assert stored is not None and (stored.status, stored.headers, stored.body) == (
        200,
        HEADERS,
        BODY,
    )
    other = await store.begin(SCOPE, "pay_1", OTHER)
    assert other is not None and other.status == 409
    assert json.loads(other.body)["error"] == "PaymentIdConflict"
    assert not any(name == b"retry-after" for name, _ in other.headers)
    # ids are per resource
    assert await store.begin("GET /v1/other", "pay_1", OTHER) is None


@stores(ALL)
async def test_an_abandoned_id_may_be_used_again_but_a_finished_one_stays(
    new_store: NewStore,
) -> None:
    store = new_store()
    assert await store.begin(SCOPE, "pay_2", FIRST) is None
    await store.abandon(SCOPE, "pay_2")
    assert await store.begin(SCOPE, "pay_2", OTHER) is None  # free again, for any payload
    await store.finish(SCOPE, "pay_2", 201, HEADERS, BODY)
    await store.abandon(SCOPE, "pay_2")  # a finished id is not forgotten
    stored = await store.begin(SCOPE, "pay_2", OTHER)
    assert stored is not None and stored.status == 201
    await store.finish(SCOPE, "pay_2", 500, [], b"late")  # a second finish changes nothing
    again = await store.begin(SCOPE, "pay_2", OTHER)
    assert again is not None and (again.status, again.body) == (201, BODY)


class StoppedClock:
    """time.time() for the stores, moved only by the test: a test that slept past a 0.3 s
    ttl between two calls failed on a loaded machine (issue 36)."""

    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def time(self) -> float:
        return self.now


@stores(ALL)
async def test_expired_and_stale_ids_are_free_and_large_bodies_are_not_kept(
    new_store: NewStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = StoppedClock()
    monkeypatch.setattr(idempotency, "time", clock)
    monkeypatch.setattr(idempotency_postgres, "time", clock)
    store = new_store(ttl=30, pending_ttl=15, max_body=8)
    assert await store.begin(SCOPE, "done", FIRST) is None
    await store.finish(SCOPE, "done", 200, HEADERS, b"small")
    assert await store.begin(SCOPE, "stale", FIRST) is None  # its process died
    assert await store.begin(SCOPE, "big", FIRST) is None
    await store.finish(SCOPE, "big", 200, HEADERS, b"more than eight bytes")
    assert await store.begin(SCOPE, "big", OTHER) is None  # not kept: a new payment
    clock.now += 14
    busy = await store.begin(SCOPE, "stale", OTHER)  # still pending: its first may finish
    assert busy is not None and busy.status == 409
    clock.now += 2
    assert await store.begin(SCOPE, "stale", OTHER) is None  # taken over
    assert (await store.begin(SCOPE, "done", OTHER)) is not None  # still kept
    clock.now += 15
    assert await store.begin(SCOPE, "done", OTHER) is None  # expired


@stores(SHARED)
async def test_two_stores_see_each_others_ids_and_race_to_one_winner(
    new_store: NewStore,
) -> None:
    """Two stores, as two gate processes have, each with its own connection."""
    a, b = new_store(), new_store()
    assert await a.begin(SCOPE, "pay_3", FIRST) is None
    await a.finish(SCOPE, "pay_3", 200, HEADERS, BODY)
    stored = await b.begin(SCOPE, "pay_3", FIRST)
    assert stored is not None and (stored.status, stored.headers, stored.body) == (
        200,
        HEADERS,
        BODY,
    )
    ids = [f"pay_race_{i}" for i in range(30)]
    wins = dict.fromkeys(ids, 0)

    async def take(store: PaymentIdStore, pid: str) -> None:
        if await store.begin(SCOPE, pid, FIRST) is None:
            wins[pid] += 1

    async with anyio.create_task_group() as tg:
        for pid in ids:
            for store in (a, b, a, b):
                tg.start_soon(take, store, pid)
    assert wins == dict.fromkeys(ids, 1)


RACER = """
import asyncio, sys
from svcpay.schemes.x402_exact.idempotency import SqlitePaymentIds, fingerprint

async def main(path, n):
    store = SqlitePaymentIds(path)
    print("ready", flush=True)
    sys.stdin.readline()
    fp = fingerprint({"same": "payload"})
    got = await asyncio.gather(*(store.begin("GET /x", f"pay_{i}", fp) for i in range(n)))
    print(" ".join(str(i) for i, g in enumerate(got) if g is None))

asyncio.run(main(sys.argv[1], int(sys.argv[2])))
"""


def test_two_processes_racing_for_the_same_ids_have_one_winner_per_id(tmp_path: Path) -> None:
    n = 60
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RACER, str(tmp_path / "ids.db"), str(n)],
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
    assert not won[0] & won[1] and won[0] | won[1] == set(range(n))


async def test_the_ids_live_where_the_replay_store_does(tmp_path: Path, postgres_url: str) -> None:
    assert isinstance(shared_with(MemoryReplayStore()), MemoryPaymentIds)
    sqlite = shared_with(SqliteReplayStore(tmp_path / "state.db"))
    assert isinstance(sqlite, SqlitePaymentIds) and sqlite.path == str(tmp_path / "state.db")
    pg = shared_with(PostgresReplayStore(postgres_url, table="billing.used_proofs"))
    assert isinstance(pg, PostgresPaymentIds) and pg.table == "billing.payment_ids"
    assert pg.url == postgres_url
    plain = shared_with(PostgresReplayStore(postgres_url))
    assert isinstance(plain, PostgresPaymentIds) and plain.table == "payment_ids"


def test_fingerprints_are_canonical() -> None:
    assert fingerprint({"a": 1, "b": [1, 2]}) == fingerprint({"b": [1, 2], "a": 1})
    assert fingerprint({"a": 1}) != fingerprint({"a": "1"})
