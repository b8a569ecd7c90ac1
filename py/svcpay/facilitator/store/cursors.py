"""Named positions (the chain indexer's last signature), kept across restarts."""

from __future__ import annotations

import sqlalchemy as sa

from svcpay.facilitator.db import cursors
from svcpay.facilitator.store._base import Part


class Cursors(Part):
    async def get(self, name: str) -> str | None:
        async with self.engine.connect() as conn:
            got = await conn.scalar(sa.select(cursors.c.value).where(cursors.c.name == name))
        return str(got) if got is not None else None

    async def set(self, name: str, value: str) -> None:
        stmt = self._insert(cursors).values(name=name, value=value)
        stmt = stmt.on_conflict_do_update(index_elements=[cursors.c.name], set_={"value": value})
        async with self.engine.begin() as conn:
            await conn.execute(stmt)
