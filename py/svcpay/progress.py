"""How long a process waited on has made no progress (docs/adr/0047): a wait that ends on a
stall, not at a fixed time, which a loaded machine overruns.

`Watch` follows a measure of progress (by default a process's CPU time, from /proc) and says
when it has not moved for `STALL_SECS`, or when the wait passed `MAX_WAIT_SECS` (the
backstop for a process that works forever). Used by the demo's waits on its children, the
local validator's start, and the tests' waits on foreign programs.

Imports nothing of svcpay's: any module may import it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

__all__ = ["MAX_WAIT_SECS", "STALL_SECS", "Watch", "cpu_seconds"]

STALL_SECS = 60.0  # a process whose measure did not move for this long while waited on is stuck
MAX_WAIT_SECS = 900.0  # the backstop: a process busy this long on one step is stuck too
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def cpu_seconds(pid: int) -> float | None:
    """The user plus system CPU time process `pid` has used, or None where unknown (no
    /proc, or the process is gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        fields = stat.rsplit(")", 1)[1].split()  # after the command name, which may hold ")"
        return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS  # utime, stime
    except (OSError, IndexError, ValueError):
        return None


class Watch:
    """How long a waited-on process has made no progress: the seconds since `measure` (by
    default process `pid`'s CPU time) last changed; since the wait began where it reads
    None. `stalled()` says why the wait should end, or None to go on."""

    def __init__(
        self,
        pid: int | None = None,
        *,
        measure: Callable[[], object] | None = None,
        sign: str = "no CPU time used",
    ) -> None:
        if measure is None:
            if pid is None:
                raise ValueError("give the pid of the process to watch, or a measure")
            measure = lambda: cpu_seconds(pid)  # noqa: E731
        self.measure, self.sign = measure, sign
        self.began = self.moved = time.monotonic()
        self.last = measure()

    def stalled(self) -> str | None:
        now = time.monotonic()
        value = self.measure()
        if value is not None and value != self.last:
            self.last, self.moved = value, now
        if now - self.moved > STALL_SECS:
            return f"made no progress for {STALL_SECS:.0f} s ({self.sign})"
        if now - self.began > MAX_WAIT_SECS:
            return f"was still busy after {MAX_WAIT_SECS:.0f} s"
        return None
