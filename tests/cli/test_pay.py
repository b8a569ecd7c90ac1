"""`svcpay pay URL` over real HTTP: a gate (one-time and subscription routes), the example
resource server and an x402 server, with the facilitator served by uvicorn, payments
settled on the local validator. The URL and a keypair are all the command needs."""

from __future__ import annotations

import io
import os
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Confirmed
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import ASGIApp

from svcpay.client import PaymentAuth
from svcpay.examples.resource_server import Settings, create_app
from svcpay.gate import OneTime, Subscription, payment_gate
from svcpay.gate.chain import ChainSubscriptions
from svcpay.gate.pricing import Terms
from svcpay.keys import save_keypair
from svcpay.localnet.process import Localnet
from svcpay.program import pda
from svcpay.program.client import BillingClient
from svcpay.protocol import mpp
from svcpay.protocol.memo import Memos
from svcpay.protocol.replay import MemoryReplayStore
from tests.cli.conftest import Cli, free_port, keyfile, serve
from tests.support.billing import DAY, USDC, Billing, create_plan_ix
from tests.support.chain import Chain
from tests.support.facilitator import in_process_facilitator, proxy
from tests.support.x402_shop import Shop

PRICE = USDC // 2
PLAN_PRICE = 3 * USDC


@dataclass
class World:
    chain: Chain
    api: str  # the gate's base URL
    facilitator: str  # the facilitator's base URL
    mint: Pubkey
    destination: Pubkey
    plan: Pubkey

    def wallet(self, tmp_path: Path, balance: int = 5 * USDC) -> tuple[str, Keypair, Pubkey]:
        """A funded client: its keypair file, keypair and token account."""
        kp = self.chain.funded_keypair()
        account = self.chain.token_account(kp.pubkey(), self.mint, balance)
        return keyfile(tmp_path, kp), kp, account

    def balance(self, account: Pubkey) -> int:
        return int(self.chain.token_state(account)["amount"])


async def resource(request: Request) -> JSONResponse:
    return JSONResponse({"data": 42, "path": request.url.path})


@pytest.fixture(scope="module")
def world(validator: Localnet) -> Iterator[World]:
    chain = Chain(validator.url, validator.can_time_travel)
    provider, fee_payer = chain.funded_keypair(), chain.funded_keypair()
    mint = chain.create_mint()
    destination = chain.token_account(provider.pubkey(), mint)
    chain.send_ok(
        [create_plan_ix(provider.pubkey(), 1, mint, destination, fee_payer.pubkey(),
                        PLAN_PRICE, 30 * DAY)],
        [provider],
    )  # fmt: skip
    plan = pda.plan_address(provider.pubkey(), 1)

    @asynccontextmanager
    async def facilitator_app() -> AsyncIterator[ASGIApp]:
        async with in_process_facilitator(
            validator.url, fee_payer, pay_to=[destination]
        ) as facilitator:
            yield proxy(facilitator.http)

    with serve(facilitator_app) as facilitator_url:

        @asynccontextmanager
        async def gate_app() -> AsyncIterator[ASGIApp]:
            billing = BillingClient.connect(validator.url)
            routes = [Route(p, resource, methods=["GET", "POST"])
                      for p in ("/v1/data", "/v1/resource", "/free")]  # fmt: skip
            yield payment_gate(
                Starlette(routes=routes),
                pricing={
                    "/v1/data": [OneTime(PRICE)],
                    "/v1/resource": [Subscription(str(plan), PLAN_PRICE, 30 * DAY)],
                },
                terms=Terms(
                    pay_to=str(destination),
                    token=str(mint),
                    facilitator=facilitator_url,
                    owner=str(provider.pubkey()),  # x402 and MPP too, settled by the same
                    fee_payer=str(fee_payer.pubkey()),
                ),
                memos=Memos(os.urandom(32)),
                trusted_facilitators={str(fee_payer.pubkey())},
                replay=MemoryReplayStore(),
                subscriptions=ChainSubscriptions(billing, ttl=0),
            )
            await billing.close()

        with serve(gate_app) as api_url:
            yield World(chain, api_url, facilitator_url, mint, destination, plan)


