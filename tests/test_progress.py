"""The waits on child processes (issue 36, docs/adr/0047): no fixed budget that a loaded machine
overruns. A step is waited on while its process works and fails once that process stalls
(no CPU time used for `STALL_SECS`) or exits; a request that fails below HTTP is named
without a traceback."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest

from svcpay import progress
from svcpay.demo import context
from svcpay.demo.children import Child, DemoFailed, run_command
from svcpay.demo.walkthrough import Demo, run
from svcpay.localnet.process import LocalnetError, _wait_healthy

# Busy for `secs` seconds of wall time, then prints "done".
BUSY = (
    "import time\nend = time.monotonic() + {secs}\n"
    "while time.monotonic() < end: pass\nprint('done')"
)
# Writes a line to stderr, then sleeps without using CPU.
IDLE = "import sys, time\nprint('waiting on nothing', file=sys.stderr, flush=True)\ntime.sleep(60)"


@pytest.fixture
def short_stall(monkeypatch: pytest.MonkeyPatch) -> float:
    monkeypatch.setattr(progress, "STALL_SECS", 1.0)
    return 1.0


def test_a_step_that_keeps_working_is_waited_on_past_the_stall_budget(
    short_stall: float, tmp_path: Path
) -> None:
    argv = [sys.executable, "-c", BUSY.format(secs=short_stall * 3)]
    assert run_command("a busy step", argv, {}, tmp_path) == "done\n"


def test_a_step_that_stalls_fails_with_its_stderr_and_is_stopped(
    short_stall: float, tmp_path: Path
) -> None:
    with pytest.raises(DemoFailed) as failed:
        run_command("an idle step", [sys.executable, "-c", IDLE], {}, tmp_path)
    assert str(failed.value) == "an idle step made no progress for 1 s (no CPU time used)"
    child = failed.value.child
    assert child is not None and child.proc.returncode is not None  # stopped, not left behind
    assert "waiting on nothing" in child.stderr_tail()


def test_a_step_that_fails_is_reported_with_its_exit_code_and_stderr(tmp_path: Path) -> None:
    argv = [sys.executable, "-c", "import sys; sys.exit('no such plan')"]
    with pytest.raises(DemoFailed) as failed:
        run_command("a failing step", argv, {}, tmp_path)
    assert str(failed.value) == "a failing step exited with 1"
    assert failed.value.child is not None
    assert "no such plan" in failed.value.child.stderr_tail()


def test_a_request_is_waited_on_while_its_service_works_and_not_once_it_stalls(
    short_stall: float, tmp_path: Path
) -> None:
    busy = Child("busy service", [sys.executable, "-c", BUSY.format(secs=30)], {}, tmp_path)
    idle = Child("idle service", [sys.executable, "-c", IDLE], {}, tmp_path)
    try:
        slow = asyncio.sleep(short_stall * 3, result="answer")
        assert asyncio.run(context.while_working(slow, busy, "a slow answer")) == "answer"
        never = asyncio.sleep(60)
        with pytest.raises(DemoFailed) as failed:
            asyncio.run(context.while_working(never, idle, "an answer"))
        assert str(failed.value) == (
            "an answer: the idle service made no progress for 1 s (no CPU time used)"
        )
    finally:
        busy.stop(), idle.stop()


class _Unanswered(Demo):
    """A demo whose step gets no answer from a service in time."""

    def run(self, stack: ExitStack) -> None:
        request = httpx.Request("GET", "http://127.0.0.1:8402/v1/analytics/chart.png")
        raise httpx.ReadTimeout("", request=request)


def test_a_request_that_got_no_answer_is_named_without_a_traceback(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert run(demo=_Unanswered(tmp_path)) == 1
    err = capsys.readouterr().err
    assert (
        "demo failed: GET http://127.0.0.1:8402/v1/analytics/chart.png failed: "
        "ReadTimeout (no answer in time)"
    ) in err
    assert "Traceback" not in err


def test_a_validator_that_stalls_at_start_fails_with_its_log(
    short_stall: float, tmp_path: Path
) -> None:
    """The local validator's start is waited on while its log grows or its slot moves, not
    for a fixed 90 s (solana-test-validator took longer on a loaded machine); one that does
    neither is reported with its log."""
    log = tmp_path / "validator.log"
    log.write_text("Waiting for first slot 1...\n")
    silent = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        with pytest.raises(LocalnetError) as failed:
            _wait_healthy("http://127.0.0.1:9", silent, log)
    finally:
        silent.kill()
        silent.wait()
    assert str(failed.value).startswith(
        "the validator made no progress for 1 s (its log and its slot did not move) before "
        "it was healthy:\nWaiting for first slot 1..."
    )
