"""Indexes for the event log's lookups: a subscription's plan (attributing metered usage)
and a provider's events in order (GET /v1/events).

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22
"""

from __future__ import annotations

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_events_subscription", "events", ["subscription"])
    op.create_index("ix_events_provider_seq", "events", ["provider_id", "seq"])


def downgrade() -> None:
    op.drop_index("ix_events_provider_seq", table_name="events")
    op.drop_index("ix_events_subscription", table_name="events")
