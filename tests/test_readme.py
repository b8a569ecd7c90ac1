"""The provider, client and session snippets of the README and the docs run as written: the
gate answers 402, the client pays through a real facilitator over HTTP (or with a session
voucher) and gets the data."""

from __future__ import annotations

import asyncio
import inspect
import os
import re
import textwrap
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from solana.rpc.async_api import AsyncClient
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import ASGIApp

from svcpay.client import PaymentAuth
from svcpay.gate.pricing import Terms
from svcpay.localnet.process import Localnet
from svcpay.program.client import BillingClient
from svcpay.protocol.memo import Memos
from svcpay.protocol.replay import MemoryReplayStore
from tests.cli.conftest import serve
from tests.cli.test_pay import proxy
from tests.support.billing import USDC
from tests.support.chain import Chain
from tests.support.facilitator import in_process_facilitator

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
INDEX = ROOT / "docs/index.md"
SELLING = ROOT / "docs/guides/selling.md"
PAYING = ROOT / "docs/guides/paying.md"

# Where a provider's gate and an agent's paid request are shown: the README's short forms,
# getting started's, and the guides'.
GATE_AND_CLIENT = {
    "readme": ((README, "## Selling an API"), (README, "## Paying for an API")),
    "getting-started": ((INDEX, "## A provider's gated route"), (INDEX, "## An agent's paid")),
    "guides": ((SELLING, "## The gate"), (PAYING, "## PaymentAuth")),
}


def snippet(heading: str, page: Path = README) -> str:
    """The first python block under `heading` in `page` (the README or a docs page)."""
    text = page.read_text()
    section = text[text.index(heading) :]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match, f"no python block under {heading}"
    return match.group(1)


async def data(request: Request) -> JSONResponse:
    return JSONResponse({"data": 42})


async def run_client(code: str, given: dict[str, Any]) -> Any:
    """Runs a client snippet: either statements ending in `data = ...` (the README's three
    lines, given its names) or a function `fetch_data` (the docs', called with the
    arguments it names)."""
    ns: dict[str, Any] = {
        "PaymentAuth": PaymentAuth, "AsyncClient": AsyncClient, "httpx": httpx,
        "wallet": given["wallet"], "RPC_URL": given["rpc_url"],
        "FACILITATOR_URL": given["facilitator_url"], "API_URL": given["api_url"],
    }  # fmt: skip
    if "def fetch_data" not in code:
        code = "async def fetch_data():\n" + textwrap.indent(code, "    ") + "    return data\n"
    exec(code, ns)
    fetch = ns["fetch_data"]
    return await fetch(**{name: given[name] for name in inspect.signature(fetch).parameters})


@pytest.mark.parametrize("where", GATE_AND_CLIENT)
def test_the_provider_and_client_snippets_work(
    where: str, validator: Localnet, chain: Chain, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (gate_page, gate_heading), (client_page, client_heading) = GATE_AND_CLIENT[where]
    monkeypatch.chdir(tmp_path)  # the snippet's SqliteReplayStore file lands here
    provider, fee_payer, wallet = (chain.funded_keypair() for _ in range(3))
    mint = chain.create_mint()
    pay_to = chain.token_account(provider.pubkey(), mint)
    chain.token_account(wallet.pubkey(), mint, 2 * USDC)

    @asynccontextmanager
    async def facilitator_app() -> AsyncIterator[ASGIApp]:
        async with in_process_facilitator(validator.url, fee_payer, pay_to=[pay_to]) as facilitator:
            yield proxy(facilitator.http)

    with serve(facilitator_app) as facilitator_url:

        @asynccontextmanager
        async def provider_app() -> AsyncIterator[ASGIApp]:
            billing = BillingClient.connect(validator.url)
            provider_ns: dict[str, Any] = {
                "app": Starlette(routes=[Route("/v1/data", data), Route("/v1/resource", data)]),
                "PLAN": str(provider.pubkey()), "PAY_TO": str(pay_to), "USDC_MINT": str(mint),
                "FACILITATOR_URL": facilitator_url, "MEMO_SECRET": os.urandom(32),
                "FACILITATOR_KEY": str(fee_payer.pubkey()), "billing": billing,
            }  # fmt: skip
            exec(snippet(gate_heading, gate_page), provider_ns)
            yield provider_ns["app"]
            await billing.close()

        with serve(provider_app) as api_url:
            unpaid = httpx.get(f"{api_url}/v1/data")
            assert unpaid.status_code == 402
            assert unpaid.json()["accepts"][0]["amount"] == "500000"

            given = {
                "wallet": wallet, "rpc_url": validator.url, "facilitator_url": facilitator_url,
                "api_url": api_url,
            }  # fmt: skip
            code = snippet(client_heading, client_page)
            assert asyncio.run(run_client(code, given)) == {"data": 42}
    assert int(chain.token_state(pay_to)["amount"]) == USDC // 2


@pytest.mark.anyio
async def test_the_session_snippet_works(
    chain: Chain, client: BillingClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # the snippet's vouchers.db lands here
    provider, wallet = chain.funded_keypair(), chain.funded_keypair()
    mint = chain.create_mint()
    pay_to = chain.token_account(provider.pubkey(), mint)
    chain.token_account(wallet.pubkey(), mint, 2 * USDC)
    terms = Terms(pay_to=str(pay_to), token=str(mint))
    ns: dict[str, Any] = {
        "app": Starlette(routes=[Route("/v1/quote", data)]), "terms": terms,
        "memos": Memos(os.urandom(32)), "replay": MemoryReplayStore(), "billing": client,
        "FACILITATOR_URL": "http://facilitator.invalid", "PROVIDER_API_KEY": "svc_unused",
        "CHALLENGE_SECRET": os.urandom(32),
    }  # fmt: skip
    exec(snippet("## Sessions: many calls", SELLING), ns)
    transport = httpx.ASGITransport(app=ns["app"])
    async with httpx.AsyncClient(transport=transport, base_url="http://api") as http:
        unpaid = await http.get("/v1/quote")
        assert (
            unpaid.status_code == 402 and 'intent="session"' in unpaid.headers["www-authenticate"]
        )
        auth = PaymentAuth(wallet, rpc=client.rpc, billing=client, max_per_request=USDC)
        for _ in range(3):
            paid = await http.get("/v1/quote", auth=auth)
            assert paid.status_code == 200 and paid.json() == {"data": 42}
    assert await ns["ledger"].highest(str(next(iter(auth.tabs.items()))[1].channel)) == 3_000
