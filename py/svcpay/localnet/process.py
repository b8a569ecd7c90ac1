"""Starting and stopping a local validator with the svc_billing program loaded.

`solana-test-validator` when it is on PATH; otherwise svcpay's drop-in (svcpay.localnet.server),
which runs in its own environment (`.venv-localnet`, solders 0.29: the runtime that loads
SBPF v3 with mainnet's features; anchorpy pins an older solders in the main environment).
Both listen on loopback and are stopped, with their children, when the context exits.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from svcpay.program.generated.program_id import PROGRAM_ID

ROOT = Path(__file__).resolve().parents[3]
PROGRAM_SO = ROOT / "target" / "deploy" / "svc_billing.so"
LOCALNET_PYTHON = ROOT / ".venv-localnet" / "bin" / "python"
STARTUP_TIMEOUT = 60.0


class ProgramBinaryMissing(RuntimeError):
    """The program has not been built (scripts/build-program)."""


class LocalnetError(RuntimeError):
    """The local validator could not be started."""


@dataclass(frozen=True)
class Localnet:
    url: str
    kind: str  # "solana-test-validator" or "svcpay-drop-in"

    @property
    def can_time_travel(self) -> bool:
        return self.kind == "svcpay-drop-in"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_healthy(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise LocalnetError(
                f"the validator exited with {proc.returncode}:\n{log.read_text()[-3000:]}"
            )
        try:
            body = {"jsonrpc": "2.0", "id": 1, "method": "getHealth"}
            if httpx.post(url, json=body, timeout=2).json().get("result") == "ok":
                return
        except (httpx.HTTPError, ValueError):
            pass
        time.sleep(0.2)
    raise LocalnetError(f"the validator did not become healthy in {STARTUP_TIMEOUT:.0f}s")


def _command(program: Path, port: int, ledger: Path) -> tuple[list[str], str]:
    program_arg = ["--bpf-program", str(PROGRAM_ID), str(program)]
    validator = shutil.which("solana-test-validator")
    if validator and os.environ.get("SVCPAY_LOCALNET") != "drop-in":
        cmd = [
            validator,
            *program_arg,
            "--rpc-port",
            str(port),
            "--ledger",
            str(ledger),
            "--reset",
            "--quiet",
        ]
        return cmd, "solana-test-validator"
    python = Path(os.environ.get("SVCPAY_LOCALNET_PYTHON", LOCALNET_PYTHON))
    if not python.exists():
        raise LocalnetError(
            f"{python} is missing: run scripts/python-env (it creates .venv-localnet)"
        )
    return [
        str(python),
        "-m",
        "svcpay.localnet.server",
        *program_arg,
        "--rpc-port",
        str(port),
    ], "svcpay-drop-in"


@contextmanager
def localnet(program: Path = PROGRAM_SO) -> Iterator[Localnet]:
    """A running local validator with svc_billing at its program id, for the block's duration."""
    if not program.exists():
        raise ProgramBinaryMissing(
            f"{program} is missing: run scripts/build-program (scripts/test does)"
        )
    port = _free_port()
    with tempfile.TemporaryDirectory(prefix="svcpay-localnet-") as tmp:
        cmd, kind = _command(program, port, Path(tmp) / "ledger")
        log = Path(tmp) / "validator.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        url = f"http://127.0.0.1:{port}"
        try:
            _wait_healthy(url, proc, log)
            yield Localnet(url, kind)
        finally:
            _stop(proc)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Stops the validator and anything it started (its own process group)."""
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue
