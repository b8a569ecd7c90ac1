"""A paid MCP server for the tests: tools priced with the gate's entries on an `MCPServer`,
decided by the gate's core against svcpay's real facilitator on the session's validator,
and `PayingSession` clients paying them with `PaymentAuth`."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
from mcp import Client
from mcp.server.mcpserver import MCPServer
from solders.keypair import Keypair

from svcpay.client import PaymentAuth, SpendingPolicy
from svcpay.gate import OneTime
from svcpay.gate.pricing import Terms
from svcpay.localnet.process import Localnet
from svcpay.mcp import PaidTools, PayingSession
from svcpay.protocol.memo import Memos
from svcpay.protocol.replay import MemoryReplayStore
from svcpay.schemes.mpp_charge.facilitator_client import ChargeFacilitatorClient
from svcpay.schemes.x402_exact.facilitator_client import X402FacilitatorClient
from tests.facilitator.test_x402 import Market, open_market
from tests.support.billing import USDC
from tests.support.chain import Chain

PRICE = USDC // 4
OTHER_PRICE = USDC // 5


@dataclass
class Shop:
    """The market (facilitator, merchant, mint), the paid server and what its tools did."""

    market: Market
    server: MCPServer
    paid: PaidTools
    calls: list[str] = field(default_factory=list)

    @property
    def chain(self) -> Chain:
        return self.market.chain

    def buyer(self, funds: int = USDC) -> Keypair:
        payer = self.chain.funded_keypair()
        self.chain.token_account(payer.pubkey(), self.market.mint, funds)
        return payer

    def auth(
        self,
        payer: Keypair,
        protocols: Sequence[str] = ("svcpay", "x402", "mpp"),
        max_per_request: int = USDC,
        policy: SpendingPolicy | None = None,
        **options: Any,
    ) -> PaymentAuth:
        return PaymentAuth(
            payer,
            rpc=self.market.fac.rpc,
            max_per_request=max_per_request,
            facilitator=self.market.fac.http,
            protocols=protocols,
            policy=policy,
            **options,
        )

    @asynccontextmanager
    async def client(self, auth: PaymentAuth) -> AsyncIterator[PayingSession]:
        async with Client(self.server, mode="legacy") as client:
            yield PayingSession(client.session, auth, server="weather")


def paid_server(market: Market, calls: list[str], **options: object) -> tuple[MCPServer, PaidTools]:
    server = MCPServer("weather")
    terms = Terms(
        pay_to=str(market.ata),
        token=str(market.mint),
        owner=str(market.merchant),
        fee_payer=market.fac.key,
    )
    settings: dict[str, object] = {
        "x402_facilitator": X402FacilitatorClient("http://fac", http=market.fac.http),
        "mpp_facilitator": ChargeFacilitatorClient("http://fac", http=market.fac.http),
        **options,
    }
    paid = PaidTools(
        server,
        terms=terms,
        memos=Memos(b"mcp-tools-memo-secret-0123456"),
        trusted_facilitators={market.fac.key},
        replay=settings.pop("replay", None) or MemoryReplayStore(),  # type: ignore[arg-type]
        **settings,  # type: ignore[arg-type]
    )

    @paid.tool(OneTime(PRICE))
    async def forecast(city: str) -> str:
        calls.append(f"forecast {city}")
        return f"sunny in {city}"

    @paid.tool(OneTime(OTHER_PRICE))
    async def tides(port: str) -> str:
        calls.append(f"tides {port}")
        return f"high tide at noon in {port}"

    @paid.tool(OneTime(PRICE))
    async def broken(city: str) -> str:
        calls.append(f"broken {city}")
        raise RuntimeError("the weather station is down")

    @server.tool()
    async def free(city: str) -> str:
        calls.append(f"free {city}")
        return f"cloudy in {city}"

    return server, paid


@pytest.fixture
async def shop(validator: Localnet, chain: Chain) -> AsyncIterator[Shop]:
    async with open_market(validator, chain) as market:
        calls: list[str] = []
        server, paid = paid_server(market, calls)
        yield Shop(market, server, paid, calls)
