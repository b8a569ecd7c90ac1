"""Telling an outage of the database or the RPC node from every other failure, and logging
each outage once: a pass already in flight when the outage was noticed does not announce
that the dependency is back (it would log a false "back", then a second "unreachable")."""

from __future__ import annotations

import logging
import sqlite3
import time

import httpx
import pytest
import sqlalchemy.exc
from solana.exceptions import SolanaRpcException

from svcpay.facilitator.errors import SettlementError
from svcpay.facilitator.outage import DATABASE, RPC, Dependencies, Dependency, outage


@pytest.mark.parametrize("name", [DATABASE, RPC])
def test_only_work_begun_after_the_outage_proves_it_back(
    caplog: pytest.LogCaptureFixture, name: str
) -> None:
    caplog.set_level(logging.WARNING, logger="svcpay.facilitator")
    dep = Dependency(name)
    before = time.monotonic()
    assert dep.answered(before)  # nothing was down: nothing to say
    dep.failed("ConnectError")
    dep.failed("ConnectError")  # one line per outage, not per attempt

    assert not dep.answered(before)  # in flight before the outage was noticed
    assert dep.down
    assert dep.answered(time.monotonic())
    assert not dep.down and dep.outages == 1

    lines = [r.getMessage() for r in caplog.records]
    assert [line.split(":")[0].split(" after")[0] for line in lines] == [
        f"{name} unreachable",
        f"{name} back",
    ]


def _raised_from(error: BaseException, cause: BaseException) -> BaseException:
    try:
        try:
            raise cause
        except BaseException as inner:
            raise error from inner
    except BaseException as outer:
        return outer


def test_outages_are_told_from_other_failures() -> None:
    refused = sqlalchemy.exc.OperationalError("SELECT 1", {}, OSError("connection refused"))
    assert (found := outage(refused)) is not None and found.dependency == DATABASE
    assert "connection refused" in found.reason
    locked = outage(sqlite3.OperationalError("database is locked"))
    assert locked is not None and locked.dependency == DATABASE
    cause = httpx.ConnectError("refused")
    transport = SolanaRpcException(cause, print, None, "GetSlot")
    transport.__cause__ = cause
    assert (found := outage(transport)) is not None and found.dependency == RPC
    wrapped = _raised_from(RuntimeError("pass ended"), refused)  # found through the chain
    assert (found := outage(wrapped)) is not None and found.dependency == DATABASE

    integrity = sqlalchemy.exc.IntegrityError("INSERT", {}, ValueError("duplicate key"))
    assert outage(integrity) is None  # an answer the database gave, not an outage
    assert outage(SettlementError("SettlementFailed", "failed on chain", 422)) is None
    assert outage(ValueError("a bug")) is None


def test_the_shared_state_logs_the_database_and_the_rpc_apart(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="svcpay.facilitator")
    deps = Dependencies()
    db_down = sqlalchemy.exc.OperationalError("SELECT 1", {}, OSError("connection refused"))
    for _ in range(50):  # fifty requests during one outage
        assert deps.failed(db_down) is not None
    assert deps.failed(ValueError("a bug")) is None
    assert deps.database.down and not deps.rpc.down
    assert [r.getMessage().split(":")[0] for r in caplog.records] == ["database unreachable"]
    assert not any(r.exc_info for r in caplog.records)
