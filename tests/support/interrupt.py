"""Runs a command, sends it one signal after a delay, and reports what it left behind.

    python -m tests.support.interrupt --after SECONDS [--signal SIGINT] [--from-handler]
        [--after-line N [--within-step]] -- COMMAND...

This process makes itself a child subreaper (Linux's PR_SET_CHILD_SUBREAPER), so whatever
the command starts and does not stop (a validator, a facilitator in a session of its own)
becomes this process's child once the command exits, where it is counted and then killed.
Prints one JSON object: the exit code, whether the signal was sent before the command ended,
its stdout and stderr, when each line of its stdout came (seconds from the start, or from
its handler with --from-handler), and the leftover processes. `--after-line N` counts
--after from its Nth line of stdout: a point of its progress, whatever the machine's load.
With `--within-step` the signal goes as soon as line N+1 is read if that comes first: a
step that ran faster than when the moment was drawn is still signalled at the start of the
next (or a little later, if lines come in a burst), not after the command ended.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO

PR_SET_CHILD_SUBREAPER = 36


def children(of: int) -> list[dict[str, object]]:
    """Live (not zombie) processes whose parent is `of`."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        # pid (comm) state ppid ...: comm may hold spaces and parentheses
        pid, rest = text.split(" ", 1)
        fields = rest.rsplit(")", 1)[1].split()
        state, ppid = fields[0], int(fields[1])
        if ppid == of and state != "Z":
            try:
                cmdline = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                cmdline = ""
            found.append({"pid": int(pid), "cmdline": cmdline.strip()})
    return found


def handled_since(proc: subprocess.Popen[str], deadline: float) -> None:
    """Waits until `proc` catches SIGTERM (its SigCgt mask in /proc): svcpay.stopping's
    handler is in place. Before that runs the interpreter's own start, which no program
    handles (Python raises KeyboardInterrupt wherever it is)."""
    bit = 1 << (signal.SIGTERM - 1)
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            status = Path(f"/proc/{proc.pid}/status").read_text()
        except OSError:
            return
        caught = next(line for line in status.splitlines() if line.startswith("SigCgt:"))
        if int(caught.split()[1], 16) & bit:
            return
        time.sleep(0.005)


def reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--after", type=float, required=True)
    parser.add_argument("--signal", default="SIGINT", choices=["SIGINT", "SIGTERM"])
    parser.add_argument("--timeout", type=float, default=120.0, help="for the exit after it")
    parser.add_argument(
        "--from-handler",
        action="store_true",
        help="count --after from when the command catches SIGTERM (its handler is in place)",
    )
    parser.add_argument(
        "--after-line", type=int, default=0, help="count --after from the Nth line of stdout"
    )
    parser.add_argument(
        "--within-step",
        action="store_true",
        help="send at line N+1 of --after-line if it comes before --after has passed",
    )
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        print(json.dumps({"error": "prctl failed"}))
        return 2
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stderr is not None
    began = time.monotonic()
    lines: list[tuple[float, str]] = []  # (when, line) of stdout
    reached = threading.Event()
    step_ended = threading.Event()  # line N+1 came (or the command ended)
    ended = threading.Event()  # its stdout closed: it ended (or is ending)

    def read_out(stream: IO[str]) -> None:
        try:
            for line in stream:
                lines.append((time.monotonic(), line))
                if len(lines) >= args.after_line:
                    reached.set()
                if args.within_step and len(lines) > args.after_line:
                    step_ended.set()
        finally:
            ended.set()
            reached.set()  # nothing more to wait for
            step_ended.set()

    errors: list[str] = []
    reader = threading.Thread(target=read_out, args=(proc.stdout,))
    err_reader = threading.Thread(
        target=lambda stream: errors.append(stream.read()), args=(proc.stderr,)
    )
    reader.start()
    err_reader.start()
    if args.from_handler:
        handled_since(proc, time.monotonic() + 60)
        began = time.monotonic()
    if args.after_line:
        reached.wait()
    if args.within_step:
        step_ended.wait(timeout=args.after)
    else:
        reader.join(timeout=args.after)
    sent = not ended.is_set()  # else it ended first
    stuck = ""
    if sent:
        proc.send_signal(getattr(signal, args.signal))
        reader.join(timeout=args.timeout)
        if reader.is_alive():
            proc.kill()
            reader.join()
            stuck = f"\n[interrupt: still running {args.timeout:.0f} s after the signal]"
    err_reader.join()
    code = proc.wait()  # before reap() below, which would take its exit status
    out, err = "".join(line for _, line in lines), "".join(errors) + stuck
    time.sleep(0.2)  # orphans are reparented here as the command's exit is processed
    reap()
    left = children(os.getpid())
    for child in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(str(child["pid"])), signal.SIGKILL)
    reap()
    print(
        json.dumps(
            {
                "code": code,
                "sent": sent,
                "stdout": out,
                "stderr": err,
                "left": left,
                "lines_at": [round(when - began, 3) for when, _ in lines],
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
