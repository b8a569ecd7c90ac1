"""Session vouchers reported by providers' gates: the highest per session, what the chain
redeemed of it, when it is due, and a lease while a redeemer's transaction is on its way (so
several instances on one PostgreSQL database redeem each voucher once)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from svcpay.facilitator.db import session_vouchers as t
from svcpay.facilitator.store._base import Part, now


@dataclass(frozen=True)
class HeldVoucher:
    session: str
    provider_id: str
    signer: str
    cumulative: int
    expiry: int
    signature: str
    redeemed: int
    due_at: int
    last_error: str | None

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "session": self.session,
            "cumulative": str(self.cumulative),
            "redeemed": str(self.redeemed),
            "dueAt": self.due_at,
            "lastError": self.last_error,
        }


def _held(m: Any) -> HeldVoucher:
    return HeldVoucher(
        m["session"],
        m["provider_id"],
        m["signer"],
        int(m["cumulative"]),
        int(m["expiry"]),
        m["signature"],
        int(m["redeemed"]),
        int(m["due_at"]),
        m["last_error"],
    )


class SessionVouchers(Part):
    async def offer(
        self,
        provider_id: str,
        session: str,
        *,
        signer: str,
        cumulative: int,
        expiry: int,
        signature: str,
        redeemed: int,
        due_at: int,
    ) -> bool:
        """Keeps the voucher if it is the session's highest (for this provider); the row's
        due time only moves earlier. True when it was kept."""
        ts = now()
        row = {
            "session": session,
            "provider_id": provider_id,
            "signer": signer,
            "cumulative": cumulative,
            "expiry": expiry,
            "signature": signature,
            "redeemed": redeemed,
            "due_at": due_at,
            "lease_until": 0,
            "updated_at": ts,
        }
        stmt = self._insert(t).values(**row)
        stmt = stmt.on_conflict_do_update(
            index_elements=[t.c.session],
            set_={
                "cumulative": cumulative,
                "expiry": expiry,
                "signature": signature,
                "signer": signer,
                "due_at": sa.func.min(t.c.due_at, due_at)
                if self.dialect == "sqlite"
                else sa.func.least(t.c.due_at, due_at),
                "updated_at": ts,
            },
            where=(t.c.cumulative < cumulative) & (t.c.provider_id == provider_id),
        )
        async with self.engine.begin() as conn:
            res = await conn.execute(stmt.returning(t.c.session))
            return res.first() is not None

    async def pending(self, limit: int = 1000) -> list[HeldVoucher]:
        """Sessions whose highest voucher is above what was redeemed, soonest due first."""
        q = sa.select(t).where(t.c.cumulative > t.c.redeemed).order_by(t.c.due_at).limit(limit)
        async with self.engine.connect() as conn:
            return [_held(r._mapping) for r in await conn.execute(q)]

    async def claim(self, owner: str, sessions: Sequence[str], lease_secs: int) -> list[str]:
        """Leases these sessions to `owner` unless another instance holds them; returns the
        ones this instance now holds."""
        if not sessions:
            return []
        ts = now()
        until = ts + lease_secs
        async with self.engine.begin() as conn:
            await conn.execute(
                t.update()
                .where(t.c.session.in_(sorted(sessions)) & (t.c.lease_until <= ts))
                .values(lease_owner=owner, lease_until=until)
            )
            held = await conn.execute(
                sa.select(t.c.session).where(
                    t.c.session.in_(list(sessions))
                    & (t.c.lease_owner == owner)
                    & (t.c.lease_until == until)
                )
            )
            return [r.session for r in held]

    async def redeemed(self, session: str, cumulative: int, owner: str | None = None) -> None:
        """Records that the chain redeemed `session` up to `cumulative`, and frees it."""
        where = t.c.session == session
        if owner is not None:
            where &= t.c.lease_owner == owner
        async with self.engine.begin() as conn:
            await conn.execute(
                t.update()
                .where(where & (t.c.redeemed < cumulative))
                .values(redeemed=cumulative, last_error=None)
            )
            await conn.execute(t.update().where(where).values(lease_owner=None, lease_until=0))

    async def give_back(
        self, sessions: Sequence[str], owner: str, error: str | None, retry_in: int = 0
    ) -> None:
        """Frees `owner`'s leases on `sessions`, recording `error`; with `retry_in`, they are
        not due again for that many seconds."""
        if not sessions:
            return
        values: dict[str, Any] = {"lease_owner": None, "lease_until": 0, "last_error": error}
        if retry_in:
            values["due_at"] = now() + retry_in
        async with self.engine.begin() as conn:
            await conn.execute(
                t.update()
                .where(t.c.session.in_(list(sessions)) & (t.c.lease_owner == owner))
                .values(**values)
            )

    async def of_provider(self, provider_id: str, limit: int = 100) -> list[HeldVoucher]:
        q = (
            sa.select(t)
            .where(t.c.provider_id == provider_id)
            .order_by(t.c.updated_at.desc())
            .limit(limit)
        )
        async with self.engine.connect() as conn:
            return [_held(r._mapping) for r in await conn.execute(q)]
