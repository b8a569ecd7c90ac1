"""Settlements record the scheme that settled them: svcpay's /authorize ("svcpay", which
answers a repeat with the same proof) or x402's /settle ("x402-exact", which refuses a
repeat as duplicate_settlement); a transaction settled by one is never settled by the other.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("settlements") as batch:
        batch.add_column(
            sa.Column("scheme", sa.String(16), nullable=False, server_default="svcpay")
        )


def downgrade() -> None:
    with op.batch_alter_table("settlements") as batch:
        batch.drop_column("scheme")
