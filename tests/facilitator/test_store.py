"""The facilitator's database on SQLite and PostgreSQL: migrations, API keys, the webhook
outbox, shared work leases."""

from __future__ import annotations

import asyncio
import json

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from svcpay.facilitator import db
from svcpay.facilitator.store import Event, Store, new_id

pytestmark = pytest.mark.anyio


def test_migrations_build_exactly_the_declared_schema(database_url: str) -> None:
    db.migrate(database_url)
    db.migrate(database_url)  # idempotent
    assert db.current_revision(database_url) == "0007"
    engine = sa.create_engine(db.sync_url(database_url))
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), db.metadata)
    engine.dispose()
    assert diff == []


async def test_an_older_schema_upgrades_with_its_data(database_url: str) -> None:
    db.migrate(database_url, "0001")
    old = Store.open(database_url, migrate=False)
    try:
        provider = await old.providers.create("before the upgrade")
    finally:
        await old.close()
    db.migrate(database_url)
    assert db.current_revision(database_url) == "0007"
    store = Store.open(database_url)
    try:
        assert (await store.providers.get(provider) or {}).get("name") == "before the upgrade"
    finally:
        await store.close()


def test_the_upgrade_to_0007_finds_each_events_mint(database_url: str) -> None:
    """Events recorded before events.mint existed get theirs: plan.created's and
    session.opened's own, payment.settled's token, the rest their plan's or session's."""
    db.migrate(database_url, "0006")
    rows = [  # (type, plan, session, data), oldest first
        ("subscription.renewed", "P2", None, {"plan": "P2", "amount": 7}),  # before its plan's
        ("plan.created", "P1", None, {"plan": "P1", "mint": "MintA"}),
        ("subscription.renewed", "P1", None, {"plan": "P1", "amount": 5}),
        ("session.opened", None, "C1", {"session": "C1", "mint": "MintB"}),
        ("session.redeemed", None, "C1", {"session": "C1", "amount": 3}),
        ("payment.settled", None, None, {"token": "MintC", "amount": "2"}),
        ("subscription.created", "P9", None, {"plan": "P9"}),  # its plan never seen
        ("plan.created", "P2", None, {"plan": "P2", "mint": "MintD"}),
    ]
    engine = sa.create_engine(db.sync_url(database_url))
    with engine.begin() as conn:
        for i, (kind, plan, session, data) in enumerate(rows):
            conn.execute(
                sa.text(
                    "INSERT INTO events (id, type, created_at, source, plan, session, data) "
                    "VALUES (:id, :type, 0, 'chain', :plan, :session, :data)"
                ),
                {
                    "id": f"evt_{i}",
                    "type": kind,
                    "plan": plan,
                    "session": session,
                    "data": json.dumps(data),
                },  # fmt: skip
            )
    db.migrate(database_url)
    with engine.connect() as conn:
        got = conn.execute(sa.text("SELECT type, mint FROM events ORDER BY seq")).all()
    engine.dispose()
    assert [tuple(r) for r in got] == [
        ("subscription.renewed", "MintD"),
        ("plan.created", "MintA"),
        ("subscription.renewed", "MintA"),
        ("session.opened", "MintB"),
        ("session.redeemed", "MintB"),
        ("payment.settled", "MintC"),
        ("subscription.created", None),
        ("plan.created", "MintD"),
    ]


def test_bad_database_urls_are_refused_with_the_reason() -> None:
    with pytest.raises(db.DatabaseUrlError, match="unsupported database 'mysql'"):
        db.async_url("mysql://u@h/d")
    with pytest.raises(db.DatabaseUrlError, match="not a database URL"):
        db.async_url("::nonsense::")
    assert "secret" not in db.redacted("postgresql://u:secret@h/d")


