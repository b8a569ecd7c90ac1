"""An event records the mint it moved, so that analytics add amounts per mint and never
across mints (docs/adr/0044): plan.created and session.opened name their mint,
payment.settled its `token`, and every other event takes its plan's or its session's.
Existing events are filled in the same way, oldest first.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-27
"""

from __future__ import annotations

import json

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

BATCH = 1000


def _own_mint(event_type: str, data: str) -> str | None:
    try:
        parsed = json.loads(data)
    except ValueError:
        return None
    if not isinstance(parsed, dict):
        return None
    value = parsed.get("token") if event_type == "payment.settled" else parsed.get("mint")
    return value if isinstance(value, str) and len(value) <= 64 else None


def upgrade() -> None:
    with op.batch_alter_table("events") as batch:
        batch.add_column(sa.Column("mint", sa.String(64)))
    # Each new event of a plan looks up the plan's mint among its events (once per batch).
    op.create_index("ix_events_plan", "events", ["plan"])
    conn = op.get_bind()
    events = sa.table(
        "events",
        sa.column("seq", sa.BigInteger),
        sa.column("type", sa.String),
        sa.column("plan", sa.String),
        sa.column("session", sa.String),
        sa.column("data", sa.Text),
        sa.column("mint", sa.String),
    )
    by_plan: dict[str, str] = {}
    by_session: dict[str, str] = {}
    updates: list[dict[str, object]] = []
    rows = conn.execute(
        sa.select(
            events.c.seq, events.c.type, events.c.plan, events.c.session, events.c.data
        ).order_by(events.c.seq)
    )
    for seq, event_type, plan, session, data in rows:
        mint = _own_mint(event_type, data)
        if mint is None and plan is not None:
            mint = by_plan.get(plan)
        if mint is None and session is not None:
            mint = by_session.get(session)
        if mint is None:
            continue
        if plan is not None:
            by_plan.setdefault(plan, mint)
        if session is not None:
            by_session.setdefault(session, mint)
        updates.append({"s": seq, "m": mint})
    update = events.update().where(events.c.seq == sa.bindparam("s")).values(mint=sa.bindparam("m"))
    for i in range(0, len(updates), BATCH):
        conn.execute(update, updates[i : i + BATCH])


def downgrade() -> None:
    op.drop_index("ix_events_plan", table_name="events")
    with op.batch_alter_table("events") as batch:
        batch.drop_column("mint")
