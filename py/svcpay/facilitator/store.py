"""The facilitator's durable state, behind one async API over SQLite or PostgreSQL.

Every write that must survive a crash happens here before the action it records:
settlements are stored before the transaction is sent, events and their webhook deliveries
are written in one transaction (the outbox), usage reports before the deduction, crank
leases before a collection. Several facilitator instances may share one PostgreSQL
database: claims are conditional upserts, so two instances never take the same work.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from svcpay.facilitator import db
from svcpay.facilitator.db import (
    api_keys,
    crank_leases,
    crank_runs,
    cursors,
    events,
    provider_resources,
    providers,
    settlements,
    usage_reports,
    webhook_deliveries,
    webhook_endpoints,
)

API_KEY_PREFIX = "svc_"


def now() -> int:
    return int(time.time())


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:24]}"


def hash_key(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


@dataclass(frozen=True)
class Event:
    """A lifecycle event: what webhooks carry and analytics count."""

    id: str
    type: str
    created_at: int
    data: dict[str, Any]
    source: str = "facilitator"
    chain_key: str | None = None
    provider_id: str | None = None
    plan: str | None = None
    subscription: str | None = None
    mode: str | None = None
    amount: int | None = None
    seq: int | None = None

    def to_json_dict(self) -> dict[str, Any]:
        """The webhook body and the API's representation."""
        return {"id": self.id, "type": self.type, "created": self.created_at, "data": self.data}


@dataclass(frozen=True)
class Delivery:
    id: int
    endpoint_id: str
    url: str
    secret: str
    event_id: str
    body: bytes
    attempts: int
    created_at: int


@dataclass(frozen=True)
class DeliveryOutcome:
    delivery_id: int
    ok: bool
    status: int | None = None
    error: str = ""
    retry_at: int | None = None


@dataclass(frozen=True)
class Endpoint:
    id: str
    provider_id: str
    url: str
    event_types: list[str]
    created_at: int
    disabled: bool

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "url": self.url,
            "eventTypes": self.event_types,
            "created": self.created_at,
            "disabled": self.disabled,
        }


