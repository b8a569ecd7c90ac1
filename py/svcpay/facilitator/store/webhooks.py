"""Webhook endpoints and their deliveries: queued with each event (`queue_deliveries`, in
the event's transaction), claimed under a lease by any instance, and their attempts
recorded."""

from __future__ import annotations

import json
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from svcpay.facilitator.db import events, webhook_deliveries, webhook_endpoints
from svcpay.facilitator.store._base import Part, new_id, now


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


def event_body(event_id: str, event_type: str, created: int, data: str) -> bytes:
    """The webhook body: {"id", "type", "created", "data"} as compact JSON."""
    return (
        f'{{"id":{json.dumps(event_id)},"type":{json.dumps(event_type)},'
        f'"created":{int(created)},"data":{data}}}'
    ).encode()


async def queue_deliveries(conn: AsyncConnection, new_events: Sequence[dict[str, Any]]) -> None:
    """Queues a delivery of each newly inserted event row (a dict of `events`' columns) to
    every live endpoint of its provider that wants its type, in the caller's transaction."""
    ts = now()
    wanted: dict[str, list[tuple[str, list[str]]]] = {}  # provider -> (endpoint, types)
    deliveries = []
    for row in new_events:
        provider_id = row["provider_id"]
        if provider_id is None:
            continue
        if provider_id not in wanted:
            found = await conn.execute(
                sa.select(webhook_endpoints.c.id, webhook_endpoints.c.event_types).where(
                    (webhook_endpoints.c.provider_id == provider_id)
                    & webhook_endpoints.c.disabled_at.is_(None)
                )
            )
            wanted[provider_id] = [(e.id, json.loads(e.event_types)) for e in found]
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
            for endpoint_id, types in wanted[provider_id]
            if _wants(types, row["type"])
        ]
    if deliveries:
        await conn.execute(webhook_deliveries.insert(), deliveries)


def _wants(types: list[str], event_type: str) -> bool:
    return "*" in types or event_type in types


class Webhooks(Part):
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

    async def claim(self, *, limit: int, lease_secs: int) -> list[Delivery]:
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
                await conn.execute(  # once: a batch recorded again changes nothing
                    webhook_deliveries.update()
                    .where(
                        (webhook_deliveries.c.id == o.delivery_id)
                        & (webhook_deliveries.c.status == "pending")
                    )
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

    async def recent_deliveries(
        self, provider_id: str, *, limit: int = 100
    ) -> list[dict[str, Any]]:
        """`provider_id`'s latest deliveries with their endpoint's URL and whether it is
        disabled, newest first."""
        async with self.engine.connect() as conn:
            rows = await conn.execute(
                sa.select(
                    webhook_deliveries,
                    webhook_endpoints.c.url,
                    webhook_endpoints.c.disabled_at.label("endpoint_disabled_at"),
                )
                .join(webhook_endpoints, webhook_endpoints.c.id == webhook_deliveries.c.endpoint_id)
                .where(webhook_endpoints.c.provider_id == provider_id)
                .order_by(webhook_deliveries.c.id.desc())
                .limit(limit)
            )
            return [dict(r._mapping) for r in rows]

    async def resend(self, provider_id: str, delivery_id: int) -> bool:
        """Queues a failed delivery (dead, or pending after a failed attempt) of one of
        `provider_id`'s live endpoints to be sent on the next pass. It starts over: attempts
        from 0, and the give-up window from now. False when there is no such delivery."""
        ts = now()
        mine = (
            sa.select(webhook_endpoints.c.id)
            .where(
                (webhook_endpoints.c.provider_id == provider_id)
                & webhook_endpoints.c.disabled_at.is_(None)
            )
            .scalar_subquery()
        )
        failed = (webhook_deliveries.c.status == "dead") | (
            (webhook_deliveries.c.status == "pending") & (webhook_deliveries.c.attempts > 0)
        )
        async with self.engine.begin() as conn:
            res = await conn.execute(
                webhook_deliveries.update()
                .where(
                    (webhook_deliveries.c.id == delivery_id)
                    & webhook_deliveries.c.endpoint_id.in_(mine)
                    & failed
                )
                .values(
                    status="pending",
                    attempts=0,
                    next_attempt_at=ts,
                    locked_until=0,
                    created_at=ts,
                )
            )
        return bool(res.rowcount)