def test_a_one_time_payment_is_made_and_the_body_printed(
    cli: Cli, world: World, tmp_path: Path
) -> None:
    key, _, account = world.wallet(tmp_path)
    before = world.balance(world.destination)

    paid = cli.ok("pay", f"{world.api}/v1/data", "--facilitator", world.facilitator,
                  "--max-amount", "0.50", "--keypair", key)  # fmt: skip

    assert paid["status"] == 200 and paid["body"] == {"data": 42, "path": "/v1/data"}
    payment = paid["payment"]
    assert payment["kind"] == "one-time"
    assert (payment["amount"], payment["amountDecimal"]) == (PRICE, "0.50")
    assert payment["payTo"] == str(world.destination) and payment["transaction"]
    assert world.balance(account) == 5 * USDC - PRICE
    assert world.balance(world.destination) == before + PRICE

    human = cli("pay", f"{world.api}/v1/data", "--facilitator", world.facilitator,
                "--keypair", key)  # fmt: skip
    assert human.code == 0
    assert human.out.startswith("HTTP 200 OK\npaid 0.50 once (500000 base units of ")
    assert '"data": 42' in human.out
    assert world.balance(account) == 5 * USDC - 2 * PRICE


def test_the_spending_limit_declines_before_money_moves(
    cli: Cli, world: World, tmp_path: Path
) -> None:
    key, _, account = world.wallet(tmp_path)

    declined = cli("pay", f"{world.api}/v1/data", "--facilitator", world.facilitator,
                   "--max-amount", "0.49", "--keypair", key)  # fmt: skip

    assert declined.code == 4
    assert declined.err.startswith("svcpay: SpendingLimitExceeded: ")
    assert "--max-amount" in declined.err
    assert world.balance(account) == 5 * USDC


def test_insufficient_funds_is_a_declined_payment(cli: Cli, world: World, tmp_path: Path) -> None:
    key, _, account = world.wallet(tmp_path, balance=PRICE - 1)
    declined = cli("pay", f"{world.api}/v1/data", "--facilitator", world.facilitator,
                   "--keypair", key)  # fmt: skip
    assert declined.code == 4 and declined.err.startswith("svcpay: InsufficientFunds: ")
    assert world.balance(account) == PRICE - 1


def test_a_subscription_is_created_once_then_used(cli: Cli, world: World, tmp_path: Path) -> None:
    key, kp, account = world.wallet(tmp_path)
    url = f"{world.api}/v1/resource"

    refused = cli("pay", url, "--max-amount", "3", "--keypair", key)  # no terminal to ask
    assert refused.code == 4 and "--yes" in refused.err
    too_dear = cli("pay", url, "--subscribe", "--keypair", key)  # default limit: 1 token
    assert too_dear.code == 4 and "SpendingLimitExceeded" in too_dear.err

    subscribed = cli.ok("pay", url, "--subscribe", "--max-amount", "3", "--keypair", key)

    sub_id = str(pda.subscription_address(world.plan, kp.pubkey()))
    assert subscribed["status"] == 200
    assert subscribed["payment"] == {"kind": "subscription", "subscription": sub_id, "new": True}
    assert world.balance(account) == 5 * USDC - PLAN_PRICE
    again = cli.ok("pay", url, "--keypair", key)  # found on chain, no --subscribe needed
    assert again["payment"] == {"kind": "subscription", "subscription": sub_id, "new": False}
    assert world.balance(account) == 5 * USDC - PLAN_PRICE


def test_a_free_url_needs_no_keypair_or_payment(cli: Cli, world: World) -> None:
    free = cli.ok("pay", f"{world.api}/free", "--data", '{"q": 1}')
    assert (free["status"], free["method"], free["payment"]) == (200, "POST", None)
    missing = cli("pay", f"{world.api}/nothing-here")
    assert missing.code == 1 and "404" in missing.err


def test_payment_problems_are_reported_in_one_line(cli: Cli, world: World, tmp_path: Path) -> None:
    key, _, _ = world.wallet(tmp_path)
    nowhere = f"http://127.0.0.1:{free_port()}"

    unreachable = cli("pay", f"{nowhere}/v1/data", "--keypair", key)
    assert unreachable.code == 1
    assert unreachable.err.startswith(f"svcpay: cannot reach {nowhere}/v1/data at {nowhere}")

    dead_facilitator = cli("pay", f"{world.api}/v1/data", "--facilitator", nowhere,
                           "--keypair", key)  # fmt: skip
    assert dead_facilitator.code == 1
    assert dead_facilitator.err.startswith(f"svcpay: cannot reach the facilitator at {nowhere}")

    no_key = cli("pay", f"{world.api}/v1/data", "--keypair", str(tmp_path / "none.json"))
    assert no_key.code == 2 and "svcpay keys create" in no_key.err


class Terminal(io.StringIO):
    """stdin as a person at a terminal types it."""

    def isatty(self) -> bool:
        return True


