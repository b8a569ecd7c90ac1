"""svcpay.watchdog: a child's process group does not outlive its parent, even a SIGKILLed one
(the validator `localnet` runs, the demo's services); stopped by the parent, it is left alone."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from svcpay.watchdog import GroupWatchdog

# A parent that starts a child in a session of its own, watched, prints the child's pid and
# waits to be killed.
PARENT = """
import subprocess, sys, time
from pathlib import Path
from svcpay.watchdog import GroupWatchdog
child = subprocess.Popen(["sleep", "600"], start_new_session=True)
watchdog = GroupWatchdog(child.pid, grace=int(sys.argv[1]), remove=Path(sys.argv[2]))
print(child.pid, flush=True)
time.sleep(600)
"""

# A parent that runs the drop-in validator (no program), prints its URL and waits.
LOCALNET = """
import time
from svcpay.localnet.process import localnet
with localnet(program=None, validator="drop-in") as node:
    print(node.url, flush=True)
    time.sleep(600)
"""


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, which nobody reaped yet, does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def wait_until(condition: Callable[[], bool], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return False


def start(
    script: str, *args: str, env: dict[str, str] | None = None
) -> tuple[subprocess.Popen[str], str]:
    parent = subprocess.Popen(
        [sys.executable, "-c", script, *args], stdout=subprocess.PIPE, text=True, env=env
    )
    assert parent.stdout is not None
    line = parent.stdout.readline().strip()
    assert line, f"the parent exited with {parent.wait()} before it started its child"
    return parent, line


def test_a_killed_parents_child_group_is_stopped_and_its_directory_removed(tmp_path: Path) -> None:
    workdir = tmp_path / "ledger"
    workdir.mkdir()
    (workdir / "data").write_bytes(b"x" * 1000)
    parent, line = start(PARENT, "2", str(workdir))
    child = int(line)
    try:
        assert alive(child)
        parent.kill()  # SIGKILL: no finally, no atexit
        parent.wait()
        assert wait_until(lambda: not alive(child), 10), "the child outlived its killed parent"
        assert wait_until(lambda: not workdir.exists(), 10), "its directory was left behind"
    finally:
        parent.kill()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child, signal.SIGKILL)


def test_a_group_the_parent_stopped_itself_is_left_alone(tmp_path: Path) -> None:
    child = subprocess.Popen(["sleep", "600"], start_new_session=True)
    try:
        watchdog = GroupWatchdog(child.pid, grace=1, remove=tmp_path)
        watchdog.close()
        watchdog.close()  # twice is harmless
        time.sleep(1.5)
        assert child.poll() is None and tmp_path.exists()
    finally:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()


def test_a_killed_localnet_takes_its_validator_and_ledger_with_it(tmp_path: Path) -> None:
    """`svcpay localnet`, the demo or a test run killed outright: the validator does not go
    on spinning, and its temporary directory goes too."""
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    parent, url = start(LOCALNET, env=env)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("svcpay-localnet-")]
    assert httpx.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "getHealth"}).is_success
    parent.send_signal(signal.SIGKILL)
    parent.wait()

    def gone() -> bool:
        try:
            httpx.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "getHealth"}, timeout=1)
        except httpx.HTTPError:
            return True
        return False

    assert wait_until(gone, 20), "the validator outlived the process that started it"
    assert wait_until(lambda: not list(tmp_path.glob("svcpay-localnet-*")), 20)
