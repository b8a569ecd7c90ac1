"""An RPC outage in the facilitator's background loops is one warning when the node goes
away and one when it is back: not a traceback per attempt (issue 17)."""

from __future__ import annotations

import asyncio
import logging
import socket
from pathlib import Path
from urllib.parse import urlparse

import pytest
from solders.keypair import Keypair

from svcpay.facilitator.config import FacilitatorConfig
from svcpay.facilitator.service import Facilitator
from svcpay.localnet.process import Localnet

pytestmark = pytest.mark.anyio


class Switch:
    """A TCP proxy to the validator on a fixed port, that can be cut (connections refused,
    open ones closed) and restored."""

    def __init__(self, target: str) -> None:
        parsed = urlparse(target)
        self.target = (parsed.hostname or "127.0.0.1", parsed.port or 80)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.server: asyncio.Server | None = None
        self.open: set[asyncio.StreamWriter] = set()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # A connection accepted just before `off()` must not outlive it: register it at once,
        # and drop it if the switch was cut while the upstream connection was being opened
        # (otherwise a pass slips through mid-outage and logs an extra "back"/"unreachable").
        server = self.server
        self.open.add(writer)
        up_reader, up_writer = await asyncio.open_connection(*self.target)
        if self.server is None or self.server is not server:
            up_writer.close()
            writer.close()
            return
        self.open.add(up_writer)
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))

    async def on(self) -> None:
        self.server = await asyncio.start_server(self._client, "127.0.0.1", self.port)

    async def off(self) -> None:
        if self.server is not None:
            self.server.close()
            self.server = None
        for writer in self.open:
            writer.close()
        self.open.clear()


def records(caplog: pytest.LogCaptureFixture, text: str) -> int:
    return sum(text in r.getMessage() for r in caplog.records)


async def test_an_outage_logs_one_line_down_and_one_line_back(
    validator: Localnet, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    switch = Switch(validator.url)
    config = FacilitatorConfig(
        keypair=Keypair(),
        rpc_url=switch.url,
        database_url=f"sqlite:///{tmp_path / 'f.db'}",
        crank_interval_secs=0.05,
        indexer_interval_secs=0.05,
        webhook_interval_secs=0.05,
    )
    service = Facilitator(config)
    stop = asyncio.Event()
    caplog.set_level(logging.INFO, logger="svcpay.facilitator")
    background = asyncio.create_task(service.run_background(stop))
    try:
        await asyncio.sleep(1.0)  # about 20 indexer passes against a closed port
        assert records(caplog, "rpc unreachable: ") == 1
        assert records(caplog, "pass failed") == 0
        assert not any(r.exc_info for r in caplog.records)

        await switch.on()
        for _ in range(100):
            if records(caplog, "rpc back"):
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.5)  # more passes, now answered
        assert (records(caplog, "rpc unreachable"), records(caplog, "rpc back")) == (1, 1)

        await switch.off()  # a second outage is a second pair of lines
        await asyncio.sleep(0.5)
        await switch.on()
        for _ in range(100):
            if records(caplog, "rpc back") == 2:
                break
            await asyncio.sleep(0.05)
        assert (records(caplog, "rpc unreachable"), records(caplog, "rpc back")) == (2, 2)
        assert not any(r.levelno >= logging.ERROR for r in caplog.records)
    finally:
        stop.set()
        await background
        await switch.off()
        await service.aclose()
