"""Sessions (docs/adr/0025): the highest voucher a provider's gate reported per session, for
the redeemer; session events name their session, so later ones find their provider.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

Amount = sa.Numeric(20, 0).with_variant(sa.BigInteger(), "sqlite")


def upgrade() -> None:
    with op.batch_alter_table("events") as batch:
        batch.add_column(sa.Column("session", sa.String(64)))
    op.create_index("ix_events_session", "events", ["session"])
    op.create_table(
        "session_vouchers",
        sa.Column("session", sa.String(64), primary_key=True),
        sa.Column("provider_id", sa.String(40), sa.ForeignKey("providers.id"), nullable=False),
        sa.Column("signer", sa.String(64), nullable=False),
        sa.Column("cumulative", Amount, nullable=False),
        sa.Column("expiry", sa.BigInteger, nullable=False),
        sa.Column("signature", sa.String(100), nullable=False),
        sa.Column("redeemed", Amount, nullable=False),
        sa.Column("due_at", sa.BigInteger, nullable=False),
        sa.Column("lease_owner", sa.String(64)),
        sa.Column("lease_until", sa.BigInteger, nullable=False),
        sa.Column("last_error", sa.Text),
        sa.Column("updated_at", sa.BigInteger, nullable=False),
    )
    op.create_index("ix_session_vouchers_due", "session_vouchers", ["due_at"])


def downgrade() -> None:
    op.drop_index("ix_session_vouchers_due", table_name="session_vouchers")
    op.drop_table("session_vouchers")
    op.drop_index("ix_events_session", table_name="events")
    with op.batch_alter_table("events") as batch:
        batch.drop_column("session")
