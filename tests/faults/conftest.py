"""Faults injected into several running facilitators (issue 28); the harness is
tests/support/fleet.py."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.fleet import Receiver
from tests.support.postgres import PostgresCluster


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


@pytest.fixture
def durable_postgres() -> Iterator[PostgresCluster]:
    with PostgresCluster(durable=True) as cluster:
        yield cluster
