"""Paid MCP tools against the TypeScript MPP SDK's MCP transport (mppx 0.11.0, `mppx/mcp`,
with @solana/mpp 0.6.0's Solana charge; pinned in tests/interop/mppx/package-lock.json,
installed by scripts/mppx), both ways, over streamable HTTP between separate processes, on
the local validator presented as Solana devnet; money moves on chain (issue 39):
- mppx's MCP client pays svcpay's `PaidTools`, whose charge svcpay's facilitator settles;
- svcpay's `PayingSession` pays an MCP server paid through mppx's MCP SDK transport, whose
  charge @solana/mpp's server co-signs, sends and checks itself."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import pytest
import uvicorn
from mcp import Client
from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPError
from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Confirmed

from svcpay.client import PaymentAuth
from svcpay.gate import OneTime
from svcpay.gate.pricing import Terms
from svcpay.keys import save_keypair
from svcpay.localnet.process import Localnet
from svcpay.mcp import PaidTools, PayingSession
from svcpay.mcp.server import Answer
from svcpay.protocol.memo import Memos
from svcpay.protocol.replay import MemoryReplayStore
from svcpay.schemes.mpp_charge.facilitator_client import ChargeFacilitatorClient
from svcpay.schemes.x402_exact.facilitator_client import X402FacilitatorClient
from tests.cli.conftest import free_port
from tests.interop.conftest import SVCPAY_DEVNET, Market, Mppx, Svcpay, finalize
from tests.interop.test_x402_sdk import PRICE, balances
from tests.support.billing import USDC, Billing
from tests.support.chain import Chain

RECEIPT = "org.paymentauth/receipt"


@contextmanager
def paid_tools(facilitator: str, market: Market, calls: list[str], answer: Answer) -> Iterator[str]:
    """svcpay's `PaidTools` on an `MCPServer` (`forecast` costs PRICE, paid to `market`'s
    seller through `facilitator`; `answer`: how it asks for payment), served over streamable
    HTTP by uvicorn in a thread with its own event loop: its endpoint."""
    server = MCPServer("weather")
    terms = Terms(
        pay_to=str(market.seller_account),
        token=str(market.mint),
        network=SVCPAY_DEVNET,
        owner=str(market.seller),
        fee_payer=str(market.fee_payer.pubkey()),
    )
    paid = PaidTools(
        server,
        terms=terms,
        memos=Memos(b"mppx-interop-memo-secret-0123"),
        trusted_facilitators={str(market.fee_payer.pubkey())},
        replay=MemoryReplayStore(),
        x402_facilitator=X402FacilitatorClient(facilitator),
        mpp_facilitator=ChargeFacilitatorClient(facilitator),
        answer=answer,
    )

    @paid.tool(OneTime(PRICE))
    async def forecast(city: str) -> str:
        calls.append(f"forecast {city}")
        return f"sunny in {city}"

    port = free_port()
    config = uvicorn.Config(
        server.streamable_http_app(), host="127.0.0.1", port=port, log_level="warning"
    )
    web = uvicorn.Server(config)
    thread = threading.Thread(target=web.run, name="paid-tools", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not web.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        web.should_exit = True
        thread.join(15)


@pytest.mark.parametrize("answer", ["auto", "mpp"])
def test_the_mppx_client_pays_paid_tools(
    mppx: Mppx, svcpay: Svcpay, market: Market, chain: Chain, answer: Answer
) -> None:
    """mppx's McpClient (solana charge) calls svcpay's paid tool: the challenges come in the
    tool result's `_meta` (auto: mppx declares no payment capability) or in MPP's -32042
    error, the credential goes in `_meta`, svcpay's facilitator co-signs and settles the
    pull; served once, the receipt in the result's `_meta`, money moved once."""
    facilitator = svcpay.facilitator(market.fee_payer)
    calls: list[str] = []
    before = balances(chain, market)
    with paid_tools(facilitator, market, calls, answer) as url:
        status, report = mppx.call(url, market, "forecast", {"city": "Lisbon"})

    assert status == 0, report
    assert report["isError"] is False, report
    assert report["content"] == [{"type": "text", "text": "sunny in Lisbon"}], report
    challenge = report["challenge"]
    assert isinstance(challenge, dict), report
    assert (challenge["method"], challenge["intent"]) == ("solana", "charge"), challenge
    details = challenge["request"]["methodDetails"]
    assert (details["network"], details["feePayer"]) == ("devnet", True), challenge
    assert details["feePayerKey"] == str(market.fee_payer.pubkey()), challenge
    receipt = report["receipt"]
    assert isinstance(receipt, dict) and receipt == report["_meta"][RECEIPT], report  # type: ignore[index]
    assert (receipt["status"], receipt["method"]) == ("success", "solana"), receipt
    assert receipt["challengeId"] == challenge["id"] and receipt["reference"], receipt
    assert calls == ["forecast Lisbon"]
    assert balances(chain, market) == (before[0] - PRICE, before[1] + PRICE)


