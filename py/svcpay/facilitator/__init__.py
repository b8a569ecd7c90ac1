"""The facilitator: settles one-time payments on chain and signs proofs (spec 4.2).

Needs the 'facilitator' extra (its HTTP API, storage and migrations); PostgreSQL needs
'postgres' as well, the analytics chart 'charts'.

Layer 3 (docs/adr/0041): it imports `svcpay.schemes` (each scheme's facilitator
side), `svcpay.program`, `svcpay.protocol`, `svcpay.rpc` and the root modules, never the
gate, the paying client or the drop-in validator (its own layer); only `svcpay.cli`
(`svcpay facilitator`, `svcpay analytics`) imports it. Inside, `store` (the durable state)
is below the rest; `api` and `dashboard` (the HTTP surfaces) are composed by `app` alone.
"""

from svcpay._extras import require

require("svcpay.facilitator", ["facilitator"], ["sqlalchemy", "alembic", "aiosqlite", "starlette"])
