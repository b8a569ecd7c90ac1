"""`svcpay mcp` as an MCP host starts it: a subprocess on stdio, driven by the SDK's client,
paying the example API (`svcpay example serve`, another process) through svcpay's
facilitator on the local validator; its limits, its dry run and its payment log."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from starlette.types import ASGIApp

from svcpay.localnet.process import Localnet
from tests.cli.conftest import keyfile, serve
from tests.cli.test_example import example_serve
from tests.support.billing import USDC, Billing
from tests.support.chain import Chain
from tests.support.facilitator import in_process_facilitator, proxy

pytestmark = pytest.mark.anyio
DATA_PRICE = USDC // 2  # the example API's /v1/data


@contextmanager
def example_api(validator: Localnet, chain: Chain, tmp_path: Path) -> Iterator[tuple[str, Any]]:
    """The example API and its facilitator, serving a plan's mint; yields its URL and mint."""
    plan = Billing(chain).plan(amount=3 * USDC, period_secs=30 * 86_400)
    authority = keyfile(tmp_path, plan.billing_authority, "authority.json")

    @asynccontextmanager
    async def facilitator_app() -> AsyncIterator[ASGIApp]:
        async with in_process_facilitator(
            validator.url, chain.funded_keypair(), pay_to=[plan.destination]
        ) as facilitator:
            yield proxy(facilitator.http)

    argv = ["--pay-to", str(plan.destination), "--mint", str(plan.mint), "--plan",
            str(plan.address), "-k", authority, "-u", validator.url, "--state-db",
            str(tmp_path / "api.db")]  # fmt: skip
    with (
        serve(facilitator_app) as facilitator_url,
        example_serve([*argv, "--facilitator", facilitator_url], {}) as (api, _),
    ):
        yield api, plan.mint


@asynccontextmanager
async def svcpay_mcp(
    validator: Localnet, key: str, log: Path, *flags: str
) -> AsyncIterator[ClientSession]:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "svcpay", "mcp", "-k", key, "-u", validator.url, *flags],
        env=dict(os.environ),
    )
    with log.open("w") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            yield session


def answer(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content
    data: dict[str, Any] = json.loads(result.content[0].text)
    return data


async def test_svcpay_mcp_pays_the_example_api_within_its_limits(
    validator: Localnet, chain: Chain, tmp_path: Path
) -> None:
    wallet = chain.funded_keypair()
    key = keyfile(tmp_path, wallet)
    log = tmp_path / "mcp.log"
    with example_api(validator, chain, tmp_path) as (api, mint):
        account = chain.token_account(wallet.pubkey(), mint, 5 * USDC)
        async with svcpay_mcp(
            validator, key, log, "--max-per-request", "1", "--budget", "0.75"
        ) as s:
            tools = {t.name for t in (await s.list_tools()).tools}
            assert {"fetch", "balance", "pay_status"} <= tools
            paid = answer(await s.call_tool("fetch", {"url": f"{api}/v1/data"}))
            assert paid["status"] == 200 and "the data" in paid["body"]
            assert paid["payment"]["amount"] == DATA_PRICE
            assert paid["payment"]["protocol"] == "svcpay"
            # A second one would pass the budget (0.75 a day): refused before signing.
            over = await s.call_tool("fetch", {"url": f"{api}/v1/data"})
            assert over.is_error and "SpendingLimitExceeded" in over.content[0].model_dump()["text"]
            status = answer(await s.call_tool("pay_status", {}))
            assert status["spentToday"] == DATA_PRICE and status["leftToday"] == USDC // 4
            assert [p["amount"] for p in status["payments"]] == [DATA_PRICE]
            balance = answer(await s.call_tool("balance", {}))
            held = {t["mint"]: t["amount"] for t in balance["tokens"] if "mint" in t}
            assert held[str(mint)] == 5 * USDC - DATA_PRICE
        assert chain.token_state(account)["amount"] == 5 * USDC - DATA_PRICE
    text = log.read_text()
    assert f"paid {DATA_PRICE} base units with svcpay for GET {api}/v1/data" in text, text
    assert "declined GET" in text and "SpendingLimitExceeded" in text


async def test_a_dry_run_quotes_and_pays_nothing(
    validator: Localnet, chain: Chain, tmp_path: Path
) -> None:
    wallet = chain.funded_keypair()
    log = tmp_path / "mcp.log"
    with example_api(validator, chain, tmp_path) as (api, mint):
        account = chain.token_account(wallet.pubkey(), mint, USDC)
        async with svcpay_mcp(validator, keyfile(tmp_path, wallet), log, "--dry-run") as s:
            quoted = answer(await s.call_tool("fetch", {"url": f"{api}/v1/data"}))
            unpriced = answer(await s.call_tool("fetch", {"url": f"{api}/not-priced"}))
    assert quoted["status"] == 402 and quoted["dryRun"] and quoted["withinLimit"]
    protocols = {q["protocol"] for q in quoted["quote"]}
    assert "svcpay" in protocols and all(q["amount"] == DATA_PRICE for q in quoted["quote"])
    assert unpriced["payment"] is None and unpriced["status"] == 404
    assert chain.token_state(account)["amount"] == USDC
    assert "dry run: GET" in log.read_text()
