"""The billing crank's state: a lease on each subscription it collects (so two instances
never collect the same one) with its retry schedule, and a record of each run."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from svcpay.facilitator.db import crank_leases, crank_runs
from svcpay.facilitator.store._base import Part, now


class Crank(Part):
    async def claim(
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

    async def release(
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

    async def release_many(self, subscriptions: Sequence[str], owner: str) -> None:
        """Ends `owner`'s leases of subscriptions handled successfully, in one statement."""
        await self._update_leases(
            subscriptions, owner, lease_until=0, next_attempt_at=0, attempts=0, last_error=None
        )

    async def extend(self, subscriptions: Sequence[str], owner: str, lease_secs: int) -> int:
        """Renews `owner`'s live leases of `subscriptions` for `lease_secs` from now (the
        heartbeat of a running pass); returns how many it renewed. A lease already given back
        or taken over by another instance is left alone."""
        if not subscriptions:
            return 0
        async with self.engine.begin() as conn:
            res = await conn.execute(
                crank_leases.update()
                .where(
                    crank_leases.c.subscription.in_(list(subscriptions))
                    & (crank_leases.c.owner == owner)
                    & (crank_leases.c.lease_until > 0)
                )
                .values(lease_until=now() + lease_secs)
            )
            return int(res.rowcount or 0)

    async def give_back(self, subscriptions: Sequence[str], owner: str) -> None:
        """Ends `owner`'s leases of subscriptions a pass did not get to (it failed or was
        stopped): free for any instance at once, their retry schedule unchanged."""
        await self._update_leases(subscriptions, owner, lease_until=0)

    async def _update_leases(self, subscriptions: Sequence[str], owner: str, **values: Any) -> None:
        if not subscriptions:
            return
        async with self.engine.begin() as conn:
            await conn.execute(
                crank_leases.update()
                .where(
                    crank_leases.c.subscription.in_(list(subscriptions))
                    & (crank_leases.c.owner == owner)
                )
                .values(**values)
            )

    async def next_free(self, subscriptions: Sequence[str]) -> int | None:
        """When the first of `subscriptions` may be claimed again (unix seconds): its lease
        lapses and its retry time has come. None if none is leased or waiting."""
        if not subscriptions:
            return None
        later = sa.func.greatest if self.dialect == "postgresql" else sa.func.max  # of two
        free_at = later(crank_leases.c.lease_until, crank_leases.c.next_attempt_at)
        async with self.engine.connect() as conn:
            found = await conn.scalar(
                sa.select(sa.func.min(free_at)).where(
                    crank_leases.c.subscription.in_(list(subscriptions))
                )
            )
        return None if found is None else int(found)

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
