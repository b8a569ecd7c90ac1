"""The facilitator's database: SQLite by default, PostgreSQL by URL (docs/adr/0009).

`database_url("sqlite:///facilitator.db")` or `"postgresql://user@host/db"`; the schema is
created and upgraded by Alembic (`migrate(url)`, migrations in `facilitator/migrations`),
never by `create_all`. At run time the service talks to it through SQLAlchemy's async
engine: aiosqlite for SQLite (WAL, one writer, a busy timeout), psycopg 3 for PostgreSQL.

Times are unix seconds (INTEGER), token amounts base units (NUMERIC(20, 0) on PostgreSQL:
a u64 fits; INTEGER on SQLite).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from svcpay._extras import require
from svcpay.protocol.replay import use_wal

metadata = sa.MetaData()
CONNECT_TIMEOUT_SECS = 5
# NUMERIC holds any u64 on PostgreSQL; SQLite would round a NUMERIC through a float, so
# there amounts are 64-bit INTEGERs (up to 2^63 - 1 base units).
Amount = sa.Numeric(20, 0).with_variant(sa.BigInteger(), "sqlite")

settlements = sa.Table(
    "settlements",
    metadata,
    sa.Column("signature", sa.String(100), primary_key=True),
    sa.Column("network", sa.String(64), nullable=False),
    sa.Column("payer", sa.String(64), nullable=False),
    sa.Column("pay_to", sa.String(64), nullable=False),
    sa.Column("token", sa.String(64), nullable=False),
    sa.Column("amount", Amount, nullable=False),
    sa.Column("memo", sa.Text, nullable=False),
    sa.Column("transaction", sa.Text, nullable=False),  # base64, fee payer's signature on
    sa.Column("status", sa.String(16), nullable=False),  # sending | settled | failed
    sa.Column("issued_at", sa.BigInteger, nullable=False),
    sa.Column("proof", sa.Text),
    sa.Column("error", sa.Text),
    sa.Column("created_at", sa.BigInteger, nullable=False),
    sa.Column("settled_at", sa.BigInteger),
    # svcpay (/authorize) | x402-exact (/settle); migration 0003
    sa.Column("scheme", sa.String(16), nullable=False, server_default="svcpay"),
    # what a transfer-fee mint withheld of `amount` (the gross) in pay_to; NULL for a mint
    # without a transfer fee; migration 0005
    sa.Column("fee", Amount),
)

providers = sa.Table(
    "providers",
    metadata,
    sa.Column("id", sa.String(40), primary_key=True),
    sa.Column("name", sa.String(200), nullable=False),
    sa.Column("created_at", sa.BigInteger, nullable=False),
)

api_keys = sa.Table(
    "api_keys",
    metadata,
    sa.Column("id", sa.String(40), primary_key=True),
    sa.Column("provider_id", sa.String(40), sa.ForeignKey("providers.id"), nullable=False),
    sa.Column("key_hash", sa.String(64), nullable=False),
    sa.Column("label", sa.String(200), nullable=False),
    sa.Column("created_at", sa.BigInteger, nullable=False),
    sa.Column("revoked_at", sa.BigInteger),
)

provider_resources = sa.Table(
    "provider_resources",
    metadata,
    sa.Column("address", sa.String(64), primary_key=True),
    sa.Column("kind", sa.String(16), nullable=False),  # plan | payTo
    sa.Column("provider_id", sa.String(40), sa.ForeignKey("providers.id"), nullable=False),
)

events = sa.Table(
    "events",
    metadata,
    sa.Column("seq", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True),
    sa.Column("id", sa.String(40), nullable=False, unique=True),
    sa.Column("type", sa.String(64), nullable=False),
    sa.Column("created_at", sa.BigInteger, nullable=False),
    sa.Column("source", sa.String(16), nullable=False),  # chain | facilitator
    sa.Column("chain_key", sa.String(120), unique=True),  # signature:index, dedupes chain events
    sa.Column("provider_id", sa.String(40)),
    sa.Column("plan", sa.String(64)),
    sa.Column("subscription", sa.String(64)),
    sa.Column("mode", sa.String(16)),  # one-time | subscription | metered
    sa.Column("amount", Amount),
    sa.Column("data", sa.Text, nullable=False),
    sa.Index("ix_events_created_at", "created_at"),
    sa.Index("ix_events_subscription", "subscription"),  # migration 0002
    sa.Index("ix_events_provider_seq", "provider_id", "seq"),  # migration 0002
    sa.Column("session", sa.String(64)),  # migration 0004: a session event's session
    sa.Index("ix_events_session", "session"),
    sa.Column("fee", Amount),  # migration 0006: withheld by a transfer-fee mint (else NULL)
    sa.Column("mint", sa.String(64)),  # migration 0007: the mint it moved (plan's, session's)
    sa.Index("ix_events_plan", "plan"),  # migration 0007: a plan's mint, found as events come
)

webhook_endpoints = sa.Table(
    "webhook_endpoints",
    metadata,
    sa.Column("id", sa.String(40), primary_key=True),
    sa.Column("provider_id", sa.String(40), sa.ForeignKey("providers.id"), nullable=False),
    sa.Column("url", sa.Text, nullable=False),
    sa.Column("secret", sa.String(100), nullable=False),
    sa.Column("event_types", sa.Text, nullable=False),  # JSON list; ["*"] for all
    sa.Column("created_at", sa.BigInteger, nullable=False),
    sa.Column("disabled_at", sa.BigInteger),
)

webhook_deliveries = sa.Table(
    "webhook_deliveries",
    metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True),
    sa.Column("endpoint_id", sa.String(40), sa.ForeignKey("webhook_endpoints.id"), nullable=False),
    sa.Column("event_id", sa.String(40), nullable=False),
    sa.Column("status", sa.String(16), nullable=False),  # pending | delivered | dead
    sa.Column("attempts", sa.Integer, nullable=False),
    sa.Column("next_attempt_at", sa.BigInteger, nullable=False),
    sa.Column("locked_until", sa.BigInteger, nullable=False),
    sa.Column("last_status", sa.Integer),
    sa.Column("last_error", sa.Text),
    sa.Column("created_at", sa.BigInteger, nullable=False),
    sa.Column("delivered_at", sa.BigInteger),
    sa.UniqueConstraint("endpoint_id", "event_id"),
    sa.Index("ix_webhook_deliveries_due", "status", "next_attempt_at"),
)

usage_reports = sa.Table(
    "usage_reports",
    metadata,
    sa.Column("id", sa.String(40), primary_key=True),
    sa.Column("provider_id", sa.String(40), sa.ForeignKey("providers.id"), nullable=False),
    sa.Column("idempotency_key", sa.String(200), nullable=False),
    sa.Column("subscription", sa.String(64), nullable=False),
    sa.Column("amount", Amount, nullable=False),
    sa.Column("status", sa.String(16), nullable=False),  # pending | deducted | failed
    sa.Column("signature", sa.String(100)),
    sa.Column("transaction", sa.Text),  # base64, stored before it is sent
    sa.Column("sent_at", sa.BigInteger),
    sa.Column("error", sa.Text),
    sa.Column("created_at", sa.BigInteger, nullable=False),
    sa.UniqueConstraint("provider_id", "idempotency_key"),
)

crank_leases = sa.Table(
    "crank_leases",
    metadata,
    sa.Column("subscription", sa.String(64), primary_key=True),
    sa.Column("owner", sa.String(64), nullable=False),
    sa.Column("lease_until", sa.BigInteger, nullable=False),
    sa.Column("attempts", sa.Integer, nullable=False),
    sa.Column("next_attempt_at", sa.BigInteger, nullable=False),
    sa.Column("last_error", sa.Text),
)

crank_runs = sa.Table(
    "crank_runs",
    metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True),
    sa.Column("instance", sa.String(64), nullable=False),
    sa.Column("started_at", sa.BigInteger, nullable=False),
    sa.Column("finished_at", sa.BigInteger),
    sa.Column("summary", sa.Text),
)

# The highest voucher a provider's gate reported per session, and what the chain redeemed of
# it; a redeemer leases a row while its redeem is on its way (migration 0004).
session_vouchers = sa.Table(
    "session_vouchers",
    metadata,
    sa.Column("session", sa.String(64), primary_key=True),
    sa.Column("provider_id", sa.String(40), sa.ForeignKey("providers.id"), nullable=False),
    sa.Column("signer", sa.String(64), nullable=False),
    sa.Column("cumulative", Amount, nullable=False),
    sa.Column("expiry", sa.BigInteger, nullable=False),  # the voucher's; 0 for none
    sa.Column("signature", sa.String(100), nullable=False),  # base58
    sa.Column("redeemed", Amount, nullable=False),
    sa.Column("due_at", sa.BigInteger, nullable=False),  # redeem by then at the latest
    sa.Column("lease_owner", sa.String(64)),
    sa.Column("lease_until", sa.BigInteger, nullable=False),
    sa.Column("last_error", sa.Text),
    sa.Column("updated_at", sa.BigInteger, nullable=False),
    sa.Index("ix_session_vouchers_due", "due_at"),
)

cursors = sa.Table(
    "cursors",
    metadata,
    sa.Column("name", sa.String(64), primary_key=True),
    sa.Column("value", sa.Text, nullable=False),
)


class DatabaseUrlError(ValueError):
    pass


def _url(url: str | URL) -> URL:
    try:
        parsed = make_url(url)
    except Exception as e:  # sqlalchemy raises ArgumentError with the bad URL in it
        raise DatabaseUrlError(f"not a database URL: {url!r}") from e
    backend = parsed.get_backend_name()
    if backend not in ("sqlite", "postgresql"):
        raise DatabaseUrlError(
            f"unsupported database {backend!r}: use sqlite:///path or postgresql://..."
        )
    if backend == "postgresql":
        require("the facilitator on PostgreSQL", ["postgres"], ["psycopg"])
    return parsed


def sync_url(url: str | URL) -> URL:
    """The URL with the synchronous driver (migrations): sqlite3, psycopg."""
    u = _url(url)
    return u.set(drivername="sqlite" if u.get_backend_name() == "sqlite" else "postgresql+psycopg")


def async_url(url: str | URL) -> URL:
    """The URL with the async driver (service): aiosqlite, psycopg (async)."""
    u = _url(url)
    name = "sqlite+aiosqlite" if u.get_backend_name() == "sqlite" else "postgresql+psycopg"
    return u.set(drivername=name)


def redacted(url: str | URL) -> str:
    """For logs: the URL without its password."""
    return _url(url).render_as_string(hide_password=True)


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA busy_timeout=10000")
    use_wal(cursor.execute, 10)
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def create_engine(url: str | URL) -> AsyncEngine:
    u = async_url(url)
    if u.get_backend_name() == "sqlite":
        if u.database and u.database != ":memory:":
            Path(u.database).parent.mkdir(parents=True, exist_ok=True)
        # One connection: SQLite has one writer at a time, and writers queueing here are
        # served in order, where several connections would sleep in SQLite's busy handler.
        engine = create_async_engine(u, pool_size=1, max_overflow=0, pool_timeout=60)
        event.listen(engine.sync_engine, "connect", _sqlite_pragmas)
        return engine
    # A server that is down refuses at once; one that hangs gets CONNECT_TIMEOUT_SECS, so
    # a request answers 503 in seconds instead of waiting on a dead address.
    return create_async_engine(
        u,
        pool_size=10,
        max_overflow=10,
        pool_pre_ping=True,
        pool_timeout=CONNECT_TIMEOUT_SECS,
        connect_args={"connect_timeout": CONNECT_TIMEOUT_SECS},
    )


def _sqlite_directory(u: URL) -> None:
    """SQLite creates the file, not its directory (the XDG data directory may be new)."""
    if u.get_backend_name() == "sqlite" and u.database and u.database != ":memory:":
        Path(u.database).expanduser().parent.mkdir(parents=True, exist_ok=True)


def migrate(url: str | URL, revision: str = "head") -> None:
    """Brings the schema at `url` up to `revision` with Alembic (idempotent)."""
    from alembic import command
    from alembic.config import Config

    u = sync_url(url)
    _sqlite_directory(u)
    config = Config()
    config.set_main_option("script_location", str(Path(__file__).parent / "migrations"))
    config.attributes["url"] = u
    command.upgrade(config, revision)


def current_revision(url: str | URL) -> str | None:
    from alembic.runtime.migration import MigrationContext

    u = sync_url(url)
    _sqlite_directory(u)
    engine = sa.create_engine(u)
    try:
        with engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()
    finally:
        engine.dispose()