def test_the_terms_name_the_facilitator(cli: Cli, world: World, tmp_path: Path) -> None:
    key, _, account = world.wallet(tmp_path)
    paid = cli.ok("pay", f"{world.api}/v1/data", "--keypair", key)  # no --facilitator
    assert paid["status"] == 200 and paid["payment"]["kind"] == "one-time"
    assert paid["payment"]["facilitator"] and world.balance(account) == 5 * USDC - PRICE


def test_subscribing_asks_first_on_a_terminal(
    cli: Cli, world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key, kp, account = world.wallet(tmp_path)
    url = f"{world.api}/v1/resource"

    monkeypatch.setattr(sys, "stdin", Terminal("n\n"))
    declined = cli("pay", url, "--max-amount", "3", "--keypair", key)
    assert declined.code == 4 and "Subscribe to plan" in declined.err.splitlines()[0]
    assert world.balance(account) == 5 * USDC

    monkeypatch.setattr(sys, "stdin", Terminal("y\n"))
    subscribed = cli("pay", url, "--max-amount", "3", "--keypair", key)
    assert subscribed.code == 0, subscribed.err
    sub_id = str(pda.subscription_address(world.plan, kp.pubkey()))
    assert f"subscribed: new subscription {sub_id}" in subscribed.out
    assert world.balance(account) == 5 * USDC - PLAN_PRICE


# -- the example resource server, with nothing but a keypair and its URL --------------------
@dataclass
class Example:
    api: str
    chain: Chain
    mint: Pubkey
    destination: Pubkey
    plan: Pubkey


@pytest.fixture(scope="module")
def example(validator: Localnet, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Example]:
    """py/svcpay/examples/resource_server.py configured as its docstring says, with a
    facilitator, both served over HTTP."""
    chain = Chain(validator.url, validator.can_time_travel)
    billing = Billing(chain)
    plan = billing.plan(amount=PLAN_PRICE, period_secs=30 * DAY)
    metered = billing.plan(amount=USDC, mint=plan.mint)
    tmp = tmp_path_factory.mktemp("example")
    authority_file = save_keypair(metered.billing_authority, tmp / "billing-authority.json")

    @asynccontextmanager
    async def facilitator_app() -> AsyncIterator[ASGIApp]:
        async with in_process_facilitator(
            validator.url, chain.funded_keypair(), pay_to=[plan.destination]
        ) as facilitator:
            yield proxy(facilitator.http)

    with serve(facilitator_app) as facilitator_url:
        settings = Settings(
            facilitator_url=facilitator_url,
            pay_to=str(plan.destination),
            mint=str(plan.mint),
            subscription_plan=str(plan.address),
            metered_plan=str(metered.address),
            billing_authority=authority_file,
            rpc_url=validator.url,
            state_db=tmp / "state.db",
        )

        @asynccontextmanager
        async def api_app() -> AsyncIterator[ASGIApp]:
            app = create_app(settings)
            async with app.router.lifespan_context(app):
                yield app

        with serve(api_app) as api_url:
            yield Example(api_url, chain, plan.mint, plan.destination, plan.address)


def test_the_example_api_is_paid_with_only_a_keypair_and_its_url(
    cli: Cli, example: Example, tmp_path: Path
) -> None:
    kp = example.chain.funded_keypair()
    account = example.chain.token_account(kp.pubkey(), example.mint, 20 * USDC)
    key = keyfile(tmp_path, kp)
    balance = lambda: int(example.chain.token_state(account)["amount"])  # noqa: E731

    data = cli("pay", f"{example.api}/v1/data", "--keypair", key)

    assert data.code == 0, data.err
    assert data.out.startswith("HTTP 200 OK\npaid 0.50 once (500000 base units of ")
    assert '"data": "the data"' in data.out and f'"paidBy": "{kp.pubkey()}"' in data.out
    assert balance() == 20 * USDC - 500_000

    url = f"{example.api}/v1/resource"
    dear = cli("pay", url, "--yes", "--keypair", key)  # the plan costs 3, the default limit 1
    assert dear.code == 4 and "SpendingLimitExceeded" in dear.err
    subscribed = cli.ok("pay", url, "--yes", "--max-amount", "3", "--keypair", key)
    sub_id = str(pda.subscription_address(example.plan, kp.pubkey()))
    assert subscribed["payment"] == {"kind": "subscription", "subscription": sub_id, "new": True}
    assert subscribed["body"] == {"resource": "the resource", "paidBy": sub_id}
    held = cli.ok("pay", url, "--keypair", key)
    assert held["payment"] == {"kind": "subscription", "subscription": sub_id, "new": False}
    assert balance() == 20 * USDC - 500_000 - PLAN_PRICE


# -- an x402 server ------------------------------------------------------------------------
@pytest.mark.parametrize("version", [2, 1])
def test_an_x402_server_is_paid_and_the_settlement_printed(
    cli: Cli, world: World, tmp_path: Path, version: int
) -> None:
    key, kp, account = world.wallet(tmp_path)
    seller = Keypair().pubkey()
    seller_account = world.chain.token_account(seller, world.mint)
    shop = Shop(world.chain.url, world.chain.funded_keypair(), world.mint, seller, PRICE,
                version=version)  # fmt: skip

    @asynccontextmanager
    async def shop_app() -> AsyncIterator[ASGIApp]:
        yield shop.app()

    with serve(shop_app) as url:
        low = cli("pay", f"{url}/paid", "--max-amount", "0.49", "--keypair", key)
        assert low.code == 4 and low.err.startswith("svcpay: SpendingLimitExceeded: ")
        assert shop.payments == 0

        paid = cli.ok("pay", f"{url}/paid", "--keypair", key)

        shop.refuse = "invalid_exact_svm_payload_amount_insufficient"
        refused = cli("pay", f"{url}/paid", "--keypair", key)

    assert (paid["status"], paid["body"]) == (200, {"answer": "paid content"})
    payment = paid["payment"]
    assert (payment["kind"], payment["x402Version"], payment["amountDecimal"]) == (
        "x402",
        version,
        "0.50",
    )
    assert payment["payTo"] == str(seller_account) and payment["token"] == str(world.mint)
    assert payment["transaction"] == shop.settled[0] and payment["settlement"]["success"]
    assert refused.code == 4 and "PaymentRefused" in refused.err
    assert "amount_insufficient" in refused.err
    assert world.balance(account) == 5 * USDC - PRICE
    assert world.balance(seller_account) == PRICE


def test_a_target_that_is_not_a_url_is_a_usage_error(offline_cli: Cli) -> None:
    for target in ("not-a-url", "ftp://example.com/x", "http://"):
        result = offline_cli("pay", target)
        assert result.code == 2, result
        assert f"not a URL: {target!r}" in result.err and "http://" in result.err


@pytest.mark.parametrize("protocol", ["mpp", "x402"])
def test_pay_uses_the_protocol_asked_for(
    cli: Cli, world: World, tmp_path: Path, protocol: str
) -> None:
    """The gate offers svcpay, x402 and MPP at once; --protocol picks one (the default is
    svcpay's own, as the other tests show): paid once, within --max-amount."""
    key, _, account = world.wallet(tmp_path)
    before = world.balance(world.destination)
    too_dear = cli("pay", f"{world.api}/v1/data", "--protocol", protocol,
                   "--max-amount", "0.49", "--keypair", key)  # fmt: skip
    assert too_dear.code == 4 and "--max-amount" in too_dear.err
    paid = cli.ok("pay", f"{world.api}/v1/data", "--protocol", protocol,
                  "--max-amount", "0.50", "--keypair", key)  # fmt: skip
    assert paid["status"] == 200 and paid["body"] == {"data": 42, "path": "/v1/data"}
    assert paid["payment"]["kind"] == protocol and paid["payment"]["transaction"]
    assert paid["payment"]["amount"] == PRICE
    assert world.balance(account) == 5 * USDC - PRICE
    assert world.balance(world.destination) == before + PRICE


def test_a_sync_client_pays_an_mpp_charge(world: World, tmp_path: Path) -> None:
    """PaymentAuth from a plain httpx.Client (its flow runs on a private loop), told to
    prefer MPP, pays the gate's charge over HTTP: 200 with a Payment-Receipt, paid once."""
    _, payer, account = world.wallet(tmp_path)
    rpc = AsyncClient(world.chain.url, commitment=Confirmed)
    auth = PaymentAuth(payer, rpc=rpc, max_per_request=PRICE, protocols=("mpp",))
    try:
        with httpx.Client(timeout=60) as http:
            reply = http.get(f"{world.api}/v1/data", auth=auth)
    finally:
        auth.run(rpc.close())  # on the loop the flow used it on
        auth.close()
    assert reply.status_code == 200 and reply.json() == {"data": 42, "path": "/v1/data"}
    assert mpp.Receipt.parse(reply.headers["payment-receipt"]).method == "solana"
    assert world.balance(account) == 5 * USDC - PRICE
