"""The right cluster or nothing, for the gate (issue 37, docs/adr/0038): a gate that reads
the chain refuses, at start, terms whose network is not its RPC node's cluster; the server is
told the startup failed, with one line naming both. A node it cannot read leaves the terms
unchecked (a warning), and a gate that reads no chain asks nothing."""

from __future__ import annotations

import asyncio
import logging
import socket
from typing import Any

import pytest
from solders.keypair import Keypair
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from svcpay.gate import OneTime, Subscription, payment_gate, payment_gate_wsgi
from svcpay.gate.chain import ChainSubscriptions
from svcpay.gate.pricing import Terms
from svcpay.localnet.process import Localnet
from svcpay.program.client import BillingClient
from svcpay.protocol.memo import Memos
from svcpay.protocol.replay import MemoryReplayStore
from svcpay.rpc.cluster import DEVNET, LOCALNET, MAINNET, STAND_IN_ENV, WrongCluster

pytestmark = pytest.mark.anyio


async def handler(request: Request) -> JSONResponse:
    return JSONResponse({"served": True})


def gate_kwargs(network: str, client: BillingClient | None) -> dict[str, Any]:
    plan = str(Keypair().pubkey())
    priced = Subscription(plan, 1_000_000, 30 * 86_400) if client else OneTime(1_000_000)
    return {
        "pricing": {"/v1/resource": [priced]},
        "terms": Terms(
            pay_to=str(Keypair().pubkey()), token=str(Keypair().pubkey()), network=network
        ),
        "memos": Memos(b"gate-memo-secret-0123456789"),
        "trusted_facilitators": set(),
        "replay": MemoryReplayStore(),
        "subscriptions": None if client is None else ChainSubscriptions(client, ttl=0),
    }


async def startup(app: Any) -> dict[str, Any]:
    """Runs the ASGI lifespan's startup, then its shutdown; the answer to the startup."""
    sent: list[dict[str, Any]] = []
    answered = asyncio.Event()
    inbox = [{"type": "lifespan.startup"}]

    async def receive() -> dict[str, Any]:
        if inbox:
            return inbox.pop(0)
        await answered.wait()
        return {"type": "lifespan.shutdown"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)
        answered.set()

    scope = {"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}
    await asyncio.wait_for(app(scope, receive, send), 30)
    return sent[0]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize(
    ("presented_as", "network", "refused"),
    [
        ("", LOCALNET, False),
        ("", MAINNET, True),  # Terms' default network, on a local validator
        (MAINNET, MAINNET, False),
        (MAINNET, DEVNET, True),
        ("", "solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1", True),  # devnet's CAIP-2 name
    ],
)
async def test_a_gate_that_reads_the_chain_refuses_terms_of_another_cluster_at_start(
    validator: Localnet,
    monkeypatch: pytest.MonkeyPatch,
    presented_as: str,
    network: str,
    refused: bool,
) -> None:
    monkeypatch.setenv(STAND_IN_ENV, presented_as)
    client = BillingClient.connect(validator.url)
    try:
        app = Starlette(routes=[Route("/v1/resource", handler)])
        answer = await startup(payment_gate(app, **gate_kwargs(network, client)))
    finally:
        await client.close()
    if not refused:
        assert answer == {"type": "lifespan.startup.complete"}
        return
    assert answer["type"] == "lifespan.startup.failed"
    message = answer["message"]
    assert message.startswith(f"the gate's terms are on {network}, but its RPC node is a local")
    assert "\n" not in message and "Terms(network=" in message
    if presented_as or network == MAINNET:
        assert f"{STAND_IN_ENV}=" in message  # a local validator can be presented as it


async def test_a_node_that_cannot_be_read_leaves_the_terms_unchecked(
    caplog: pytest.LogCaptureFixture,
) -> None:
    client = BillingClient.connect(f"http://127.0.0.1:{closed_port()}")
    caplog.set_level(logging.WARNING, logger="svcpay.gate")
    try:
        app = Starlette(routes=[Route("/v1/resource", handler)])
        answer = await startup(payment_gate(app, **gate_kwargs(DEVNET, client)))
    finally:
        await client.close()
    assert answer == {"type": "lifespan.startup.complete"}
    assert [r.getMessage() for r in caplog.records] == [
        "gate: the RPC node's cluster could not be read (SolanaRpcException): terms on "
        "solana-devnet are unchecked"
    ]


async def test_a_gate_that_reads_no_chain_starts_whatever_its_network() -> None:
    app = Starlette(routes=[Route("/v1/resource", handler)])
    answer = await startup(payment_gate(app, **gate_kwargs(DEVNET, None)))
    assert answer == {"type": "lifespan.startup.complete"}


def test_the_wsgi_adapter_checks_when_asked(
    validator: Localnet, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(STAND_IN_ENV, "")
    client = BillingClient.connect(validator.url)

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        start_response("200 OK", [])
        return [b"{}"]

    with payment_gate_wsgi(app, **gate_kwargs(DEVNET, client)) as gate:
        with pytest.raises(WrongCluster, match="terms are on solana-devnet, but its RPC node"):
            gate.check_cluster()
        gate.run(client.close())
    client = BillingClient.connect(validator.url)
    with payment_gate_wsgi(app, **gate_kwargs(LOCALNET, client)) as gate:
        gate.check_cluster()  # its own cluster: nothing raised
        gate.run(client.close())


async def test_paid_mcp_tools_check_when_asked(
    validator: Localnet, monkeypatch: pytest.MonkeyPatch
) -> None:
    from svcpay.mcp.server import PaidTools

    monkeypatch.setenv(STAND_IN_ENV, "")
    client = BillingClient.connect(validator.url)
    try:
        for network, refused in ((DEVNET, True), (LOCALNET, False)):
            kwargs = gate_kwargs(network, client)
            del kwargs["pricing"]
            paid = PaidTools(None, **kwargs)
            if refused:
                with pytest.raises(WrongCluster, match="terms are on solana-devnet"):
                    await paid.check_cluster()
            else:
                await paid.check_cluster()
    finally:
        await client.close()
