"""Lifecycle events, attributed to their plan and provider, with their webhook deliveries
queued in the same transaction (the outbox)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from svcpay.facilitator.db import events, provider_resources
from svcpay.facilitator.store._base import Part
from svcpay.facilitator.store.webhooks import queue_deliveries


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
    session: str | None = None
    mode: str | None = None
    amount: int | None = None  # the gross a payment moved (analytics' volume)
    fee: int | None = None  # what a transfer-fee mint withheld of it (None: no fee mint)
    seq: int | None = None
    # The mint of its plan or session (None: found by `write` from the plan's plan.created
    # or the session's session.opened; still None when neither was recorded).
    mint: str | None = None

    def to_json_dict(self) -> dict[str, Any]:
        """The webhook body and the API's representation."""
        return {"id": self.id, "type": self.type, "created": self.created_at, "data": self.data}


class Events(Part):
    async def add(self, event: Event) -> bool:
        """Records `event` and queues its webhook deliveries, atomically. False when a chain
        event with the same chain_key was recorded before (re-indexing is harmless)."""
        async with self.engine.begin() as conn:
            return await self.write(conn, [event]) == 1

    async def add_many(self, batch: Sequence[Event]) -> int:
        """`add` for several, in one transaction; returns how many were new."""
        if not batch:
            return 0
        async with self.engine.begin() as conn:
            return await self.write(conn, batch)

    async def write(self, conn: AsyncConnection, batch: Sequence[Event]) -> int:
        """`add_many` inside the caller's transaction `conn` (a settlement records its event
        in the transaction that marks it settled). Attributes each event to its plan and
        provider (cached across the batch), inserts the new ones in one statement and their
        webhook deliveries in another."""
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
            if provider_id is None and event.session is not None:  # its opening named it
                provider_id = await lookup(
                    "session",
                    event.session,
                    sa.select(events.c.provider_id)
                    .where((events.c.session == event.session) & events.c.provider_id.isnot(None))
                    .limit(1),
                )
            if provider_id is None:
                for address in (plan, event.data.get("payTo"), event.data.get("recipient")):
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
            if event.session is not None and provider_id is not None:
                seen["session", event.session] = provider_id  # later events of this batch
            mint = event.mint or own_mint(event.type, event.data)
            for kind, key in (("plan-mint", plan), ("session-mint", event.session)):
                if key is None:
                    continue
                if mint is None:
                    column = events.c.plan if kind == "plan-mint" else events.c.session
                    mint = await lookup(
                        kind,
                        key,
                        sa.select(events.c.mint)
                        .where((column == key) & events.c.mint.isnot(None))
                        .limit(1),
                    )
                if mint is not None and seen.get((kind, key)) is None:
                    seen[kind, key] = mint  # later events of this batch
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
                    "session": event.session,
                    "mode": event.mode,
                    "amount": event.amount,
                    "fee": event.fee,
                    "mint": mint,
                    "data": json.dumps(event.data, separators=(",", ":")),
                }
            )
        # RETURNING names the rows actually inserted (rowcount is unreliable with RETURNING
        # on PostgreSQL, and a conflicting chain_key inserts nothing).
        res = await conn.execute(
            self._insert(events).values(rows).on_conflict_do_nothing().returning(events.c.id)
        )
        new = {r.id for r in res}
        await queue_deliveries(conn, [row for row in rows if row["id"] in new])
        await _name_earlier_events(conn, [row for row in rows if row["id"] in new])
        return len(new)

    async def read(
        self, provider_id: str | None, *, after_seq: int = 0, limit: int = 100
    ) -> list[Event]:
        """Events after `after_seq` in order (all providers' when `provider_id` is None)."""
        q = sa.select(events).where(events.c.seq > after_seq).order_by(events.c.seq).limit(limit)
        if provider_id is not None:
            q = q.where(events.c.provider_id == provider_id)
        async with self.engine.connect() as conn:
            return [_event(r._mapping) for r in await conn.execute(q)]

    async def latest(
        self, provider_id: str, *, before_seq: int | None = None, limit: int = 100
    ) -> list[Event]:
        """`provider_id`'s events before `before_seq` (None: the newest), newest first."""
        q = sa.select(events).where(events.c.provider_id == provider_id)
        if before_seq is not None:
            q = q.where(events.c.seq < before_seq)
        q = q.order_by(events.c.seq.desc()).limit(limit)
        async with self.engine.connect() as conn:
            return [_event(r._mapping) for r in await conn.execute(q)]

    async def of_subscriptions(self, provider_id: str, *, limit: int = 10_000) -> list[Event]:
        """`provider_id`'s subscription.* events, oldest first (at most `limit`, the newest)."""
        q = (
            sa.select(events)
            .where(
                (events.c.provider_id == provider_id)
                & events.c.subscription.isnot(None)
                & events.c.type.startswith("subscription.")
            )
            .order_by(events.c.seq.desc())
            .limit(limit)
        )
        async with self.engine.connect() as conn:
            return [_event(r._mapping) for r in reversed((await conn.execute(q)).all())]


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
        session=m["session"],
        mode=m["mode"],
        amount=int(m["amount"]) if m["amount"] is not None else None,
        fee=int(m["fee"]) if m["fee"] is not None else None,
        seq=m["seq"],
        mint=m["mint"],
    )


async def _name_earlier_events(conn: AsyncConnection, rows: Sequence[dict[str, Any]]) -> None:
    """A plan.created or session.opened gives its mint to the events of its plan or session
    stored before it without one: the facilitator records its own renewals, deductions and
    redeems at once, and the indexer may reach the plan's or session's opening later."""
    for row in rows:
        if row["mint"] is None:
            continue
        column = {"plan.created": events.c.plan, "session.opened": events.c.session}.get(
            row["type"]
        )
        key = row["plan"] if row["type"] == "plan.created" else row["session"]
        if column is not None and key is not None:
            await conn.execute(
                events.update()
                .where((column == key) & events.c.mint.is_(None))
                .values(mint=row["mint"])
            )


def own_mint(event_type: str, data: dict[str, Any]) -> str | None:
    """The mint an event names itself: plan.created's and session.opened's `mint`,
    payment.settled's `token`. Others take their plan's or session's (`Events.write`)."""
    value = data.get("token") if event_type == "payment.settled" else data.get("mint")
    return value if isinstance(value, str) else None
