"""The `postgres_url` fixture: one private PostgreSQL server per test session.

tests/conftest.py imports it. SVCPAY_TEST_POSTGRES_URL names a server to use instead (its
database must exist; tests make their own tables). Without PostgreSQL installed the fixture
fails, never skips: scripts/test installs it (scripts/postgres-ensure) first.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.support.postgres import PostgresCluster, PostgresError, find_bindir

URL_ENV = "SVCPAY_TEST_POSTGRES_URL"


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """`postgresql://postgres@127.0.0.1:PORT/svcpay_test`, an empty database."""
    if url := os.environ.get(URL_ENV):
        yield url
        return
    if find_bindir() is None:
        pytest.fail(
            f"PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/initdb): "
            f"run scripts/postgres-ensure (or set {URL_ENV})",
            pytrace=False,
        )
    cluster = PostgresCluster()
    try:
        cluster.start()
    except PostgresError as e:
        pytest.fail(str(e), pytrace=False)
    try:
        yield cluster.url
    finally:
        cluster.stop()