class Store:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self.dialect = engine.dialect.name

    @classmethod
    def open(cls, url: str | URL, *, migrate: bool = True) -> Store:
        """Opens the database at `url`, first upgrading its schema unless told not to."""
        if migrate:
            db.migrate(url)
        return cls(db.create_engine(url))

    async def close(self) -> None:
        await self.engine.dispose()

    async def ping(self) -> bool:
        """Whether the database answers (for /health)."""
        try:
            async with self.engine.connect() as conn:
                await conn.execute(sa.text("SELECT 1"))
        except Exception:  # any failure to answer is "unreachable"
            return False
        return True

    def _insert(self, table: sa.Table) -> Any:
        return (postgresql.insert if self.dialect == "postgresql" else sqlite.insert)(table)

    # -- settlements -----------------------------------------------------------------------
    async def begin_settlement(self, row: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        """Stores a settlement about to be sent, unless one exists for its signature; returns
        the stored row (this one, or the earlier one with its original issue time) and
        whether this call stored it. The database is the arbiter: of requests racing with
        one transaction, on any instance, exactly one stores it."""
        stmt = (
            self._insert(settlements)
            .values(**row)
            .on_conflict_do_nothing()
            .returning(settlements.c.signature)
        )
        async with self.engine.begin() as conn:
            created = (await conn.execute(stmt)).first() is not None
            got = (
                await conn.execute(
                    sa.select(settlements).where(settlements.c.signature == row["signature"])
                )
            ).one()
        return _amount_int(dict(got._mapping)), created

    async def settlement(self, signature: str) -> dict[str, Any] | None:
        """The settlement of the transaction whose first signature is `signature`, if any."""
        async with self.engine.connect() as conn:
            got = (
                await conn.execute(
                    sa.select(settlements).where(settlements.c.signature == signature)
                )
            ).one_or_none()
        return _amount_int(dict(got._mapping)) if got else None

    async def finish_settlement(self, signature: str, proof: str, event: Event) -> tuple[str, bool]:
        """Records the settlement's proof and its event, unless another request or instance
        did first; returns the stored proof (the first one, so every answer is the same) and
        whether this call recorded it (exactly one call does)."""
        async with self.engine.begin() as conn:
            res = await conn.execute(
                settlements.update()
                .where((settlements.c.signature == signature) & (settlements.c.status == "sending"))
                .values(status="settled", proof=proof, settled_at=now(), error=None)
            )
            if res.rowcount:
                await self._add_event(conn, event)
            stored = await conn.scalar(
                sa.select(settlements.c.proof).where(settlements.c.signature == signature)
            )
        if stored is None:
            raise LookupError(f"settlement {signature} vanished")
        return str(stored), bool(res.rowcount)

    async def forget_settlement(self, signature: str) -> None:
        """Drops a settlement that definitely did not land (refused in simulation), so the
        client may fix the cause and submit again."""
        async with self.engine.begin() as conn:
            await conn.execute(
                settlements.delete().where(
                    (settlements.c.signature == signature) & (settlements.c.status != "settled")
                )
            )

    async def pending_settlements(self) -> list[dict[str, Any]]:
        async with self.engine.connect() as conn:
            rows = await conn.execute(
                sa.select(settlements).where(settlements.c.status == "sending")
            )
            return [dict(r._mapping) for r in rows]

    # -- providers and API keys --------------------------------------------------------------
    async def create_provider(self, name: str) -> str:
        pid = new_id("prov")
        async with self.engine.begin() as conn:
            await conn.execute(providers.insert().values(id=pid, name=name, created_at=now()))
        return pid

    async def provider(self, provider_id: str) -> dict[str, Any] | None:
        async with self.engine.connect() as conn:
            got = (
                await conn.execute(sa.select(providers).where(providers.c.id == provider_id))
            ).one_or_none()
        return dict(got._mapping) if got else None

    async def create_api_key(self, provider_id: str, label: str = "") -> tuple[str, str]:
        """A new key for `provider_id`: returns (key id, the key). Only its SHA-256 is
        stored; the key itself is shown once."""
        kid = uuid.uuid4().hex[:16]
        key = f"{API_KEY_PREFIX}{kid}_{secrets.token_urlsafe(32)}"
        async with self.engine.begin() as conn:
            await conn.execute(
                api_keys.insert().values(
                    id=kid,
                    provider_id=provider_id,
                    key_hash=hash_key(key),
                    label=label,
                    created_at=now(),
                )
            )
        return kid, key

    async def authenticate(self, key: str) -> str | None:
        """The provider a presented API key belongs to, or None (unknown, revoked, wrong)."""
        if not key.startswith(API_KEY_PREFIX) or len(key) > 200:
            return None
        kid = key[len(API_KEY_PREFIX) :].split("_", 1)[0]
        async with self.engine.connect() as conn:
            got = (
                await conn.execute(
                    sa.select(api_keys.c.key_hash, api_keys.c.provider_id).where(
                        (api_keys.c.id == kid) & api_keys.c.revoked_at.is_(None)
                    )
                )
            ).one_or_none()
        if got is None or not hmac.compare_digest(got.key_hash, hash_key(key)):
            return None
        return str(got.provider_id)

    async def revoke_api_key(self, key_id: str) -> bool:
        async with self.engine.begin() as conn:
            res = await conn.execute(
                api_keys.update()
                .where((api_keys.c.id == key_id) & api_keys.c.revoked_at.is_(None))
                .values(revoked_at=now())
            )
        return bool(res.rowcount)

    async def list_providers(self) -> list[dict[str, Any]]:
        """Every provider with its resources and API keys (id, label, created, revoked; never
        the key), oldest first."""
        async with self.engine.connect() as conn:
            rows = await conn.execute(sa.select(providers).order_by(providers.c.created_at))
            out = [{**dict(r._mapping), "resources": [], "keys": []} for r in rows]
            by_id = {p["id"]: p for p in out}
            for r in await conn.execute(sa.select(provider_resources)):
                by_id[r.provider_id]["resources"].append({"kind": r.kind, "address": r.address})
            keys = sa.select(api_keys.c.id, api_keys.c.provider_id, api_keys.c.label,
                             api_keys.c.created_at, api_keys.c.revoked_at)  # fmt: skip
            for r in await conn.execute(keys.order_by(api_keys.c.created_at)):
                key = {"id": r.id, "label": r.label, "createdAt": r.created_at,
                       "revokedAt": r.revoked_at}  # fmt: skip
                by_id[r.provider_id]["keys"].append(key)
        return out

    async def revoke_provider_keys(self, provider_id: str) -> int:
        """Revokes every live API key of `provider_id`; returns how many."""
        async with self.engine.begin() as conn:
            res = await conn.execute(
                api_keys.update()
                .where((api_keys.c.provider_id == provider_id) & api_keys.c.revoked_at.is_(None))
                .values(revoked_at=now())
            )
        return int(res.rowcount)

    async def add_resource(self, provider_id: str, kind: str, address: str) -> None:
        """Registers a plan or a payTo token account as `provider_id`'s (for usage reporting
        and analytics). An address belongs to one provider."""
        async with self.engine.begin() as conn:
            await conn.execute(
                self._insert(provider_resources)
                .values(address=address, kind=kind, provider_id=provider_id)
                .on_conflict_do_nothing()
            )

    async def resource_owner(self, address: str) -> str | None:
        async with self.engine.connect() as conn:
            got = await conn.scalar(
                sa.select(provider_resources.c.provider_id).where(
                    provider_resources.c.address == address
                )
            )
        return str(got) if got else None

    async def plans(self) -> list[str]:
        """Every registered plan (the billing crank's work)."""
        async with self.engine.connect() as conn:
            rows = await conn.execute(
                sa.select(provider_resources.c.address).where(provider_resources.c.kind == "plan")
            )
            return [r.address for r in rows]

    async def resources(self, provider_id: str) -> list[tuple[str, str]]:
        async with self.engine.connect() as conn:
            rows = await conn.execute(
                sa.select(provider_resources.c.kind, provider_resources.c.address).where(
                    provider_resources.c.provider_id == provider_id
                )
            )
            return [(r.kind, r.address) for r in rows]

    # -- events and the webhook outbox -----------------------------------------------------
    async def add_event(self, event: Event) -> bool:
        """Records `event` and queues its webhook deliveries, atomically. False when a chain
        event with the same chain_key was recorded before (re-indexing is harmless)."""
        async with self.engine.begin() as conn:
            return await self._add_events(conn, [event]) == 1

    async def add_events(self, batch: Sequence[Event]) -> int:
        """`add_event` for several, in one transaction; returns how many were new."""
        if not batch:
            return 0
        async with self.engine.begin() as conn:
            return await self._add_events(conn, batch)

    async def _add_event(self, conn: AsyncConnection, event: Event) -> bool:
        return await self._add_events(conn, [event]) == 1

    async def _add_events(self, conn: AsyncConnection, batch: Sequence[Event]) -> int:
        """Attributes each event to its plan and provider (cached across the batch), inserts
        the new ones in one statement and their webhook deliveries in another."""
        seen: dict[tuple[str, str], Any] = {}

        async def lookup(kind: str, key: str, query: Any) -> Any:
            if (kind, key) not in seen:
                seen[kind, key] = await conn.scalar(query)
            return seen[kind, key]

        rows: list[dict[str, Any]] = []
        for event in batch:
            provider_id, plan = event.provider_id, event.plan
            if plan is None and event.subscription is not None:  # e.g. AllowanceDeducted
                plan = await lookup(
                    "plan",
                    event.subscription,
                    sa.select(events.c.plan)
                    .where(
                        (events.c.subscription == event.subscription) & events.c.plan.isnot(None)
                    )
                    .limit(1),
                )
            if provider_id is None:
                for address in (plan, event.data.get("payTo")):
                    if isinstance(address, str):
                        provider_id = await lookup(
                            "owner",
                            address,
                            sa.select(provider_resources.c.provider_id).where(
                                provider_resources.c.address == address
                            ),
                        )
                        if provider_id:
                            break
            rows.append(
                {
                    "id": event.id,
                    "type": event.type,
                    "created_at": event.created_at,
                    "source": event.source,
                    "chain_key": event.chain_key,
                    "provider_id": provider_id,
                    "plan": plan,
                    "subscription": event.subscription,
                    "mode": event.mode,
                    "amount": event.amount,
                    "data": json.dumps(event.data, separators=(",", ":")),
                }
            )
        # RETURNING names the rows actually inserted (rowcount is unreliable with RETURNING
        # on PostgreSQL, and a conflicting chain_key inserts nothing).
        res = await conn.execute(
            self._insert(events).values(rows).on_conflict_do_nothing().returning(events.c.id)
        )
        new = {r.id for r in res}
        ts = now()
        deliveries = []
        for row in rows:
            provider_id = row["provider_id"]
            if row["id"] not in new or provider_id is None:
                continue
            if ("endpoints", provider_id) not in seen:
                found = await conn.execute(
                    sa.select(webhook_endpoints.c.id, webhook_endpoints.c.event_types).where(
                        (webhook_endpoints.c.provider_id == provider_id)
                        & webhook_endpoints.c.disabled_at.is_(None)
                    )
                )
                seen["endpoints", provider_id] = [(e.id, json.loads(e.event_types)) for e in found]
            deliveries += [
                {
                    "endpoint_id": endpoint_id,
                    "event_id": row["id"],
                    "status": "pending",
                    "attempts": 0,
                    "next_attempt_at": ts,
                    "locked_until": 0,
                    "created_at": ts,
                }
                for endpoint_id, types in seen["endpoints", provider_id]
                if _wants(types, row["type"])
            ]
        if deliveries:
            await conn.execute(webhook_deliveries.insert(), deliveries)
        return len(new)

    async def events(
        self, provider_id: str | None, *, after_seq: int = 0, limit: int = 100
    ) -> list[Event]:
        q = sa.select(events).where(events.c.seq > after_seq).order_by(events.c.seq).limit(limit)
        if provider_id is not None:
            q = q.where(events.c.provider_id == provider_id)
        async with self.engine.connect() as conn:
            return [_event(r._mapping) for r in await conn.execute(q)]

    async def create_endpoint(
        self, provider_id: str, url: str, event_types: Sequence[str]
    ) -> tuple[Endpoint, str]:
        """A webhook endpoint; returns it with its signing secret (shown once)."""
        eid, secret = new_id("we"), "whsec_" + secrets.token_urlsafe(32)
        ts = now()
        async with self.engine.begin() as conn:
            await conn.execute(
                webhook_endpoints.insert().values(
                    id=eid,
                    provider_id=provider_id,
                    url=url,
                    secret=secret,
                    event_types=json.dumps(list(event_types)),
                    created_at=ts,
                )
            )
        return Endpoint(eid, provider_id, url, list(event_types), ts, False), secret

    async def endpoints(self, provider_id: str) -> list[Endpoint]:
        async with self.engine.connect() as conn:
            rows = await conn.execute(
                sa.select(webhook_endpoints)
                .where(webhook_endpoints.c.provider_id == provider_id)
                .order_by(webhook_endpoints.c.created_at)
            )
            return [
                Endpoint(
                    r.id,
                    r.provider_id,
                    r.url,
                    json.loads(r.event_types),
                    r.created_at,
                    r.disabled_at is not None,
                )
                for r in rows
            ]

    async def disable_endpoint(self, provider_id: str, endpoint_id: str) -> bool:
        async with self.engine.begin() as conn:
            res = await conn.execute(
                webhook_endpoints.update()
                .where(
                    (webhook_endpoints.c.id == endpoint_id)
                    & (webhook_endpoints.c.provider_id == provider_id)
                    & webhook_endpoints.c.disabled_at.is_(None)
                )
                .values(disabled_at=now())
            )
            if res.rowcount:  # what was still queued for it will not be sent
                await conn.execute(
                    webhook_deliveries.update()
                    .where(
                        (webhook_deliveries.c.endpoint_id == endpoint_id)
                        & (webhook_deliveries.c.status == "pending")
                    )
                    .values(status="dead", last_error="the endpoint was deleted")
                )
            return bool(res.rowcount)

    async def claim_deliveries(self, *, limit: int, lease_secs: int) -> list[Delivery]:
        """Takes up to `limit` due deliveries for `lease_secs` (another instance, or this one
        after a crash, takes them again once the lease lapses)."""
        ts = now()
        due = (
            (webhook_deliveries.c.status == "pending")
            & (webhook_deliveries.c.next_attempt_at <= ts)
            & (webhook_deliveries.c.locked_until <= ts)
        )
        async with self.engine.begin() as conn:
            q = (
                sa.select(webhook_deliveries.c.id)
                .join(webhook_endpoints, webhook_endpoints.c.id == webhook_deliveries.c.endpoint_id)
                .where(due & webhook_endpoints.c.disabled_at.is_(None))
                .limit(limit)
            )
            if self.dialect == "postgresql":
                q = q.with_for_update(skip_locked=True)
            ids = [r.id for r in await conn.execute(q)]
            if not ids:
                return []
            await conn.execute(
                webhook_deliveries.update()
                .where(webhook_deliveries.c.id.in_(ids) & due)
                .values(locked_until=ts + lease_secs)
            )
            rows = await conn.execute(
                sa.select(
                    webhook_deliveries.c.id,
                    webhook_deliveries.c.endpoint_id,
                    webhook_deliveries.c.attempts,
                    webhook_deliveries.c.created_at,
                    webhook_endpoints.c.url,
                    webhook_endpoints.c.secret,
                    events.c.id.label("event_id"),
                    events.c.type.label("event_type"),
                    events.c.created_at.label("event_created"),
                    events.c.data.label("event_data"),
                )
                .join(webhook_endpoints, webhook_endpoints.c.id == webhook_deliveries.c.endpoint_id)
                .join(events, events.c.id == webhook_deliveries.c.event_id)
                .where(
                    webhook_deliveries.c.id.in_(ids)
                    & (webhook_deliveries.c.locked_until == ts + lease_secs)
                )
                .order_by(webhook_deliveries.c.id)
            )
            return [
                Delivery(
                    id=r.id,
                    endpoint_id=r.endpoint_id,
                    url=r.url,
                    secret=r.secret,
                    event_id=r.event_id,
                    body=event_body(r.event_id, r.event_type, r.event_created, r.event_data),
                    attempts=r.attempts,
                    created_at=r.created_at,
                )
                for r in rows
            ]

    async def record_attempts(self, outcomes: Sequence[DeliveryOutcome]) -> None:
        """Records a batch of delivery attempts in one transaction: delivered (2xx), to be
        retried at `retry_at`, or given up (`retry_at` None)."""
        if not outcomes:
            return
        ts = now()
        async with self.engine.begin() as conn:
            for o in outcomes:
                if o.ok:
                    values: dict[str, Any] = {
                        "status": "delivered", "last_error": None, "delivered_at": ts,
                    }  # fmt: skip
                else:
                    values = {
                        "status": "pending" if o.retry_at is not None else "dead",
                        "last_error": o.error[:500],
                        "next_attempt_at": o.retry_at or 0,
                    }
                await conn.execute(
                    webhook_deliveries.update()
                    .where(webhook_deliveries.c.id == o.delivery_id)
                    .values(
                        attempts=webhook_deliveries.c.attempts + 1,
                        last_status=o.status,
                        locked_until=0,
                        **values,
                    )
                )

    async def delivered(self, delivery_id: int, status: int) -> None:
        await self.record_attempts([DeliveryOutcome(delivery_id, True, status)])

    async def delivery_failed(
        self, delivery_id: int, *, status: int | None, error: str, retry_at: int | None
    ) -> None:
        """Records a failed attempt: retried at `retry_at`, or given up (dead) when None."""
        await self.record_attempts([DeliveryOutcome(delivery_id, False, status, error, retry_at)])

    async def deliveries(self, endpoint_id: str) -> list[dict[str, Any]]:
        async with self.engine.connect() as conn:
            rows = await conn.execute(
                sa.select(webhook_deliveries)
                .where(webhook_deliveries.c.endpoint_id == endpoint_id)
                .order_by(webhook_deliveries.c.id)
            )
            return [dict(r._mapping) for r in rows]

    # -- metered usage ---------------------------------------------------------------------
    async def begin_usage(
        self, provider_id: str, idempotency_key: str, subscription: str, amount: int
    ) -> tuple[dict[str, Any], bool]:
        """The usage report with this idempotency key: (row, created now?). A report with the
        same key but different content is returned as is; the caller refuses it."""
        row = {
            "id": new_id("use"),
            "provider_id": provider_id,
            "idempotency_key": idempotency_key,
            "subscription": subscription,
            "amount": amount,
            "status": "pending",
            "created_at": now(),
        }
        async with self.engine.begin() as conn:
            res = await conn.execute(
                self._insert(usage_reports)
                .values(**row)
                .on_conflict_do_nothing()
                .returning(usage_reports.c.id)
            )
            created = res.first() is not None
            got = (
                await conn.execute(
                    sa.select(usage_reports).where(
                        (usage_reports.c.provider_id == provider_id)
                        & (usage_reports.c.idempotency_key == idempotency_key)
                    )
                )
            ).one()
        return _amount_int(dict(got._mapping)), created

    async def finish_usage(
        self, report_id: str, *, signature: str | None, error: str | None
    ) -> None:
        async with self.engine.begin() as conn:
            await conn.execute(
                usage_reports.update()
                .where(usage_reports.c.id == report_id)
                .values(status="failed" if error else "deducted", signature=signature, error=error)
            )

    async def usage_sent(
        self, report_id: str, replaces: str | None, signature: str, transaction: str
    ) -> bool:
        """Records the signed deduction before it is sent (recovery asks the chain), in
        place of the transaction `replaces` (None: the first). False if another request or
        instance recorded a different one first: send that one instead, never both."""
        same = (
            usage_reports.c.signature.is_(None)
            if replaces is None
            else usage_reports.c.signature == replaces
        )
        async with self.engine.begin() as conn:
            res = await conn.execute(
                usage_reports.update()
                .where((usage_reports.c.id == report_id) & same)
                .values(signature=signature, transaction=transaction, sent_at=now())
            )
            return bool(res.rowcount)

    async def usage_report(self, report_id: str) -> dict[str, Any] | None:
        async with self.engine.connect() as conn:
            got = (
                await conn.execute(sa.select(usage_reports).where(usage_reports.c.id == report_id))
            ).one_or_none()
        return _amount_int(dict(got._mapping)) if got else None

    async def pending_usage(self) -> list[dict[str, Any]]:
        async with self.engine.connect() as conn:
            rows = await conn.execute(
                sa.select(usage_reports).where(usage_reports.c.status == "pending")
            )
            return [_amount_int(dict(r._mapping)) for r in rows]

    async def claim_subscriptions(
        self, owner: str, subscriptions: Sequence[str], *, lease_secs: int
    ) -> list[str]:
        """Leases the given due subscriptions to `owner`, skipping those another instance
        holds or that wait for a retry; returns the ones this instance now holds."""
        if not subscriptions:
            return []
        ts = now()
        until = ts + lease_secs
        stmt = self._insert(crank_leases)
        stmt = stmt.on_conflict_do_update(
            index_elements=[crank_leases.c.subscription],
            set_={"owner": owner, "lease_until": until},
            where=(crank_leases.c.lease_until <= ts) & (crank_leases.c.next_attempt_at <= ts),
        )
        rows = [  # in one order, so two instances' upserts cannot deadlock on PostgreSQL
            {
                "subscription": s,
                "owner": owner,
                "lease_until": until,
                "attempts": 0,
                "next_attempt_at": 0,
            }
            for s in sorted(set(subscriptions))
        ]
        async with self.engine.begin() as conn:
            for chunk in range(0, len(rows), 500):
                await conn.execute(stmt, rows[chunk : chunk + 500])
            held = await conn.execute(
                sa.select(crank_leases.c.subscription).where(
                    crank_leases.c.subscription.in_(list(subscriptions))
                    & (crank_leases.c.owner == owner)
                    & (crank_leases.c.lease_until == until)
                )
            )
            return [r.subscription for r in held]

    async def release_subscription(
        self,
        subscription: str,
        *,
        error: str | None = None,
        retry_at: int = 0,
        owner: str | None = None,
    ) -> None:
        """Ends a lease (only `owner`'s, when given: a lease that expired and passed to
        another instance is not ours to end); after a failure the subscription waits until
        `retry_at`."""
        values: dict[str, Any] = {"lease_until": 0, "next_attempt_at": retry_at}
        if error is None:
            values.update(attempts=0, last_error=None)
        else:
            values.update(attempts=crank_leases.c.attempts + 1, last_error=error[:500])
        async with self.engine.begin() as conn:
            mine = crank_leases.c.subscription == subscription
            if owner is not None:
                mine = mine & (crank_leases.c.owner == owner)
            await conn.execute(crank_leases.update().where(mine).values(**values))

    async def release_subscriptions(self, subscriptions: Sequence[str], owner: str) -> None:
        """Ends `owner`'s leases of subscriptions handled successfully, in one statement."""
        if not subscriptions:
            return
        async with self.engine.begin() as conn:
            await conn.execute(
                crank_leases.update()
                .where(
                    crank_leases.c.subscription.in_(list(subscriptions))
                    & (crank_leases.c.owner == owner)
                )
                .values(lease_until=0, next_attempt_at=0, attempts=0, last_error=None)
            )

    async def lease(self, subscription: str) -> dict[str, Any] | None:
        async with self.engine.connect() as conn:
            got = (
                await conn.execute(
                    sa.select(crank_leases).where(crank_leases.c.subscription == subscription)
                )
            ).one_or_none()
        return dict(got._mapping) if got else None

    async def start_run(self, instance: str) -> int:
        async with self.engine.begin() as conn:
            res = await conn.execute(
                crank_runs.insert().values(instance=instance, started_at=now())
            )
            key = res.inserted_primary_key
            assert key is not None
            return int(key[0])

    async def finish_run(self, run_id: int, summary: dict[str, Any]) -> None:
        async with self.engine.begin() as conn:
            await conn.execute(
                crank_runs.update()
                .where(crank_runs.c.id == run_id)
                .values(finished_at=now(), summary=json.dumps(summary))
            )

    # -- cursors ------------------------------------------------------------------------------
    async def cursor(self, name: str) -> str | None:
        async with self.engine.connect() as conn:
            got = await conn.scalar(sa.select(cursors.c.value).where(cursors.c.name == name))
        return str(got) if got is not None else None

    async def set_cursor(self, name: str, value: str) -> None:
        stmt = self._insert(cursors).values(name=name, value=value)
        stmt = stmt.on_conflict_do_update(index_elements=[cursors.c.name], set_={"value": value})
        async with self.engine.begin() as conn:
            await conn.execute(stmt)


def _wants(types: list[str], event_type: str) -> bool:
    return "*" in types or event_type in types


def _amount_int(row: dict[str, Any]) -> dict[str, Any]:
    if row.get("amount") is not None:
        row["amount"] = int(row["amount"])
    return row


def event_body(event_id: str, event_type: str, created: int, data: str) -> bytes:
    """The webhook body: {"id", "type", "created", "data"} as compact JSON."""
    return (
        f'{{"id":{json.dumps(event_id)},"type":{json.dumps(event_type)},'
        f'"created":{int(created)},"data":{data}}}'
    ).encode()


def _event(m: Any) -> Event:
    return Event(
        id=m["id"],
        type=m["type"],
        created_at=m["created_at"],
        data=json.loads(m["data"]),
        source=m["source"],
        chain_key=m["chain_key"],
        provider_id=m["provider_id"],
        plan=m["plan"],
        subscription=m["subscription"],
        mode=m["mode"],
        amount=int(m["amount"]) if m["amount"] is not None else None,
        seq=m["seq"],
    )
