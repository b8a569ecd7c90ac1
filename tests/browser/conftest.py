"""The browser tests run against `svcpay demo --serve`, as a person would: the demo's
walkthrough fills the facilitator with its data (payments, a subscription and its renewal,
metered use, a session, webhooks), then its services stay up for the browser until Ctrl-C.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from svcpay.demo.serve import SERVING
from tests.support.browser import browser, playwright  # noqa: F401 (fixtures)
from tests.support.processes import run_to_end

DEMO_PATIENCE_SECS = 600  # the walkthrough, on a loaded machine
NAMES = ("paywall", "dashboard", "api key", "facilitator", "database", "validator", "wallet")


@dataclass(frozen=True)
class ServedDemo:
    paywall: str
    dashboard: str
    api_key: str
    facilitator: str
    database: str
    validator: str
    wallet: Path
    log: Path

    def cli(self, *args: str) -> str:
        """`svcpay ARGS` against the demo's facilitator database and validator; its stdout."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("SVCPAY_")}
        env.update(SVCPAY_DATABASE_URL=self.database, SVCPAY_RPC_URL=self.validator)
        # No fixed time limit (docs/adr/0047): cold run 9 saw `provider create --no-check`
        # outlast 120 s at a load of 16 to 76 on two cores.
        argv = [sys.executable, "-m", "svcpay.cli", *args]
        done = run_to_end(argv, env, name="svcpay " + " ".join(args))
        assert done.returncode == 0, done.stderr
        return done.stdout


def _served(log: Path) -> dict[str, str] | None:
    text = log.read_text(errors="replace")
    if SERVING not in text:
        return None
    block = text[text.index(SERVING) :]
    found = {}
    for name in NAMES:
        match = re.search(rf"^   {re.escape(name)}\s+(\S+)", block, re.MULTILINE)
        if match is None:
            return None
        found[name] = match.group(1)
    return found


@pytest.fixture(scope="session")
def served_demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedDemo]:
    """`svcpay demo --serve` in its own process (its own drop-in validator); stopped with
    Ctrl-C (SIGINT) at the end, which must end it cleanly (exit 0)."""
    tmp = tmp_path_factory.mktemp("served-demo")
    log = tmp / "demo.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SVCPAY_")}
    env["PYTHONUNBUFFERED"] = "1"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "svcpay.cli", "demo", "--serve", "--out", str(tmp / "out")],
            stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + DEMO_PATIENCE_SECS
        found = None
        while found is None:
            if proc.poll() is not None:
                pytest.fail(f"svcpay demo --serve exited with {proc.returncode}:\n"
                            f"{log.read_text(errors='replace')[-4000:]}")  # fmt: skip
            if time.monotonic() > deadline:
                pytest.fail(f"svcpay demo --serve did not serve within {DEMO_PATIENCE_SECS} s")
            time.sleep(0.5)
            found = _served(log)
        yield ServedDemo(
            paywall=found["paywall"], dashboard=found["dashboard"], api_key=found["api key"],
            facilitator=found["facilitator"], database=found["database"],
            validator=found["validator"], wallet=Path(found["wallet"]), log=log,
        )  # fmt: skip
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    tail = log.read_text(errors="replace")[-3000:]
    assert proc.returncode == 0, f"Ctrl-C ended the served demo with {proc.returncode}:\n{tail}"
    assert "all stopped" in tail, tail
