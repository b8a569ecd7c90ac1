"""A settlement records the transfer fee a Token-2022 fee mint withheld from it (docs/adr/
0031): `amount` is what the payer sent (gross), `fee` what the mint withheld in payTo (NULL
for a mint without a transfer fee), so what payTo received is `amount - fee`; proofs and
payment.settled events are rebuilt from the row.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

Amount = sa.Numeric(20, 0).with_variant(sa.BigInteger(), "sqlite")


def upgrade() -> None:
    with op.batch_alter_table("settlements") as batch:
        batch.add_column(sa.Column("fee", Amount))


def downgrade() -> None:
    with op.batch_alter_table("settlements") as batch:
        batch.drop_column("fee")
