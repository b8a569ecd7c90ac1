"""The facilitator's durable state, behind one async API over SQLite or PostgreSQL.

Every write that must survive a crash happens here before the action it records:
settlements are stored before the transaction is sent, events and their webhook deliveries
are written in one transaction (the outbox), usage reports before the deduction, crank
leases before a collection. Several facilitator instances may share one PostgreSQL
database: claims are conditional upserts, so two instances never take the same work.

`Store` opens the database and composes one object per concern over the shared engine
(docs/adr/0021): `store.settlements`, `store.providers`, `store.api_keys`, `store.events`,
`store.webhooks`, `store.usage`, `store.crank`, `store.sessions`, `store.cursors`.

Part of `svcpay.facilitator` (layer 3, docs/adr/0041), below the rest of it: it imports
only `svcpay.facilitator.db` (the tables) and SQLAlchemy; the facilitator's services and
`svcpay.cli.facilitator` import it.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncEngine

from svcpay.facilitator import db
from svcpay.facilitator.store._base import hash_key, new_id, now
from svcpay.facilitator.store.crank import Crank
from svcpay.facilitator.store.cursors import Cursors
from svcpay.facilitator.store.events import Event, Events
from svcpay.facilitator.store.providers import API_KEY_PREFIX, ApiKeys, Providers
from svcpay.facilitator.store.sessions import SessionVouchers
from svcpay.facilitator.store.settlements import Settlements
from svcpay.facilitator.store.usage import Usage
from svcpay.facilitator.store.webhooks import (
    Delivery,
    DeliveryOutcome,
    Endpoint,
    Webhooks,
    event_body,
)

__all__ = [
    "API_KEY_PREFIX",
    "Delivery",
    "DeliveryOutcome",
    "Endpoint",
    "Event",
    "Store",
    "event_body",
    "hash_key",
    "new_id",
    "now",
]


class Store:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self.dialect = engine.dialect.name
        self.events = Events(engine)
        self.settlements = Settlements(engine, self.events)
        self.providers = Providers(engine)
        self.api_keys = ApiKeys(engine)
        self.webhooks = Webhooks(engine)
        self.usage = Usage(engine)
        self.crank = Crank(engine)
        self.sessions = SessionVouchers(engine)
        self.cursors = Cursors(engine)

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
