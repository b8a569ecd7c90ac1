"""An in-process facilitator for tests: the real service and HTTP API (over ASGI, no socket,
no background loops), settling on the local validator, with its own SQLite database."""

from __future__ import annotations

import tempfile
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Confirmed
from solders.keypair import Keypair
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from svcpay.facilitator.app import create_app
from svcpay.facilitator.config import FacilitatorConfig
from svcpay.facilitator.service import Facilitator
from svcpay.protocol.headers import NETWORK_MAINNET

FACILITATOR_URL = "http://facilitator"


@dataclass
class InProcessFacilitator:
    service: Facilitator
    http: httpx.AsyncClient  # the facilitator's API (base_url FACILITATOR_URL)

    @property
    def rpc(self) -> AsyncClient:
        """The validator, as clients and the facilitator reach it."""
        return self.service.rpc

    @property
    def fee_payer(self) -> Keypair:
        """The facilitator's keypair: it pays settlement fees and signs proofs."""
        return self.service.keypair

    @property
    def key(self) -> str:
        return self.service.public_key


@asynccontextmanager
async def in_process_facilitator(
    rpc_url: str,
    fee_payer: Keypair,
    network: str = NETWORK_MAINNET,
    database_url: str = "",
    pay_to: Sequence[object] = (),
) -> AsyncIterator[InProcessFacilitator]:
    """The service on `database_url` (default: SQLite in a temporary directory); tests drive
    its background work (service.crank_once(), service.deliverer.run_once(), ...)."""
    with tempfile.TemporaryDirectory(prefix="svcpay-facilitator-") as tmp:
        config = FacilitatorConfig(
            keypair=fee_payer,
            rpc_url=rpc_url,
            database_url=database_url or f"sqlite:///{Path(tmp) / 'facilitator.db'}",
            network=network,
            webhook_allow_local=True,  # test receivers listen on loopback
        )
        service = Facilitator(config)
        if pay_to:  # it settles only payments to registered payTo accounts
            provider = await service.store.providers.create("test provider")
            for account in pay_to:
                await service.store.providers.add_resource(provider, "payTo", str(account))
        app = create_app(service, background=False)
        http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=FACILITATOR_URL)
        try:
            yield InProcessFacilitator(service, http)
        finally:
            await http.aclose()
            await service.aclose()


def proxy(client: httpx.AsyncClient) -> ASGIApp:
    """An ASGI app forwarding each request to `client` (the in-process facilitator)."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        reply = await client.request(
            request.method,
            request.url.path,
            content=await request.body(),
            headers={"content-type": request.headers.get("content-type", "application/json")},
        )
        media = reply.headers.get("content-type")
        await Response(reply.content, reply.status_code, media_type=media)(scope, receive, send)

    return app


async def index_all(service: Facilitator) -> None:
    """Runs the indexer until it has read the program's history up to now: it reads 500
    transactions a pass, oldest first, and the suite's validator holds every earlier
    test's. Other test processes may share the validator and add transactions meanwhile, so
    a pass can end past the newest transaction of now: done is "no longer after the cursor"
    (by the indexer's own listing), not "is the cursor"."""
    from svcpay.facilitator.indexer import _new_signatures
    from svcpay.facilitator.lifecycle import INDEXER_CURSOR

    program = service.billing.program_id
    found = await service.rpc.get_signatures_for_address(program, limit=1, commitment=Confirmed)
    if not found.value:
        return
    newest = str(found.value[0].signature)
    for _ in range(10_000):
        await service.index_once()
        cursor = await service.store.cursors.get(INDEXER_CURSOR)
        after = await _new_signatures(service.rpc, program, cursor, 1000, Confirmed)
        if cursor is not None and newest not in {sig for sig, _ in after}:
            return
    raise AssertionError("the indexer did not catch up")