def test_a_charge_the_payer_cannot_cover_is_refused_to_mppx(
    mppx: Mppx, svcpay: Svcpay, market: Market, chain: Chain, billing: Billing, tmp_path: Path
) -> None:
    """mppx's client pays from an account short of the price: svcpay's facilitator refuses
    the charge, the answer is MPP's -32043 with fresh challenges, which mppx pays again (up
    to its three attempts) and then gives up with that error; nothing moves."""
    poor = chain.funded_keypair()
    account = billing.token_account(poor.pubkey(), market.mint, PRICE - 1)
    finalize(chain, account)
    short = replace(
        market, buyer=poor, buyer_account=account, buyer_file=save_keypair(poor, tmp_path / "p")
    )
    facilitator = svcpay.facilitator(market.fee_payer)
    before = balances(chain, short)
    with paid_tools(facilitator, short, [], "auto") as url:
        status, report = mppx.call(url, short, "forecast", {"city": "Lisbon"})

    assert status == 1 and report["code"] == -32043, report
    data = report["data"]
    assert isinstance(data, dict) and data["httpStatus"] == 402, report
    assert data["challenges"] and "insufficient funds" in str(report["error"]), report
    assert balances(chain, short) == before


@pytest.mark.anyio
async def test_paying_session_pays_the_mppx_server(
    mppx: Mppx, market: Market, chain: Chain, validator: Localnet
) -> None:
    """svcpay's PayingSession (PaymentAuth, MPP only) against an MCP server paid through
    mppx's MCP SDK transport and @solana/mpp's charge, which co-signs, sends and checks the
    transaction itself: -32042 answered, paid, the receipt read, money moved once."""
    server = mppx.server(market, PRICE)
    before = balances(chain, market)
    rpc = AsyncClient(validator.url, commitment=Confirmed)
    auth = PaymentAuth(market.buyer, rpc=rpc, max_per_request=USDC, protocols=("mpp",))
    try:
        async with (
            Client(server, mode="legacy") as client,
            PayingSession(client.session, auth, "mppx-weather") as paying,
        ):
            with pytest.raises(MCPError) as asked:
                await client.session.call_tool("forecast", {"city": "Lisbon"})
            paid = await paying.call_tool("forecast", {"city": "Lisbon"})
            free = await paying.call_tool("free", {"city": "Porto"})
    finally:
        await rpc.close()

    assert (asked.value.error.code, asked.value.error.data["httpStatus"]) == (-32042, 402)
    (challenge,) = asked.value.error.data["challenges"]
    assert (challenge["method"], challenge["request"]["methodDetails"]["feePayer"]) == (
        "solana",
        True,
    ), challenge
    assert not paid.is_error, paid.result
    assert paid.result.content[0].text == "sunny in Lisbon"
    assert (paid.protocol, paid.amount, paid.pending) == ("mpp", PRICE, False), paid
    assert (paid.receipt["status"], paid.receipt["method"]) == ("success", "solana"), paid
    assert paid.receipt["reference"], paid.receipt
    assert free.protocol is None and free.result.content[0].text == "cloudy in Porto"
    assert balances(chain, market) == (before[0] - PRICE, before[1] + PRICE)


def test_the_mppx_client_pays_its_own_server(mppx: Mppx, market: Market, chain: Chain) -> None:
    """The harness alone (mppx's client and server, @solana/mpp on both sides): it proves the
    programs and the validator, so a failure in the other tests is svcpay's. Its client
    waits until the server's `confirmed` recentBlockhash is finalized (~13 s): the server
    preflights its send at `finalized` and refuses its own client's payment otherwise
    ("Blockhash not found"; svcpay's client takes a finalized blockhash for a pull)."""
    server = mppx.server(market, PRICE)
    before = balances(chain, market)

    status, report = mppx.call(server, market, "forecast", {"city": "Lisbon"}, await_finalized=True)

    assert status == 0, report
    assert report["content"] == [{"type": "text", "text": "sunny in Lisbon"}], report
    assert report["receipt"]["status"] == "success", report  # type: ignore[index]
    assert balances(chain, market) == (before[0] - PRICE, before[1] + PRICE)
