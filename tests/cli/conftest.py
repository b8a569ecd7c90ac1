"""Running `svcpay` in process (`main([...])` with captured output) against the session's
local validator, and serving ASGI apps over real HTTP for `svcpay pay`."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractAsyncContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from solders.keypair import Keypair
from starlette.types import ASGIApp

from svcpay.cli import main
from svcpay.keys import save_keypair
from svcpay.localnet.process import Localnet


@dataclass
class Result:
    code: int
    out: str
    err: str

    @property
    def json(self) -> Any:
        return json.loads(self.out)


class Cli:
    """`cli("plan", "show", X)` runs `svcpay plan show X --url <validator>`."""

    def __init__(self, capsys: pytest.CaptureFixture[str], url: str | None) -> None:
        self.capsys, self.url = capsys, url

    def __call__(self, *argv: str) -> Result:
        self.capsys.readouterr()
        args = [*argv, "--url", self.url] if self.url and argv[0] != "localnet" else list(argv)
        code = main(args)
        captured = self.capsys.readouterr()
        assert "Traceback" not in captured.err, captured.err
        if code != 0:
            lines = captured.err.strip().splitlines()
            assert len(lines) == 1, f"expected one line on stderr, got: {captured.err!r}"
        return Result(code, captured.out, captured.err)

    def ok(self, *argv: str) -> Any:
        """Runs with --json, asserts success, returns the JSON object."""
        result = self(*argv, "--json")
        assert result.code == 0, result.err
        return result.json


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Never the user's keypair, RPC or Solana CLI config: defaults point at nothing."""
    from svcpay.cli import _common

    monkeypatch.setattr(_common, "SOLANA_CONFIG", tmp_path / "no-solana-config.yml")
    monkeypatch.setenv("SVCPAY_KEYPAIR", str(tmp_path / "no-default-keypair.json"))
    monkeypatch.delenv("SVCPAY_RPC_URL", raising=False)
    monkeypatch.delenv("SVCPAY_FACILITATOR_URL", raising=False)
    monkeypatch.delenv("SVCPAY_DEBUG", raising=False)


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], validator: Localnet) -> Cli:
    return Cli(capsys, validator.url)


@pytest.fixture
def offline_cli(capsys: pytest.CaptureFixture[str]) -> Cli:
    """For commands that need no validator (keys, usage errors)."""
    return Cli(capsys, None)


def keyfile(directory: Path, keypair: Keypair, name: str | None = None) -> str:
    """`keypair` saved as a Solana CLI keypair file; returns its path."""
    path = directory / (name or f"{keypair.pubkey()}.json")
    return str(save_keypair(keypair, path))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def serve(factory: Callable[[], AbstractAsyncContextManager[ASGIApp]]) -> Iterator[str]:
    """Serves the app `factory` yields over HTTP (uvicorn, in a thread with its own event
    loop, where the app is also built); yields its base URL."""
    port = free_port()
    ready = threading.Event()
    servers: list[uvicorn.Server] = []
    failures: list[BaseException] = []

    async def run() -> None:
        async with factory() as app:
            config = uvicorn.Config(
                app, host="127.0.0.1", port=port, log_level="warning", lifespan="off"
            )
            server = uvicorn.Server(config)
            servers.append(server)
            task = asyncio.create_task(server.serve())
            while not server.started and not task.done():
                await asyncio.sleep(0.02)
            ready.set()
            await task

    def target() -> None:
        try:
            asyncio.run(run())
        except BaseException as e:
            failures.append(e)
        finally:
            ready.set()

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    ready.wait(30)
    if failures or not servers or not servers[0].started:
        raise RuntimeError(f"the test server did not start: {failures}")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        servers[0].should_exit = True
        thread.join(15)
