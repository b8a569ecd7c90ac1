"""What every part of the store shares: the engine, its dialect's upsert, ids and times."""

from __future__ import annotations

import hashlib
import time
import uuid
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncEngine


def now() -> int:
    return int(time.time())


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:24]}"


def hash_key(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def amount_int(row: dict[str, Any]) -> dict[str, Any]:
    """`row` with its amounts as ints (PostgreSQL's NUMERIC comes back a Decimal)."""
    for key in ("amount", "fee"):
        if row.get(key) is not None:
            row[key] = int(row[key])
    return row


class Part:
    """One concern of the store: its queries over the shared engine and tables."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self.dialect = engine.dialect.name

    def _insert(self, table: sa.Table) -> Any:
        """INSERT with the dialect's ON CONFLICT clauses."""
        return (postgresql.insert if self.dialect == "postgresql" else sqlite.insert)(table)
