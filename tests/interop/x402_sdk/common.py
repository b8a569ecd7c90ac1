"""What the SDK programs here share: keypair files, serving an app and saying when it is
ready. Runs in the SDK's environment (scripts/x402-sdk), never in svcpay's."""

from __future__ import annotations

import asyncio
import json
import signal
from contextlib import suppress
from pathlib import Path

import uvicorn
from solders.keypair import Keypair


def load_keypair(path: str) -> Keypair:
    """A keypair file in the Solana CLI's format (a JSON array of 64 bytes)."""
    return Keypair.from_bytes(bytes(json.loads(Path(path).read_text())))


def serve(app: object, host: str, port: int, name: str) -> None:
    """Serves `app`; prints `<name> ready http://host:port` once it listens (port 0: any free
    port). SIGTERM stops it as SIGINT does."""
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning"))

    async def main() -> None:
        task = asyncio.create_task(server.serve())
        while not server.started and not task.done():
            await asyncio.sleep(0.02)
        if server.started:
            bound = server.servers[0].sockets[0].getsockname()[1]
            print(f"{name} ready http://{host}:{bound}", flush=True)
        await task

    signal.signal(signal.SIGTERM, signal.default_int_handler)
    with suppress(KeyboardInterrupt):
        asyncio.run(main())
