"""Metered usage reports: one per (provider, idempotency key), stored before the deduction
and with its signed transaction before that is sent."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from svcpay.facilitator.db import usage_reports
from svcpay.facilitator.store._base import Part, amount_int, new_id, now


class Usage(Part):
    async def begin(
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
        return amount_int(dict(got._mapping)), created

    async def finish(self, report_id: str, *, signature: str | None, error: str | None) -> None:
        async with self.engine.begin() as conn:
            await conn.execute(
                usage_reports.update()
                .where(usage_reports.c.id == report_id)
                .values(status="failed" if error else "deducted", signature=signature, error=error)
            )

    async def sent(
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

    async def get(self, report_id: str) -> dict[str, Any] | None:
        async with self.engine.connect() as conn:
            got = (
                await conn.execute(sa.select(usage_reports).where(usage_reports.c.id == report_id))
            ).one_or_none()
        return amount_int(dict(got._mapping)) if got else None

    async def pending(self) -> list[dict[str, Any]]:
        async with self.engine.connect() as conn:
            rows = await conn.execute(
                sa.select(usage_reports).where(usage_reports.c.status == "pending")
            )
            return [amount_int(dict(r._mapping)) for r in rows]
