"""An event records the transfer fee a Token-2022 fee mint withheld from its payment (docs/
adr/0030, 0031): `amount` stays the gross the payer sent, `fee` what the mint withheld (NULL
for every other mint), so analytics report gross, fee and net.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

Amount = sa.Numeric(20, 0).with_variant(sa.BigInteger(), "sqlite")


def upgrade() -> None:
    with op.batch_alter_table("events") as batch:
        batch.add_column(sa.Column("fee", Amount))


def downgrade() -> None:
    with op.batch_alter_table("events") as batch:
        batch.drop_column("fee")
