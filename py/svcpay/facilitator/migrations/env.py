"""Alembic environment: the URL comes from `svcpay.facilitator.db.migrate` (config
attribute "url"), or from SVCPAY_DATABASE_URL when run through the `alembic` command."""

from __future__ import annotations

import os

import sqlalchemy as sa
from alembic import context

from svcpay.facilitator.db import metadata, sync_url

config = context.config
url = config.attributes.get("url") or sync_url(
    os.environ.get("SVCPAY_DATABASE_URL", "sqlite:///facilitator.db")
)
engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
with engine.connect() as connection:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        render_as_batch=connection.dialect.name == "sqlite",
    )
    with context.begin_transaction():
        context.run_migrations()
engine.dispose()
