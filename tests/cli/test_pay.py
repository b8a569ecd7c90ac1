"""`svcpay pay URL` over real HTTP: a gate (one-time and subscription routes) and the
facilitator served by uvicorn, payments settled on the local validator."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import ASGIApp

from svcpay.gate import OneTime, Subscription, payment_gate
from svcpay.gate.chain import ChainSubscriptions
from svcpay.gate.pricing import Terms
from svcpay.localnet.process import Localnet
from svcpay.program import pda
from svcpay.program.client import BillingClient
from svcpay.protocol.memo import Memos
from svcpay.protocol.replay import MemoryReplayStore
from tests.cli.conftest import Cli, free_port, keyfile, serve
from tests.support.billing import DAY, USDC, create_plan_ix
from tests.support.chain import Chain
from tests.support.facilitator import in_process_facilitator, proxy

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
                terms=Terms(pay_to=str(destination), token=str(mint), facilitator=facilitator_url),
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

    refused = cli("pay", url, "--keypair", key)
    assert refused.code == 4 and "--subscribe" in refused.err
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

    no_facilitator = cli("pay", f"{world.api}/v1/data", "--keypair", key)
    assert no_facilitator.code == 2 and "--facilitator" in no_facilitator.err

    dead_facilitator = cli("pay", f"{world.api}/v1/data", "--facilitator", nowhere,
                           "--keypair", key)  # fmt: skip
    assert dead_facilitator.code == 1
    assert dead_facilitator.err.startswith(f"svcpay: cannot reach the facilitator at {nowhere}")

    no_key = cli("pay", f"{world.api}/v1/data", "--keypair", str(tmp_path / "none.json"))
    assert no_key.code == 2 and "svcpay keys create" in no_key.err
