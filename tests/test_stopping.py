"""svcpay.stopping: Ctrl-C and SIGTERM request a stop; the handler never raises. Each case
runs in a process of its own, signalled as a terminal or a supervisor would."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest


def run_py(code: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


# A server that accepts and never answers: httpx's read waits inside anyio's cancel scopes,
# where an exception raised by a signal handler once broke the scope stack (issue 36).
SILENT_SERVER = """
import socket, threading
listener = socket.socket()
listener.bind(("127.0.0.1", 0))
listener.listen(64)
held = []
threading.Thread(target=lambda: [held.append(listener.accept()) for _ in range(64)],
                 daemon=True).start()
URL = f"http://127.0.0.1:{listener.getsockname()[1]}/"
"""


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_a_signal_cancels_an_http_call_inside_anyio_and_nothing_raises_from_the_handler(
    sig: str,
) -> None:
    done = run_py(
        SILENT_SERVER
        + f"""
import asyncio, os, signal, sys, time
import httpx
from svcpay import stopping

async def main():
    loop = asyncio.get_running_loop()
    loop.call_later(0.3, os.kill, os.getpid(), signal.{sig})
    async with httpx.AsyncClient(timeout=20) as http:
        for _ in range(200):  # each call is cut at a random point of connect or read
            try:
                await http.get(URL)
            except httpx.TimeoutException:
                pass

began = time.monotonic()
with stopping.handling():
    try:
        stopping.run(main())
    except stopping.Interrupted:
        print("interrupted", stopping.signal_name(), round(time.monotonic() - began, 1))
        sys.exit(130)
print("ran to the end")
"""
    )
    assert done.returncode == 130, done.stderr
    word, name, seconds = done.stdout.split()
    assert (word, name) == ("interrupted", sig) and float(seconds) < 5
    assert "Traceback" not in done.stderr


def test_a_swallowed_cancellation_stops_at_the_next_checkpoint() -> None:
    done = run_py(
        """
import asyncio, os, signal, sys
from svcpay import stopping

async def main():
    os.kill(os.getpid(), signal.SIGINT)
    try:
        await asyncio.sleep(5)
    except asyncio.CancelledError:
        pass  # as Python 3.11's wait_for can
    print("still running")
    stopping.check()
    print("past the checkpoint")

with stopping.handling():
    try:
        stopping.run(main())
    except stopping.Interrupted:
        sys.exit(130)
"""
    )
    assert done.returncode == 130, done.stderr
    assert done.stdout.split("\n")[0] == "still running"
    assert "past the checkpoint" not in done.stdout


def test_sleep_ends_within_a_slice_of_the_signal_and_a_second_signal_is_harmless() -> None:
    done = run_py(
        """
import os, signal, sys, threading, time
from svcpay import stopping

killed = []

def kill_twice():
    time.sleep(0.3)
    killed.append(time.monotonic())
    os.kill(os.getpid(), signal.SIGTERM)
    # Both pending at once would run in signal-number order: the second goes once the first
    # was handled, however long a loaded machine takes to run the handler.
    deadline = time.monotonic() + 20
    while not stopping.requested() and time.monotonic() < deadline:
        time.sleep(0.01)
    os.kill(os.getpid(), signal.SIGINT)

with stopping.handling():
    threading.Thread(target=kill_twice, daemon=True).start()
    try:
        stopping.sleep(30)
    except stopping.Interrupted:
        print(round(time.monotonic() - killed[0], 2), stopping.signal_name())
    # the cleanup after a stop: signals only set the flag, nothing raises here
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(0.2)
    print("cleaned up")
"""
    )
    assert done.returncode == 0, done.stderr
    first, second = done.stdout.splitlines()
    seconds, name = first.split()
    # A slice (50 ms) after the signal; a loaded machine may take a second or two to run it.
    assert float(seconds) < 5 and name == "SIGTERM"  # the first signal is the one named
    assert second == "cleaned up"


def test_finishing_completes_the_step_then_passes_the_cancellation_on() -> None:
    done = run_py(
        """
import asyncio, os, signal, sys
from svcpay import stopping

kept = []

async def open_and_keep():
    await asyncio.sleep(0.5)  # the on-chain open
    kept.append("tab")

async def main():
    asyncio.get_running_loop().call_later(0.1, os.kill, os.getpid(), signal.SIGINT)
    await stopping.finishing(open_and_keep())
    print("after the step")

with stopping.handling():
    try:
        stopping.run(main())
    except stopping.Interrupted:
        print("interrupted, kept", kept)
"""
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "interrupted, kept ['tab']"


def test_outside_handling_the_previous_handlers_are_back() -> None:
    done = run_py(
        """
import signal
from svcpay import stopping

# What they were (a job started in the background by a shell has SIGINT ignored).
before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
with stopping.handling():
    with stopping.handling():
        pass
    assert signal.getsignal(signal.SIGINT) not in before
    assert signal.getsignal(signal.SIGTERM) not in before
assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before
print("ok")
"""
    )
    assert done.stdout.strip() == "ok", done.stderr


def test_a_signal_after_the_work_is_done_changes_nothing() -> None:
    """Past `finished()` a Ctrl-C or SIGTERM neither raises nor kills: the exit code is the
    one the work ended with. Without it, the interpreter's shutdown puts back the default
    action, and a late Ctrl-C killed a finished demo with -2 (CI, 2026-11-28)."""
    script = (
        "import os, signal, sys\n"
        "from svcpay import stopping\n"
        "with stopping.handling():\n"
        "    pass\n"
        "if sys.argv[1] == 'finished':\n"
        "    stopping.finished()\n"
        "os.kill(os.getpid(), signal.SIGINT)\n"
        "os.kill(os.getpid(), signal.SIGTERM)\n"
        "sys.exit(3)\n"
    )
    done = [
        subprocess.run([sys.executable, "-c", script, how], capture_output=True, text=True)
        for how in ("finished", "not")
    ]
    assert (done[0].returncode, done[0].stderr) == (3, "")
    assert done[1].returncode != 3  # the control: the same signals, not ignored
