"""The docs' "Your first paid request" (docs/guides/paying.md) runs as written: from empty
wallets to a paid request on the local validator, with `svcpay` commands only.

Each line of that page's `sh` block runs in bash, in a fresh directory with a fresh HOME,
as a separate process, in the order written. Only what the page names as stand-ins is
replaced: the ports (8899, 8402, 8000) by free ones, and MINT, PAY_TO, PLAN, CLIENT by the
address the line marked `# prints NAME` printed. Lines marked `runs until Ctrl-C` run in the
background until their ready line, and are stopped at the end.
"""

from __future__ import annotations

import json
import os
import re
import selectors
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from solders.pubkey import Pubkey

from tests.cli.conftest import free_port

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs/guides/paying.md"
HEADING = "## Your first paid request"
PORTS = ("8899", "8402", "8000")
READY_TIMEOUT = 90.0
BACKGROUND = "runs until Ctrl-C"


@dataclass
class Line:
    command: str
    prints: str | None  # the stand-in its output defines
    background: bool


def sh_block(heading: str = HEADING) -> list[Line]:
    """The commands of the first `sh` block under `heading`, with their markers."""
    text = PAGE.read_text()
    section = text[text.index(heading) :]
    match = re.search(r"```sh\n(.*?)```", section, re.S)
    assert match, f"no sh block under {heading}"
    lines = []
    for raw in match.group(1).splitlines():
        command, _, comment = raw.partition("  #")
        if not command.strip() or command.lstrip().startswith("#"):
            continue
        named = re.match(r"\s*prints ([A-Z_]+)", comment)
        lines.append(Line(command.strip(), named and named.group(1), BACKGROUND in comment))
    return lines


def first_address(text: str) -> str:
    for word in re.findall(r"[1-9A-HJ-NP-Za-km-z]{32,44}", text):
        try:
            return str(Pubkey.from_string(word))
        except ValueError:
            continue
    raise AssertionError(f"no address in {text!r}")


@contextmanager
def background(argv: list[str], cwd: Path, env: dict[str, str]) -> Iterator[subprocess.Popen[str]]:
    """Starts `argv`; returns once it prints a line with "ready"; stops it at the end."""
    proc = subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        seen: list[str] = []
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ)
            deadline = time.monotonic() + READY_TIMEOUT
            while not any("ready" in line for line in seen):
                left = deadline - time.monotonic()
                assert left > 0 and proc.poll() is None, f"{argv[-1]} did not start: {seen}"
                if sel.select(min(left, 1.0)):
                    line = proc.stdout.readline()
                    if line:
                        seen.append(line)
        yield proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C, as the page says
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)
        assert "Traceback" not in (proc.stdout.read() if proc.stdout else "")


def test_the_first_hour_runs_as_written(tmp_path: Path) -> None:
    home, work, bin_dir = tmp_path / "home", tmp_path / "work", tmp_path / "bin"
    for d in (home, work, bin_dir):
        d.mkdir()
    # `svcpay` is this checkout's command line (the installed script may be another's).
    shim = bin_dir / "svcpay"
    shim.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m svcpay.cli "$@"\n')
    shim.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SVCPAY_", "XDG_"))}
    env |= {
        "HOME": str(home),
        "PATH": f"{bin_dir}{os.pathsep}{env.get('PATH', '')}",
        "PYTHONPATH": os.pathsep.join([str(ROOT / "py"), str(ROOT)]),
    }
    ports = {port: str(free_port()) for port in PORTS}
    names: dict[str, str] = {}

    def concrete(command: str) -> str:
        for port, free in ports.items():
            command = re.sub(rf"(?<![0-9]){port}(?![0-9])", free, command)
        for name, value in names.items():
            command = re.sub(rf"\b{name}\b", value, command)
        return command

    lines = sh_block()
    assert [line.prints for line in lines if line.prints] == ["CLIENT", "MINT", "PAY_TO", "PLAN"]
    assert sum(line.background for line in lines) == 3
    outputs: list[str] = []
    with ExitStack() as stack:
        for line in lines:
            command = concrete(line.command)
            if export := re.fullmatch(r"export (\w+)=(\S+)", command):
                env[export.group(1)] = export.group(2)
                continue
            if line.background:
                stack.enter_context(background(["bash", "-c", f"exec {command}"], work, env))
                continue
            done = subprocess.run(
                ["bash", "-c", command],
                cwd=work,
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert done.returncode == 0, f"{command}\n{done.stdout}{done.stderr}"
            assert "Traceback" not in done.stderr, done.stderr
            outputs.append(done.stdout)
            if line.prints:
                names[line.prints] = first_address(done.stdout)

        paid, balance = outputs[-2], outputs[-1]
        assert paid.startswith("HTTP 200") and "paid 0.50 once" in paid, paid
        assert "the data" in paid, paid
        assert balance.strip() == "9.50", balance
        # The provider's account received what the client paid.
        provider = subprocess.run(
            ["bash", "-c", concrete("svcpay token balance MINT --account PAY_TO --json")],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert provider.returncode == 0, provider.stderr
        assert json.loads(provider.stdout)["amountDecimal"] == "0.50"
