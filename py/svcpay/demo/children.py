"""The demo's child processes: started in their own process group with their output in
files, waited on until they print their ready line, and stopped (SIGTERM, then SIGKILL);
each with a watchdog that stops it should the demo be killed first (`svcpay.watchdog`).

A wait on a child has no fixed budget, which a loaded machine overruns (issue 36: a CLI step
that takes 5 s idle took over 60 s beside a busy core and a test suite). It fails when the
child exits, or stops making progress (`svcpay.progress.Watch`: no CPU time used for a
minute)."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from svcpay import stopping
from svcpay.progress import Watch
from svcpay.watchdog import GroupWatchdog

STOP_TIMEOUT = 15.0  # seconds a child gets to shut down gracefully before SIGKILL


class DemoFailed(RuntimeError):
    """A step of the demo failed; `child` is the process whose log explains it, if any."""

    def __init__(self, message: str, child: Child | None = None) -> None:
        super().__init__(message)
        self.child = child


def _tail(path: Path, lines: int) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.rstrip().splitlines()[-lines:])


class Child:
    """One service process (`argv` with `env`), stdout and stderr in files under `logs`."""

    def __init__(self, name: str, argv: Sequence[str], env: Mapping[str, str], logs: Path) -> None:
        self.name = name
        slug = name.replace(" ", "-")
        self.stdout_path, self.stderr_path = logs / f"{slug}.out", logs / f"{slug}.err"
        with open(self.stdout_path, "wb") as out, open(self.stderr_path, "wb") as err:
            # Its own session: Ctrl-C reaches the demo only, which stops its children in order.
            self.proc = subprocess.Popen(
                list(argv),
                env=dict(env),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
            )
        # Should the demo die without stopping it (SIGKILL), the child goes too.
        try:
            self.watchdog = GroupWatchdog(self.proc.pid, grace=int(STOP_TIMEOUT))
        except BaseException:  # no watchdog (out of processes?): no unwatched child either
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            raise

    @property
    def pid(self) -> int:
        return self.proc.pid

    def wait_ready(self, prefix: str) -> str:
        """The first stdout line that starts with `prefix`, once the child prints it."""
        watch = Watch(self.pid)
        while True:
            for line in self.stdout_path.read_text(errors="replace").splitlines():
                if line.startswith(prefix):
                    return line
            if self.proc.poll() is not None:
                raise DemoFailed(
                    f"the {self.name} exited with {self.proc.returncode} before it was ready",
                    self,
                )
            if why := watch.stalled():
                raise DemoFailed(f"the {self.name} {why} before it was ready", self)
            stopping.sleep(0.05)

    def check_running(self) -> None:
        if self.proc.poll() is not None:
            raise DemoFailed(f"the {self.name} exited with {self.proc.returncode}", self)

    def stderr_tail(self, lines: int = 25) -> str:
        return _tail(self.stderr_path, lines)

    def stop(self, timeout: float = STOP_TIMEOUT) -> int:
        """SIGTERM to its process group, a graceful wait, SIGKILL as the last resort; returns
        the exit status."""
        for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
            if self.proc.poll() is not None:
                break
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                self.proc.wait(timeout=wait)
            except subprocess.TimeoutExpired:
                continue
        self.proc.wait()
        self.watchdog.close()
        return self.proc.returncode


def run_command(what: str, argv: Sequence[str], env: Mapping[str, str], logs: Path) -> str:
    """Runs a short command to completion (its output in files under `logs`) and returns its
    stdout; DemoFailed (with its stderr) when it fails or stalls. A stop request ends it."""
    child = Child(what, argv, env, logs)
    try:
        watch = Watch(child.pid)
        while child.proc.poll() is None:
            if why := watch.stalled():
                raise DemoFailed(f"{what} {why}", child)
            stopping.sleep(0.05)
    finally:
        child.stop()
    if child.proc.returncode != 0:
        raise DemoFailed(f"{what} exited with {child.proc.returncode}", child)
    return child.stdout_path.read_text(errors="replace")
