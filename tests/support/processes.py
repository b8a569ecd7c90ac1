"""Services that a test runs as separate processes (`svcpay facilitator serve`, the example
API, foreign SDKs' programs): each in its own process group with its output in files, and
all stopped when the test ends."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from svcpay.demo.children import Child, DemoFailed


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


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Processes]:
    running = Processes(tmp_path)
    yield running
    running.stop()
