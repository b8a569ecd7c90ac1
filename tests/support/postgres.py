"""A private, throwaway PostgreSQL server for tests (no pytest here; see pg_fixture.py).

`PostgresCluster().start()` runs initdb into a temporary directory, starts `postgres` on a free
port of 127.0.0.1 (trust auth, fsync off, its unix socket in that directory) and returns
`postgresql://postgres@127.0.0.1:PORT/svcpay_test`; `stop()` kills it and removes the directory.
As root both run as the `postgres` system user (they refuse root), switched to by
subprocess itself (like `runuser -u postgres --`, without a process in between that would
turn a SIGQUIT into a 2 s SIGTERM-then-SIGKILL dance). Nothing outlives the test
process: the server has its own process group, `stop` is registered with atexit, and a
watchdog (svcpay.watchdog) kills the group if this process dies without running atexit (SIGKILL).
The binaries come from Debian's packages: scripts/postgres-ensure installs them.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Any

import psycopg

from svcpay.watchdog import GroupWatchdog

DATABASE = "svcpay_test"
SERVER_USER = "postgres"  # the system user the server runs as under root
START_TIMEOUT_SECS = 30.0


class PostgresError(RuntimeError):
    """The server could not be set up; the message says why (with the server log's tail)."""


def find_bindir() -> Path | None:
    """The newest /usr/lib/postgresql/<version>/bin that has initdb and postgres, if any."""

    def version(p: Path) -> tuple[int, ...]:
        return tuple(int(n) for n in re.findall(r"\d+", p.parent.name))

    found = [
        p
        for p in Path("/usr/lib/postgresql").glob("*/bin")
        if (p / "initdb").is_file() and (p / "postgres").is_file()
    ]
    return max(found, key=version) if found else None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PostgresCluster:
    def __init__(
        self, bindir: Path | None = None, database: str = DATABASE, *, durable: bool = False
    ) -> None:
        """`durable`: every commit is written before it is acknowledged
        (synchronous_commit=on), so a server killed mid-load loses no commit it reported;
        what crash tests need. Without it commits are acknowledged first (fast; fine where
        nothing kills the server)."""
        self.bindir = bindir or find_bindir()
        self.database = database
        self.durable = durable
        self.root: Path | None = None
        self.port = 0
        self.url = ""
        self._server: subprocess.Popen[bytes] | None = None
        self._watchdog: GroupWatchdog | None = None
        self.startup_secs = 0.0

    # -- running commands, as the server user under root -----------------------------------

    def _as_server_user(self) -> dict[str, Any]:
        """subprocess arguments: as root, the server user with only its own groups; and a
        working directory that user can read (initdb fails in /root)."""
        if os.geteuid() != 0:
            return {"cwd": self.root}
        try:
            user = pwd.getpwnam(SERVER_USER)
        except KeyError:
            raise PostgresError(
                f"running as root, but there is no {SERVER_USER!r} system user to run "
                "PostgreSQL as: run scripts/postgres-ensure"
            ) from None
        return {
            "cwd": self.root,
            "user": user.pw_uid,
            "group": user.pw_gid,
            "extra_groups": [],
            "env": dict(os.environ, HOME=user.pw_dir, USER=SERVER_USER, LOGNAME=SERVER_USER),
        }

    def _bin(self, name: str) -> str:
        assert self.bindir is not None
        return str(self.bindir / name)

    @property
    def _log(self) -> Path:
        assert self.root is not None
        return self.root / "server.log"

    def _log_tail(self, lines: int = 30) -> str:
        try:
            text = self._log.read_text(errors="replace")
        except OSError:
            return "(no server log)"
        return "\n".join(text.splitlines()[-lines:]) or "(empty server log)"

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> str:
        """Starts the server and returns its URL (to `database`, created empty)."""
        if self.url:
            return self.url
        if self.bindir is None:
            raise PostgresError(
                "PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/initdb): "
                "run scripts/postgres-ensure"
            )
        began = time.monotonic()
        atexit.register(self.stop)
        try:
            self._initdb()
            for attempt in range(3):  # the free port may be taken before the server binds it
                self.port = free_port()
                if self._run_server(last_try=attempt == 2):
                    break
            self._create_database()
        except BaseException:
            self.stop()
            raise
        self.startup_secs = time.monotonic() - began
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/{self.database}"
        return self.url

    def _initdb(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="svcpay-pg-"))
        as_user = self._as_server_user()
        (self.root / "run").mkdir()
        if "user" in as_user:  # the server user owns the whole directory
            for path in (self.root, self.root / "run"):
                os.chown(path, as_user["user"], as_user["group"])
        proc = subprocess.run(
            [
                self._bin("initdb"),
                "--pgdata",
                str(self.root / "data"),
                "--username",
                "postgres",
                "--auth",
                "trust",  # initdb's host lines are loopback only
                "--encoding",
                "UTF8",
                "--locale",
                "C",
                "--no-sync",
                "--no-instructions",
            ],
            capture_output=True,
            text=True,
            check=False,
            **as_user,
        )
        if proc.returncode != 0:
            raise PostgresError(
                f"initdb failed ({proc.returncode}) in {self.root}:\n{proc.stdout}{proc.stderr}"
            )

    def _run_server(self, *, last_try: bool) -> bool:
        """Starts the server and waits until it accepts connections. False when it exited
        because its port was taken (and `last_try` is False)."""
        assert self.root is not None
        cmd = [
            self._bin("postgres"),
            "-D",
            str(self.root / "data"),
            "-p",
            str(self.port),
            "-c",
            "listen_addresses=127.0.0.1",
            "-c",
            f"unix_socket_directories={self.root / 'run'}",
            "-c",
            "fsync=off",
            "-c",
            f"synchronous_commit={'on' if self.durable else 'off'}",
            "-c",
            "full_page_writes=off",
            "-c",
            "max_connections=200",
            "-c",
            "logging_collector=off",
        ]
        with open(self._log, "wb") as log:
            self._server = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: killed as one
                **self._as_server_user(),
            )
        self._start_watchdog(self._server.pid)
        deadline = time.monotonic() + START_TIMEOUT_SECS
        while True:
            if (code := self._server.poll()) is not None:
                self._server = None
                if not last_try and "could not bind" in self._log_tail():
                    return False
                raise PostgresError(
                    f"postgres exited ({code}) while starting; server log:\n{self._log_tail()}"
                )
            try:
                with psycopg.connect(self._url("postgres"), connect_timeout=2):
                    return True
            except psycopg.OperationalError as e:
                if time.monotonic() > deadline:
                    raise PostgresError(
                        f"postgres did not accept connections on 127.0.0.1:{self.port} within "
                        f"{START_TIMEOUT_SECS:.0f}s ({e}); server log:\n"
                        f"{self._log_tail()}"
                    ) from None
            time.sleep(0.02)

    def _start_watchdog(self, pgid: int) -> None:
        """Kills the server's group and removes its directory when this process is gone,
        however it died (atexit does not run on SIGKILL): svcpay.watchdog, with no grace.
        stop() ends it last, after the directory is gone."""
        self._stop_watchdog()
        self._watchdog = GroupWatchdog(pgid, grace=0, remove=self.root)

    def _stop_watchdog(self) -> None:
        if self._watchdog is not None:
            self._watchdog.close()
            self._watchdog = None

    def kill(self) -> None:
        """Kills the server as a crash would (SIGKILL to its process group), keeping its
        data: `restart()` brings it back on the same port."""
        server, self._server = self._server, None
        if server is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        self._stop_watchdog()

    def restart(self) -> None:
        """Starts the server again on its port and data after `kill()` (crash recovery
        replays its log)."""
        if self._server is None:
            self._run_server(last_try=True)

    def _url(self, database: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def _create_database(self) -> None:
        with psycopg.connect(self._url("postgres"), autocommit=True) as db:
            db.execute(f'CREATE DATABASE "{self.database}"')

    def stop(self) -> None:
        """Kills the server (an immediate shutdown: SIGQUIT to the postmaster, which ends its
        backends; SIGKILL to the group after 5 s) and removes its directory. Idempotent.
        The watchdog is stopped last: this process killed in between (a test run's bound on
        its teardown) still leaves neither server nor directory."""
        server, self._server = self._server, None
        if server is not None:
            try:
                server.send_signal(signal.SIGQUIT)
                server.wait(5.0)
            except subprocess.TimeoutExpired:
                pass
            with contextlib.suppress(ProcessLookupError):  # whatever is left of its group
                os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = None
        self._stop_watchdog()
        self.url = ""
        atexit.unregister(self.stop)

    def __enter__(self) -> PostgresCluster:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


if __name__ == "__main__":  # a manual check: start, print the URL and timing, stop
    with PostgresCluster() as cluster:
        print(f"{cluster.url} started in {cluster.startup_secs:.2f}s", file=sys.stderr)
        began = time.monotonic()
    print(f"stopped in {time.monotonic() - began:.2f}s", file=sys.stderr)