async def test_api_keys_are_stored_hashed_and_can_be_revoked(database_url: str) -> None:
    store = Store.open(database_url)
    try:
        provider = await store.providers.create("acme")
        key_id, key = await store.api_keys.create(provider, "ci")
        assert await store.api_keys.authenticate(key) == provider
        assert (
            await store.api_keys.authenticate(key[:-1] + ("A" if key[-1] != "A" else "B")) is None
        )
        assert await store.api_keys.authenticate("svc_nonsense") is None
        async with store.engine.connect() as conn:
            stored = (await conn.execute(sa.select(db.api_keys.c.key_hash))).scalars().all()
        assert key not in stored and all(len(h) == 64 for h in stored)
        assert await store.api_keys.revoke(key_id)
        assert await store.api_keys.authenticate(key) is None
    finally:
        await store.close()


async def test_an_event_queues_one_delivery_per_matching_endpoint(database_url: str) -> None:
    store = Store.open(database_url)
    try:
        provider = await store.providers.create("acme")
        other = await store.providers.create("other")
        await store.providers.add_resource(provider, "plan", "PLAN")
        everything, _ = await store.webhooks.create_endpoint(provider, "http://a/hook", ["*"])
        await store.webhooks.create_endpoint(provider, "http://b/hook", ["payment.settled"])
        await store.webhooks.create_endpoint(other, "http://c/hook", ["*"])
        event = Event(new_id("evt"), "plan.created", 1, {"plan": "PLAN"}, plan="PLAN")
        assert await store.events.add(event)
        again = Event(new_id("evt"), "plan.created", 1, {}, chain_key="sig:0")
        assert await store.events.add(again) and not await store.events.add(again)

        due = await store.webhooks.claim(limit=10, lease_secs=60)
        assert [(d.url, d.event_id) for d in due] == [("http://a/hook", event.id)]
        assert b'"type":"plan.created"' in due[0].body
        assert await store.webhooks.claim(limit=10, lease_secs=60) == []  # leased
        await store.webhooks.delivery_failed(due[0].id, status=500, error="HTTP 500", retry_at=0)
        retry = await store.webhooks.claim(limit=10, lease_secs=60)
        assert [d.attempts for d in retry] == [1]
        await store.webhooks.delivered(retry[0].id, 200)
        [row] = await store.webhooks.deliveries(everything.id)
        assert (row["status"], row["attempts"]) == ("delivered", 2)
    finally:
        await store.close()


async def test_two_instances_never_lease_the_same_subscription(database_url: str) -> None:
    one, two = Store.open(database_url), Store.open(database_url, migrate=False)
    try:
        subs = [f"SUB{i}" for i in range(40)]
        a, b = await asyncio.gather(
            one.crank.claim("a", subs, lease_secs=60),
            two.crank.claim("b", subs, lease_secs=60),
        )
        assert sorted(a + b) == sorted(subs) and not set(a) & set(b)
        await one.crank.release(a[0] if a else b[0], error="boom", retry_at=2**40)
        freed = a[1:] if a else b[1:]
        for s in freed:
            await one.crank.release(s)
        again = await two.crank.claim("b", subs, lease_secs=60)
        assert sorted(again) == sorted(freed)  # the failed one waits for its retry time
    finally:
        await one.close()
        await two.close()


async def test_a_deleted_endpoint_receives_nothing_more(database_url: str) -> None:
    store = Store.open(database_url)
    try:
        provider = await store.providers.create("acme")
        await store.providers.add_resource(provider, "plan", "PLAN")
        endpoint, _ = await store.webhooks.create_endpoint(
            provider, "https://hooks.example.com/", ["*"]
        )
        await store.events.add(Event(new_id("evt"), "plan.created", 1, {}, plan="PLAN"))
        assert await store.webhooks.disable_endpoint(provider, endpoint.id)
        assert await store.webhooks.claim(limit=10, lease_secs=60) == []
        [row] = await store.webhooks.deliveries(endpoint.id)
        assert row["status"] == "dead" and row["last_error"] == "the endpoint was deleted"
        await store.events.add(Event(new_id("evt"), "plan.deprecated", 2, {}, plan="PLAN"))
        assert len(await store.webhooks.deliveries(endpoint.id)) == 1  # none queued for new events
    finally:
        await store.close()
