"""The README's provider, client and session snippets run as written: the gate answers 402,
the client pays through a real facilitator over HTTP (or with a session voucher) and gets
the data."""

from __future__ import annotations

import asyncio
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

README = Path(__file__).resolve().parents[1] / "README.md"


def snippet(heading: str) -> str:
    """The first python block under `heading` in the README."""
    text = README.read_text()
    section = text[text.index(heading) :]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match, f"no python block under {heading}"
    return match.group(1)


async def data(request: Request) -> JSONResponse:
    return JSONResponse({"data": 42})


def test_the_provider_and_client_snippets_work(
    validator: Localnet, chain: Chain, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
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
            exec(snippet("## Selling an API (provider)"), provider_ns)
            yield provider_ns["app"]
            await billing.close()

        with serve(provider_app) as api_url:
            unpaid = httpx.get(f"{api_url}/v1/data")
            assert unpaid.status_code == 402
            assert unpaid.json()["accepts"][0]["amount"] == "500000"

            body = "async def run():\n" + textwrap.indent(snippet("## Paying for an API"), "    ")
            client_ns: dict[str, Any] = {
                "PaymentAuth": PaymentAuth, "AsyncClient": AsyncClient, "httpx": httpx,
                "wallet": wallet, "RPC_URL": validator.url, "FACILITATOR_URL": facilitator_url,
                "API_URL": api_url,
            }  # fmt: skip
            exec(body + "    return data\n", client_ns)
            assert asyncio.run(client_ns["run"]()) == {"data": 42}
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
    exec(snippet("## Sessions: many calls"), ns)
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
