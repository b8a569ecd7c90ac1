"""A child's process group that does not outlive this process, however this process ends.

The validator that `localnet` starts and the demo's services run in process groups of their
own (a Ctrl-C reaches only us, and we stop them in order). Killed without a chance to stop
them (SIGKILL, the OOM killer, a crash of the interpreter), we would leave them running: a
solana-test-validator spins more than a core for as long as it lives (ADR 0034), and its
ports and ledger stay taken. `GroupWatchdog` starts a small `sh` that reads its stdin, a pipe
only this process holds open: when this process is gone, the read ends, and the watchdog
sends the group SIGTERM, SIGKILL after `grace` seconds, and removes the directory it was given.
`close()`, once we stopped the group ourselves, ends the watchdog without a signal sent.

Imports nothing of svcpay's: any module may import it.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

__all__ = ["GroupWatchdog"]

# $0: the process group; $1: seconds of grace; $2: a directory to remove, or empty. dash's
# kill takes `-15 -PGID` (no `--`); `kill -0` asks whether any of the group is left (a zombie
# nobody reaped yet counts: the grace then runs out before the SIGKILL, which is harmless).
_SCRIPT = """read _ && exit 0
kill -15 "-$0" 2>/dev/null
i=0
while [ "$i" -lt "$1" ] && kill -0 "-$0" 2>/dev/null; do sleep 1; i=$((i + 1)); done
kill -9 "-$0" 2>/dev/null
[ -n "$2" ] && sleep 1 && rm -rf "$2"
exit 0
"""


class GroupWatchdog:
    """Stops process group `pgid` (and removes `remove`) if this process dies first."""

    def __init__(self, pgid: int, *, grace: int = 10, remove: Path | None = None) -> None:
        self._proc: subprocess.Popen[bytes] | None = subprocess.Popen(
            ["sh", "-c", _SCRIPT, str(pgid), str(max(grace, 0)), str(remove or "")],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # a Ctrl-C to our group does not reach it
        )

    def close(self) -> None:
        """The group is stopped (by us): the watchdog ends, having sent nothing."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        assert proc.stdin is not None
        try:
            proc.stdin.write(b"stopped\n")
            proc.stdin.close()
        except OSError:  # it is gone already
            pass
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
