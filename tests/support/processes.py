"""Services that a test runs as separate processes (`svcpay facilitator serve`, the example
API, foreign SDKs' programs): each in its own process group with its output in files, and
all stopped when the test ends."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import pytest

from svcpay.demo.children import Child, DemoFailed
from svcpay.progress import Watch


class Processes:
    """Services started for one test, each in its own process group with its output in
    files; all stopped (SIGTERM, then SIGKILL) when the test ends."""

    def __init__(self, logs: Path) -> None:
        self.logs, self.children = logs, list[Child]()

    def start(
        self, name: str, argv: Sequence[str], ready: str, env: dict[str, str] | None = None
    ) -> str:
        """Runs `argv` and returns the URL in the line it prints when ready (`ready ...`)."""
        # Not the caller's SVCPAY_* settings: only what each service is given, and what the
        # suite's local validator stands in for (tests/conftest.py, docs/adr/0038).
        inherited = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("SVCPAY_") or k == "SVCPAY_LOCALNET_AS"
        }
        child = Child(name, argv, {**inherited, "PYTHONUNBUFFERED": "1", **(env or {})}, self.logs)
        self.children.append(child)
        try:
            line = child.wait_ready(ready)
        except DemoFailed as e:
            pytest.fail(f"{e}:\n{child.stderr_tail(40)}")
        return next(word for word in line.split() if word.startswith("http://"))

    def lossy_rpc(self, upstream: str, *flags: str) -> str:
        """svcpay.localnet.lossy in front of `upstream`, with `flags` (`--drop-sends 0.3`...)."""
        argv = [sys.executable, "-m", "svcpay.localnet.lossy", "--upstream", upstream, *flags]
        return self.start("lossy rpc", argv, "svcpay lossy-rpc ready ")

    def stop(self) -> None:
        for child in reversed(self.children):
            child.stop(timeout=10)


def run_to_end(
    argv: Sequence[str], env: Mapping[str, str] | None = None, name: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Runs `argv` (a foreign SDK's program, a CLI command) to its end, its output captured.
    No fixed time limit, which a loaded machine overruns (docs/adr/0047): the test fails once
    the process has used no CPU for `svcpay.progress.STALL_SECS`, or works past the backstop.
    `name` says which in that failure (default: the script's file name)."""
    name = name or Path(argv[1]).name
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(list(argv), stdout=out, stderr=err, text=True, env=env)
        try:
            watch = Watch(proc.pid)
            while proc.poll() is None:
                if why := watch.stalled():
                    err.seek(0)
                    pytest.fail(f"{name} {why}:\n{err.read()[-3000:]}")
                time.sleep(0.1)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(list(argv), proc.returncode, out.read(), err.read())


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Processes]:
    running = Processes(tmp_path)
    yield running
    running.stop()
