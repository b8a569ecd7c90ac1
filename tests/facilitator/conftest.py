"""`database_url`: each facilitator test runs on SQLite and on PostgreSQL, in a database of
its own; `store`: a Store on either."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from sqlalchemy.engine import make_url

from svcpay.facilitator.store import Store


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'facilitator.db'}"
        return
    server = make_url(request.getfixturevalue("postgres_url"))
    name = f"t_{uuid.uuid4().hex[:12]}"
    admin = server.set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    yield server.set(database=name).render_as_string(hide_password=False)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(params=["sqlite", "postgresql"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    """A store on SQLite, or on PostgreSQL in a schema of its own (analytics' tests)."""
    if request.param == "sqlite":
        s = Store.open(f"sqlite:///{tmp_path}/a.db")
        try:
            yield s
        finally:
            await s.close()
        return
    base: str = request.getfixturevalue("postgres_url")
    schema = f"analytics_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(base, autocommit=True) as db:
        db.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    url = make_url(base).update_query_dict({"options": f"-csearch_path={schema}"})
    s = Store.open(url)
    try:
        yield s
    finally:
        await s.close()
        with psycopg.connect(base, autocommit=True) as db:
            db.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))
