"""An event records the mint it moved, so that analytics add amounts per mint and never
across mints (docs/adr/0044): plan.created and session.opened name their mint,
payment.settled its `token`, and every other event takes its plan's or its session's.
Existing events are filled in the same way, read a page at a time. It all runs in the
migration's one transaction, which holds the events table (on PostgreSQL, writes to it wait):
run `svcpay facilitator migrate` before starting the new version on a large database.

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

PAGE = 5000  # rows read at a time: the table is never held in memory whole
OWN = ("plan.created", "session.opened", "payment.settled")  # the events naming a mint


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
    # 1. The events that name their mint, page by page; the plans' and sessions' mints.
    by_plan: dict[str, str] = {}
    by_session: dict[str, str] = {}
    update = events.update().where(events.c.seq == sa.bindparam("s")).values(mint=sa.bindparam("m"))
    last = 0
    while True:
        page = conn.execute(
            sa.select(events.c.seq, events.c.type, events.c.plan, events.c.session, events.c.data)
            .where(events.c.seq > last, events.c.type.in_(OWN))
            .order_by(events.c.seq)
            .limit(PAGE)
        ).all()
        if not page:
            break
        last = page[-1][0]
        named: list[dict[str, object]] = []
        for seq, event_type, plan, session, data in page:
            mint = _own_mint(event_type, data)
            if mint is None:
                continue
            named.append({"s": seq, "m": mint})
            if event_type == "plan.created" and plan is not None:
                by_plan.setdefault(plan, mint)
            if event_type == "session.opened" and session is not None:
                by_session.setdefault(session, mint)
        if named:
            conn.execute(update, named)
    # 2. Every other event of those plans and sessions, before or after the one naming it.
    for column, mints in ((events.c.plan, by_plan), (events.c.session, by_session)):
        for key, mint in mints.items():
            conn.execute(
                events.update().where((column == key) & events.c.mint.is_(None)).values(mint=mint)
            )


def downgrade() -> None:
    op.drop_index("ix_events_plan", table_name="events")
    with op.batch_alter_table("events") as batch:
        batch.drop_column("mint")
