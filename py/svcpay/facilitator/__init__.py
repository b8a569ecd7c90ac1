"""The facilitator: settles one-time payments on chain and signs proofs (spec 4.2).

Needs the 'facilitator' extra (its HTTP API, storage and migrations); PostgreSQL needs
'postgres' as well, the analytics chart 'charts'."""

from svcpay._extras import require

require("svcpay.facilitator", ["facilitator"], ["sqlalchemy", "alembic", "aiosqlite", "starlette"])
