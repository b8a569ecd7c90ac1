"""A request whose caller is cancelled runs to its end (`RunsToTheEnd`, in the facilitator's
app): cut off inside a SQLite write transaction, it would leave the write lock held by an
abandoned connection, and the next writer would wait out the busy timeout (10 s) and
answer 503. This is what the in-process gate's reporter did at close, under load."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from svcpay.facilitator import db
from svcpay.facilitator.app import RunsToTheEnd

pytestmark = pytest.mark.anyio
SLOW = "WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r WHERE i < 400000) "
SLOW += "SELECT count(*) FROM r"


async def test_a_cancelled_caller_leaves_the_database_writable(tmp_path: Path) -> None:
    engine = db.create_engine(f"sqlite:///{tmp_path / 'f.db'}")
    async with engine.begin() as conn:
        await conn.execute(sa.text("CREATE TABLE t (x INTEGER)"))
    inside = asyncio.Event()

    async def write(request: Request) -> JSONResponse:
        async with engine.begin() as conn:
            await conn.execute(sa.text("INSERT INTO t VALUES (1)"))
            inside.set()
            for _ in range(5):  # a transaction that takes a while, as one does under load
                await conn.execute(sa.text(SLOW))
        return JSONResponse({})

    app = Starlette(routes=[Route("/w", write, methods=["POST"])],
                    middleware=[Middleware(RunsToTheEnd)])  # fmt: skip
    http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://f")
    try:
        caller = asyncio.create_task(http.post("/w"))
        await inside.wait()
        caller.cancel()  # the caller goes away mid-transaction
        with pytest.raises(asyncio.CancelledError):
            await caller
        # The next writer gets the lock once that transaction ends, not after 10 s of
        # waiting ("database is locked").
        async with engine.begin() as conn:
            await conn.execute(sa.text("INSERT INTO t VALUES (2)"))
        async with engine.connect() as conn:
            rows = (await conn.execute(sa.text("SELECT x FROM t ORDER BY x"))).scalars()
            assert list(rows) == [1, 2]  # the abandoned request committed its work
    finally:
        await http.aclose()
        await engine.dispose()
