"""Settlements: stored before their transaction is sent, marked settled with their event in
one transaction, so every request and instance agrees on one proof."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from svcpay.facilitator.db import settlements
from svcpay.facilitator.store._base import Part, amount_int, now
from svcpay.facilitator.store.events import Event, Events

# A settlement's `error` when an outage ended the request that was sending it.
INTERRUPTED = "interrupted"


class Settlements(Part):
    def __init__(self, engine: AsyncEngine, events: Events) -> None:
        super().__init__(engine)
        self._events = events

    async def begin(self, row: dict[str, Any]) -> tuple[dict[str, Any], bool]:
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
        return amount_int(dict(got._mapping)), created

    async def get(self, signature: str) -> dict[str, Any] | None:
        """The settlement of the transaction whose first signature is `signature`, if any."""
        async with self.engine.connect() as conn:
            got = (
                await conn.execute(
                    sa.select(settlements).where(settlements.c.signature == signature)
                )
            ).one_or_none()
        return amount_int(dict(got._mapping)) if got else None

    async def finish(self, signature: str, proof: str, event: Event) -> tuple[str, bool]:
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
                await self._events.write(conn, [event])
            stored = await conn.scalar(
                sa.select(settlements.c.proof).where(settlements.c.signature == signature)
            )
        if stored is None:
            raise LookupError(f"settlement {signature} vanished")
        return str(stored), bool(res.rowcount)

    async def forget(self, signature: str) -> None:
        """Drops a settlement that definitely did not land (refused in simulation), so the
        client may fix the cause and submit again."""
        async with self.engine.begin() as conn:
            await conn.execute(
                settlements.delete().where(
                    (settlements.c.signature == signature) & (settlements.c.status != "settled")
                )
            )

    async def interrupted(self, signature: str) -> None:
        """Marks a settlement still `sending` whose request an outage ended (a repeat may
        take it over)."""
        async with self.engine.begin() as conn:
            await conn.execute(
                settlements.update()
                .where((settlements.c.signature == signature) & (settlements.c.status == "sending"))
                .values(error=INTERRUPTED)
            )

    async def pending(self) -> list[dict[str, Any]]:
        """Settlements still `sending` (recovery asks the chain about each)."""
        async with self.engine.connect() as conn:
            rows = await conn.execute(
                sa.select(settlements).where(settlements.c.status == "sending")
            )
            return [amount_int(dict(r._mapping)) for r in rows]
