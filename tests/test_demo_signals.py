"""Ctrl-C and SIGTERM stop the demo at any moment (issue 36, ADR 0035): exit 130, every
process it started stopped, no traceback. The moments are drawn at random over a whole run;
the seed is printed, and SVCPAY_SIGNAL_SEED=N draws the same moments again
(SVCPAY_SIGNAL_RUNS sets how many, 20 by default)."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from svcpay.demo import walkthrough

RUNS = int(os.environ.get("SVCPAY_SIGNAL_RUNS") or 20)
DEMO = [sys.executable, "-m", "svcpay.demo"]


@dataclass
class Outcome:
    code: int
    sent: bool
    stdout: str
    stderr: str
    left: list[dict[str, Any]]
    seconds: float
    lines_at: list[float]  # when each line of stdout came, from the handler's


@dataclass(frozen=True)
class Moment:
    """A point of the demo's progress: `after` seconds past its `line`th line of output, or
    its next line if that comes first (`within_step`): a point of the work, not of the clock,
    since CI's load changes how long each step takes, between one run and the next too (cold
    run 13: the reference run was timed beside another stage, and demos that ran faster once
    it ended finished before 13 of 20 moments)."""

    line: int
    after: float
    within_step: bool = True

    @classmethod
    def of(cls, seconds: float, lines_at: list[float]) -> Moment:
        line = sum(1 for t in lines_at if t <= seconds)
        return cls(line, seconds - (lines_at[line - 1] if line else 0.0))


def signalled(at: Moment, out: Path, sig: str = "SIGINT") -> Outcome:
    """The demo, sent `sig` at `at`, counted from when its handler is in place
    (tests/support/interrupt.py): before that, about 0.1 s, runs the interpreter's own start
    and `import svcpay.demo`, where Python itself raises KeyboardInterrupt."""
    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "tests.support.interrupt", "--after", str(at.after),
         "--after-line", str(at.line), *(["--within-step"] if at.within_step else []),
         "--signal", sig, "--from-handler", "--", *DEMO, "--out", str(out)],
        capture_output=True, text=True, timeout=at.after + 600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    return Outcome(
        report["code"], report["sent"], report["stdout"], report["stderr"], report["left"],
        time.monotonic() - began, report["lines_at"],
    )  # fmt: skip


def test_a_signal_at_any_moment_of_the_demo_stops_it_cleanly(tmp_path: Path) -> None:
    seed = int(os.environ.get("SVCPAY_SIGNAL_SEED") or random.randrange(2**32))
    print(f"SVCPAY_SIGNAL_SEED={seed}")
    rng = random.Random(seed)

    whole = signalled(Moment(0, 900, within_step=False), tmp_path / "whole")  # line by line
    assert whole.code == 0 and not whole.sent, whole.stderr
    assert not whole.left, whole.left
    length = whole.lines_at[-1]
    # Over the whole run, to its last 5 % (the cleanup), each moment a separate demo, as a
    # point of its progress: the line before it, then the same seconds after that line.
    moments = [Moment.of(rng.uniform(0, 0.95 * length), whole.lines_at) for _ in range(RUNS)]
    # Two demos at a time: the suite's minutes (each is mostly waiting), and more load.
    with ThreadPoolExecutor(max_workers=2) as pool:
        outcomes = list(pool.map(signalled, moments, [tmp_path / str(i) for i in range(RUNS)]))
    failures: list[str] = []
    tried = 0
    for moment, got in zip(moments, outcomes, strict=True):
        if not got.sent:
            # Every moment is before the reference run's last line: a demo that ended first
            # printed less than that run, so it must have finished, and cleanly.
            if got.code != 0 or "all stopped; temporary files removed" not in got.stdout:
                failures.append(
                    f"a demo meant for line {moment.line}, {moment.after:.1f} s after it, "
                    f"ended first with exit {got.code}\n{got.stderr[-2000:]}"
                )
            continue
        tried += 1
        steps = [line for line in got.stdout.splitlines() if line.startswith("── ")]
        where = (
            f"SIGINT {moment.after:.1f} s after line {moment.line} of {len(whole.lines_at)}, "
            f"or at the next (after {steps[-1:] or 'start'})"
        )
        finished = "all stopped; temporary files removed" in got.stdout
        if got.code != 130 and not (got.code == 0 and finished):
            failures.append(f"{where}: exit {got.code}\n{got.stderr[-2000:]}")
        elif got.code == 130 and "demo interrupted (SIGINT)" not in got.stderr:
            failures.append(f"{where}: no 'demo interrupted (SIGINT)'\n{got.stderr[-2000:]}")
        if "Traceback" in got.stderr or "Traceback" in got.stdout:
            failures.append(f"{where}: a traceback\n{got.stderr[-3000:]}")
        if got.left:
            failures.append(f"{where}: left running {got.left}")
    assert not failures, f"seed {seed}:\n" + "\n\n".join(failures)
    assert tried >= RUNS * 0.8, f"seed {seed}: only {tried} of {RUNS} signals came mid-run"


def test_sigterm_mid_demo_stops_every_process(tmp_path: Path) -> None:
    """As a supervisor stops it: the same as Ctrl-C, named in the last line."""
    got = signalled(Moment(0, 8, within_step=False), tmp_path, "SIGTERM")
    assert got.sent and got.code == 130, got.stderr
    assert "demo interrupted (SIGTERM)" in got.stderr
    assert "Traceback" not in got.stderr and not got.left


SWALLOWING_DEMO = """
import asyncio, os, signal, sys
from svcpay import stopping
from svcpay.demo import walkthrough

