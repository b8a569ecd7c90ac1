from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest
from psycopg import sql


@pytest.fixture
def pg_table(request: pytest.FixtureRequest) -> Iterator[tuple[str, str]]:
    """(postgres_url, table): a replay table name of the test's own (the stores create it),
    dropped afterwards."""
    url: str = request.getfixturevalue("postgres_url")
    table = f"used_proofs_{uuid.uuid4().hex[:12]}"
    yield url, table
    with psycopg.connect(url, autocommit=True) as db:
        db.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(table)))
