"""A TCP switch in front of a server (the validator's RPC port, a database): connections pass
through while it is on; off refuses new ones and closes the open ones, as an outage would."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from urllib.parse import urlparse

import pytest

from svcpay.localnet.process import Localnet


class Switch:
    """A TCP proxy to the validator on a fixed port, that can be cut (connections refused,
    open ones closed) and restored."""

    def __init__(self, target: str, delay: float = 0.0) -> None:
        """`delay`: seconds each chunk sent upstream waits (a slow link), 0 for none."""
        self.delay = delay
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

    async def _pipe(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float = 0.0
    ) -> None:
        try:
            while data := await reader.read(65536):
                if delay:
                    await asyncio.sleep(delay)
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
        await asyncio.gather(
            self._pipe(reader, up_writer, self.delay), self._pipe(up_reader, writer)
        )

    async def on(self) -> None:
        self.server = await asyncio.start_server(self._client, "127.0.0.1", self.port)

    async def off(self) -> None:
        if self.server is not None:
            self.server.close()
            self.server = None
        for writer in self.open:
            writer.close()
        self.open.clear()


@pytest.fixture
async def switch(validator: Localnet) -> AsyncIterator[Switch]:
    """A switch, on, in front of the session's validator."""
    s = Switch(validator.url)
    await s.on()
    yield s
    await s.off()