class Demo:  # a walkthrough whose coroutine swallows the cancellation a Ctrl-C becomes
    def run(self, stack):
        async def main():
            os.kill(os.getpid(), signal.SIGINT)
            try:
                await asyncio.sleep(5)
            except BaseException:
                pass
            await asyncio.sleep(0.1)
        stopping.run(main())
        walkthrough.step("the step after the Ctrl-C")

    def failed(self, message, child):
        print("failed:", message, file=sys.stderr)

sys.exit(walkthrough.run(demo=Demo()))
"""


def test_a_ctrl_c_that_a_coroutine_swallows_still_stops_the_demo() -> None:
    """A cancellation can be swallowed (Python 3.11's wait_for, when its inner task finishes
    at the same moment; it once let the demo run to the end and exit 0): the next step's
    checkpoint still stops it, with 130."""
    done = subprocess.run(
        [sys.executable, "-c", SWALLOWING_DEMO], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 130, (done.stdout, done.stderr)
    assert "demo interrupted (SIGINT)" in done.stderr
    assert "the step after the Ctrl-C" not in done.stdout


class Raising:
    """A walkthrough that ends with `error`, after a Ctrl-C if `signal_first`."""

    def __init__(self, error: BaseException, signal_first: bool) -> None:
        self.error, self.signal_first, self.failures = error, signal_first, []

    def run(self, stack: object) -> None:
        if self.signal_first:
            os.kill(os.getpid(), signal.SIGINT)
        raise self.error

    def failed(self, message: str, child: object) -> None:
        self.failures.append(message)


@pytest.mark.parametrize(
    "error",
    [
        BaseExceptionGroup("connect", [KeyboardInterrupt()]),
        RuntimeError("Attempted to exit a cancel scope that isn't the current task's"),
        walkthrough.DemoFailed("svcpay facilitator provider create exited with 130"),
    ],
)
def test_what_a_stop_breaks_is_the_stop_not_a_failure(
    capsys: pytest.CaptureFixture[str], error: BaseException
) -> None:
    """After a Ctrl-C, whatever it broke (a task group, a cancel scope, a service's command
    that the terminal's Ctrl-C reached too) ends the demo with 130, not 1 and a traceback."""
    stopped = Raising(error, signal_first=True)
    assert walkthrough.run(demo=stopped) == 130  # type: ignore[arg-type]
    assert "demo interrupted (SIGINT)" in capsys.readouterr().err and not stopped.failures


def test_without_a_stop_an_error_is_a_failure() -> None:
    other = Raising(ExceptionGroup("connect", [OSError("refused")]), signal_first=False)
    assert walkthrough.run(demo=other) == 1  # type: ignore[arg-type]
    assert "refused" in other.failures[0]
