"""x402 against the real thing: the PyPI x402 SDK (pinned in scripts/x402-sdk.lock, run in its
own environment) paying, selling and settling with and against svcpay, on the local validator
presented as Solana devnet. Each flow is the SDK's own code on one side and svcpay's on the
other, over HTTP between separate processes; money moves on chain.

The first test is the SDK alone (client, FastAPI server, facilitator): it proves the harness
and the validator, so a failure in the others is svcpay's.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import httpx
import pytest

from svcpay.localnet.process import Localnet
from tests.interop.conftest import DEVNET, Market, Sdk, Svcpay, x402_payer
from tests.support.billing import USDC, Billing
from tests.support.chain import Chain

PRICE = 1_000  # base units of a 6-decimal mint: 0.001
DATA_PRICE = 500_000  # the example API's GET /v1/data


def balances(chain: Chain, market: Market) -> tuple[int, int]:
    """(buyer's, seller's) token balances."""
    state = chain.token_state
    return state(market.buyer_account)["amount"], state(market.seller_account)["amount"]


def settled_in(report: dict[str, Any], market: Market) -> str:
    """The transaction of a successful PAYMENT-RESPONSE, after checking what it says."""
    settled = report["paymentResponse"]
    assert settled is not None, report
    assert (settled["success"], settled["network"], settled["payer"]) == (
        True,
        DEVNET,
        str(market.buyer.pubkey()),
    ), settled
    assert isinstance(settled["transaction"], str) and settled["transaction"], settled
    return str(settled["transaction"])


def test_the_sdk_pays_its_own_server_through_its_own_facilitator(
    sdk: Sdk, market: Market, chain: Chain
) -> None:
    facilitator = sdk.facilitator(market.fee_payer_file)
    server = sdk.server(facilitator, market, PRICE)
    before = balances(chain, market)

    report = sdk.pay(f"{server}/paid", market, replay=True)

    assert (report["status"], report["body"]) == (200, {"answer": "paid content"}), report
    settled_in(report, market)
    assert "payment-signature" in report["paymentHeaders"]
    assert balances(chain, market) == (before[0] - PRICE, before[1] + PRICE)
    assert report["replay"]["status"] == 402, report["replay"]  # the same payment again
    assert balances(chain, market) == (before[0] - PRICE, before[1] + PRICE)


def test_the_sdk_client_pays_the_example_api(
    sdk: Sdk, svcpay: Svcpay, market: Market, billing: Billing, chain: Chain
) -> None:
    """The SDK's httpx client against py/svcpay/examples/resource_server.py, whose gate
    settles through svcpay's facilitator: paid, PAYMENT-RESPONSE, a replay refused."""
    metered = billing.plan(amount=USDC, mint=market.mint)
    facilitator = svcpay.facilitator(market.fee_payer)
    api = svcpay.resource_server(facilitator, market, metered)
    before = balances(chain, market)

    report = sdk.pay(f"{api}/v1/data", market, replay=True)

    assert report["status"] == 200, report
    assert report["body"]["data"] == "the data", report
    settled_in(report, market)
    assert balances(chain, market) == (before[0] - DATA_PRICE, before[1] + DATA_PRICE)
    assert report["replay"]["status"] == 402, report["replay"]
    assert balances(chain, market) == (before[0] - DATA_PRICE, before[1] + DATA_PRICE)


def test_the_sdk_server_settles_through_the_svcpay_facilitator(
    sdk: Sdk, svcpay: Svcpay, market: Market, chain: Chain
) -> None:
    """The SDK's FastAPI server configured with svcpay's facilitator: the SDK client is
    served, and settling the same transaction again is refused (duplicate_settlement)."""
    facilitator = svcpay.facilitator(market.fee_payer)
    server = sdk.server(facilitator, market, PRICE)
    before = balances(chain, market)

    report = sdk.pay(f"{server}/paid", market, replay=True)

    assert (report["status"], report["body"]) == (200, {"answer": "paid content"}), report
    transaction = settled_in(report, market)
    assert balances(chain, market) == (before[0] - PRICE, before[1] + PRICE)
    assert report["replay"]["status"] == 402, report["replay"]

    header = report["paymentHeaders"]["payment-signature"]
    payload = json.loads(base64.b64decode(header))
    body = {"x402Version": 2, "paymentPayload": payload, "paymentRequirements": payload["accepted"]}
    again = httpx.post(f"{facilitator}/settle", json=body, timeout=60)
    assert again.status_code == 200, again.text
    assert (again.json()["success"], again.json().get("errorReason")) == (
        False,
        "duplicate_settlement",
    ), (again.json(), transaction)
    assert balances(chain, market) == (before[0] - PRICE, before[1] + PRICE)


@pytest.mark.anyio
async def test_payment_auth_pays_the_sdk_server(
    sdk: Sdk, market: Market, chain: Chain, validator: Localnet
) -> None:
    """svcpay's PaymentAuth against the SDK's FastAPI server and the SDK's own facilitator:
    it reads PAYMENT-REQUIRED, pays ATA(payTo) and is served, calling no facilitator itself."""
    facilitator = sdk.facilitator(market.fee_payer_file)
    server = sdk.server(facilitator, market, PRICE)
    before = balances(chain, market)
    async with (
        x402_payer(market, validator.url) as (auth, called),
        httpx.AsyncClient(timeout=60) as http,
    ):
        reply = await http.get(f"{server}/paid", auth=auth)

    assert (reply.status_code, reply.json()) == (200, {"answer": "paid content"}), reply.text
    settled = json.loads(base64.b64decode(reply.headers["payment-response"]))
    assert (settled["success"], settled["network"]) == (True, DEVNET), settled
    assert balances(chain, market) == (before[0] - PRICE, before[1] + PRICE)
    assert called == [], called
