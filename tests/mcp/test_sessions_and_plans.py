"""Sessions and subscriptions over MCP (issue 39), end to end on the local validator: a tool
priced `Session` is paid by vouchers in `_meta` (one transaction opens the session, each
call after it is a signature; the provider redeems what was served), and tools priced
`Subscription` serve a subscriber named in `_meta`, metered ones until the allowance runs
out. `PayingSession` keeps the session and the subscription across calls."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest
from mcp import Client
from mcp.server.mcpserver import MCPServer
from solders.keypair import Keypair
from solders.pubkey import Pubkey

from svcpay.client import PaymentAuth
from svcpay.gate import Session, Subscription
from svcpay.gate.chain import ChainMeter, ChainSubscriptions, session_scheme
from svcpay.gate.pricing import Terms
from svcpay.mcp import PaidTools, PayingSession, PaymentRequiredError
from svcpay.program.client import BillingClient
from svcpay.program.session_client import Sessions
from svcpay.protocol.errors import NoAcceptableOption
from svcpay.protocol.memo import Memos
from svcpay.protocol.replay import MemoryReplayStore
from svcpay.schemes.session.ledger import MemoryVoucherLedger
from tests.support.billing import USDC, subscribed
from tests.support.chain import Chain

pytestmark = pytest.mark.anyio
PRICE = 1_000  # 0.001 a call
DEPOSIT = 1_000 * PRICE
PERIOD = 3_600
SECRET = b"mcp-session-challenge-secret-0123"
Tool = Callable[[str], Awaitable[str]]


def server_with(paid_options: dict[str, object], terms: Terms) -> tuple[MCPServer, PaidTools]:
    server = MCPServer("weather")
    paid = PaidTools(
        server,
        terms=terms,
        memos=Memos(b"mcp-tools-memo-secret-0123456"),
        trusted_facilitators=set(),
        replay=MemoryReplayStore(),
        **paid_options,  # type: ignore[arg-type]
    )
    return server, paid


@dataclass
class SessionShop:
    server: MCPServer
    ledger: MemoryVoucherLedger
    provider: Keypair
    payer: Keypair
    recipient: Pubkey
    wallet: Pubkey
    served: list[str]


def session_shop(chain: Chain, client: BillingClient) -> SessionShop:
    """A tool priced `Session(PRICE)`, and a payer holding 10.00 of its mint."""
    provider, payer = chain.funded_keypair(), chain.funded_keypair()
    mint = chain.create_mint()
    recipient = chain.token_account(provider.pubkey(), mint)
    wallet = chain.token_account(payer.pubkey(), mint, 10 * USDC)
    terms = Terms(pay_to=str(recipient), token=str(mint))
    ledger = MemoryVoucherLedger()
    sessions = session_scheme(terms, client, SECRET, ledger)
    server, paid = server_with({"sessions": sessions}, terms)
    served: list[str] = []

    @paid.tool(Session(PRICE))
    async def forecast(city: str) -> str:
        served.append(city)
        return f"sunny in {city}"

    return SessionShop(server, ledger, provider, payer, recipient, wallet, served)


async def test_a_session_pays_each_call_with_a_voucher(chain: Chain, client: BillingClient) -> None:
    shop = session_shop(chain, client)
    server, ledger, served = shop.server, shop.ledger, shop.served
    provider, payer, recipient, wallet = shop.provider, shop.payer, shop.recipient, shop.wallet
    auth = PaymentAuth(payer, rpc=client.rpc, max_per_request=DEPOSIT, billing=client)
    async with Client(server, mode="legacy") as mcp_client:
        paying = PayingSession(mcp_client.session, auth, "weather")
        results = [await paying.call_tool("forecast", {"city": f"c{i}"}) for i in range(5)]
    assert [r.result.content[0].text for r in results] == [f"sunny in c{i}" for i in range(5)]
    assert {r.protocol for r in results} == {"mpp"}
    assert {r.receipt["intent"] for r in results} == {"session"}
    assert results[-1].receipt["acceptedCumulative"] == str(5 * PRICE)
    assert served == [f"c{i}" for i in range(5)]
    # One deposit left the wallet; the provider redeems exactly what was served.
    assert int(chain.token_state(wallet)["amount"]) == 10 * USDC - DEPOSIT
    vouchers = await ledger.unreported()
    assert [v.cumulative for v in vouchers] == [5 * PRICE]
    await Sessions(client).redeem(vouchers, provider)
    assert int(chain.token_state(recipient)["amount"]) == 5 * PRICE


async def test_a_subscriber_is_served_and_metered_until_the_cap(
    chain: Chain, client: BillingClient
) -> None:
    world = await subscribed(chain, client, amount=2 * USDC, period=PERIOD, overage=USDC)
    plan, destination, mint, biller = world.plan, world.destination, world.mint, world.biller
    subscriber, sub_id = world.subscriber, world.subscription
    terms = Terms(pay_to=str(destination), token=str(mint))
    options = {
        "subscriptions": ChainSubscriptions(client, ttl=0),
        "meter": ChainMeter(client, biller),
    }
    server, paid = server_with(options, terms)
    served: list[str] = []

    @paid.tool(Subscription(str(plan), 2 * USDC, PERIOD))
    async def forecast(city: str) -> str:
        served.append(f"forecast {city}")
        return f"sunny in {city}"

    @paid.tool(Subscription(str(plan), 2 * USDC, PERIOD, metered=USDC // 2))
    async def radar(city: str) -> str:
        served.append(f"radar {city}")
        return f"no rain over {city}"

    def auth(owner: Keypair, subscriptions: dict[str, str]) -> PaymentAuth:
        return PaymentAuth(owner, rpc=client.rpc, max_per_request=0, subscriptions=subscriptions)

    async with Client(server, mode="legacy") as mcp_client:
        stranger = PayingSession(mcp_client.session, auth(Keypair(), {}), "weather")
        with pytest.raises(NoAcceptableOption, match="subscriptions"):
            await stranger.call_tool("forecast", {"city": "Lisbon"})
        paying = PayingSession(mcp_client.session, auth(subscriber, {str(plan): str(sub_id)}))
        first = await paying.call_tool("forecast", {"city": "Lisbon"})
        again = await paying.call_tool("forecast", {"city": "Porto"})
        metered = [await paying.call_tool("radar", {"city": "Faro"}) for _ in range(2)]
        with pytest.raises(PaymentRequiredError) as spent:  # the allowance (1.00) is spent
            await paying.call_tool("radar", {"city": "Faro"})
    problem = spent.value.data.get("_meta", {}).get("svcpay/payment-required", {})
    assert problem.get("error") == "AllowanceExhausted", spent.value.data
    assert first.protocol == again.protocol == "subscription"
    assert first.receipt == {"subscription": str(sub_id)} and first.amount == 0
    assert [m.result.content[0].text for m in metered] == ["no rain over Faro"] * 2
    assert served == ["forecast Lisbon", "forecast Porto", "radar Faro", "radar Faro"]
    allowance = await client.fetch_allowance(sub_id)
    assert allowance is not None and allowance.used == USDC  # deducted on chain


async def test_a_hostile_server_naming_another_program_gets_nothing_signed(
    chain: Chain, client: BillingClient
) -> None:
    """A server that answers with a genuine session offer whose program is another (a
    deposit sent there would be lost) is refused before anything is signed or sent."""
    shop = session_shop(chain, client)
    async with Client(shop.server, mode="legacy") as genuine:
        asked = await genuine.session.call_tool("forecast", {"city": "Lisbon"})
    answer = asked.model_dump(by_alias=True, exclude_none=True, mode="json")
    [challenge] = answer["_meta"]["org.paymentauth/payment-required"]["challenges"]
    challenge["request"]["methodDetails"]["channelProgram"] = str(Keypair().pubkey())
    hostile = MCPServer("weather")

    async def answer_everything(ctx: Any, call_next: Any) -> Any:
        if ctx.method == "tools/call":
            return answer
        return await call_next(ctx)

    hostile.middleware.append(answer_everything)
    lamports = chain.balance(shop.payer.pubkey())
    auth = PaymentAuth(shop.payer, rpc=client.rpc, max_per_request=DEPOSIT, billing=client)
    async with Client(hostile, mode="legacy") as mcp_client:
        paying = PayingSession(mcp_client.session, auth, "weather")
        with pytest.raises(PaymentRequiredError):  # no offer it may pay: left unpaid
            await paying.call_tool("forecast", {"city": "Lisbon"})
    assert shop.served == []
    assert int(chain.token_state(shop.wallet)["amount"]) == 10 * USDC
    assert chain.balance(shop.payer.pubkey()) == lamports, "no transaction was paid for"
