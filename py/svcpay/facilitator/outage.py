"""Outages of the facilitator's two dependencies, the database and the RPC node.

`outage(e)` tells an exception that means "the database (or the RPC node) cannot answer
now" from every other failure: the routes answer it with a JSON 503 and `Retry-After`
(never a 500), and the background passes end cleanly and retry after a backoff.

`Dependencies` holds what this process last saw of each: one log line when one goes, one
when it is back, nothing per failed request or pass in between (the tracebacks go to the
debug level, which `--log-level debug` shows). Requests and background loops report to the
same object, so an outage is one line whichever noticed it first (docs/adr/0023).
"""

from __future__ import annotations

import logging
import sqlite3
import time
from dataclasses import dataclass

import sqlalchemy.exc

from svcpay.rpc_errors import rpc_unreachable

log = logging.getLogger("svcpay.facilitator")

DATABASE = "database"
RPC = "rpc"
# What a 503 tells a client to wait: long enough for a restart, short enough to pay soon.
RETRY_AFTER_SECS = 2

_DB_ERRORS: tuple[type[BaseException], ...] = (
    sqlalchemy.exc.OperationalError,  # unreachable, restarting, locked, a deadlock victim
    sqlalchemy.exc.InterfaceError,  # the connection broke under the driver
    sqlalchemy.exc.TimeoutError,  # no pooled connection in time
    sqlite3.OperationalError,
)
try:  # the 'postgres' extra
    import psycopg

    _DB_ERRORS += (psycopg.OperationalError, psycopg.InterfaceError)
except ImportError:  # pragma: no cover - SQLite-only installs
    pass


@dataclass(frozen=True)
class Outage:
    dependency: str  # DATABASE or RPC
    reason: str  # one line, for the log and the 503's message


def outage(e: BaseException) -> Outage | None:
    """The outage `e` (or an exception it was raised from) reports, or None when `e` is
    something else: a bug, a refusal, an answer the node or the database gave."""
    seen: set[int] = set()
    current: BaseException | None = e
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, _DB_ERRORS) or (
            isinstance(current, sqlalchemy.exc.DBAPIError) and current.connection_invalidated
        ):
            return Outage(DATABASE, _first_line(current))
        reason = rpc_unreachable(current)
        if reason is not None:
            return Outage(RPC, reason)
        current = current.__cause__ or current.__context__
    return None


def _first_line(e: BaseException) -> str:
    text = str(getattr(e, "orig", None) or e).strip().splitlines()
    return f"{type(e).__name__}: {text[0]}"[:300] if text else type(e).__name__


class Dependency:
    """One dependency's reachability as this process sees it."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.down_since: float | None = None
        self.outages = 0

    @property
    def down(self) -> bool:
        return self.down_since is not None

    def failed(self, reason: str) -> None:
        """A request or pass could not reach it: logged only when it was up until now."""
        if self.down_since is None:
            self.down_since = time.monotonic()
            self.outages += 1
            log.warning(
                "%s unreachable: %s (requests answer 503, background work retries until it "
                "is back)",
                self.name,
                reason,
            )

    def answered(self, started: float) -> bool:
        """Work that began at `started` (monotonic) reached it. That proves it back only if
        the work began after the outage was noticed (work already in flight says nothing).
        Returns whether it counts as reachable."""
        if self.down_since is None:
            return True
        if started < self.down_since:
            return False
        log.warning("%s back after %.1f s", self.name, time.monotonic() - self.down_since)
        self.down_since = None
        return True


class Dependencies:
    """The database's and the RPC node's state, shared by a facilitator's routes and
    background loops."""

    def __init__(self) -> None:
        self.database = Dependency(DATABASE)
        self.rpc = Dependency(RPC)

    def of(self, found: Outage) -> Dependency:
        return self.database if found.dependency == DATABASE else self.rpc

    def failed(self, e: BaseException) -> Outage | None:
        """Records `e` if it is an outage (logging a state change, and the traceback at the
        debug level); returns it, or None for any other failure."""
        found = outage(e)
        if found is not None:
            self.of(found).failed(found.reason)
            log.debug("%s outage", found.dependency, exc_info=e)
        return found

    def answered(self, started: float, *, database: bool = True, rpc: bool = True) -> None:
        if database:
            self.database.answered(started)
        if rpc:
            self.rpc.answered(started)
