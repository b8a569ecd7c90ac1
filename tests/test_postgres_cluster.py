"""The tests' private PostgreSQL server (tests/support/postgres.py) leaves nothing behind when
its test process is killed: not while it runs, not in the middle of its own stop (scripts/test
kills a background pytest whose teardown outlasts its bound). Each case runs the server in a
process of its own and kills that process as the bound would (SIGKILL)."""

from __future__ import annotations

import concurrent.futures
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Starts a server, prints its directory and process id, then either waits or stops it with
# the directory's removal stuck (as a teardown that is killed before it ends).
CHILD = """
import shutil, sys, time
sys.path.insert(0, sys.argv[1])
from tests.support.postgres import PostgresCluster

cluster = PostgresCluster()
cluster.start()
print(cluster.root, cluster._server.pid, flush=True)
if sys.argv[2] == "mid-stop":
    def stuck(*args, **kwargs):
        print("removing", flush=True)
        time.sleep(600)
    shutil.rmtree = stuck
    cluster.stop()
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):  # reaped between the open and the read
        return False
    return state != "Z"  # a zombie no one reaps is gone all the same


@pytest.mark.parametrize("when", ["running", "mid-stop"])
def test_a_killed_test_process_leaves_no_server_and_no_directory(when: str) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(ROOT), when],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines = concurrent.futures.ThreadPoolExecutor(1)
    try:
        assert child.stdout is not None
        # A line within 60 s (the kill below ends a read that waits longer).
        first = lines.submit(child.stdout.readline).result(timeout=60).split()
        assert len(first) == 2, "the server did not start (its error is the child's stderr)"
        root, server = Path(first[0]), int(first[1])
        if when == "mid-stop":
            assert lines.submit(child.stdout.readline).result(timeout=60).strip() == "removing"
            assert not _alive(server), "stop() ends the server before removing its directory"
        assert root.is_dir() and _alive(server) == (when == "running")
    finally:
        child.kill()
        _, stderr = child.communicate()
        lines.shutdown()
        print(stderr[-3000:], file=sys.stderr)  # shown by pytest when the test fails
    # The watchdog kills the server's group, waits 1 s, removes the directory.
    deadline = time.monotonic() + 15
    while (root.exists() or _alive(server)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(server), f"postgres {server} outlived its test process"
    assert not root.exists(), f"{root} outlived its test process"
