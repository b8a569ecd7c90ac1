"""x402 against the TypeScript SDK (@x402/fetch, @x402/svm; pinned in
tests/interop/x402_ts/package-lock.json, installed by scripts/x402-ts): the implementation
most x402 agents run, on the other side of svcpay's gate, over HTTP between separate
processes, on the local validator presented as Solana devnet; money moves on chain."""

from __future__ import annotations

import base64
import json

import httpx
import pytest

from svcpay.localnet.process import Localnet
from tests.interop.conftest import DEVNET, Market, Svcpay, Ts, x402_payer
from tests.interop.test_x402_sdk import DATA_PRICE, PRICE, balances, settled_in
from tests.support.billing import USDC, Billing
from tests.support.chain import Chain


def test_the_ts_client_pays_the_example_api(
    ts: Ts, svcpay: Svcpay, market: Market, billing: Billing, chain: Chain
) -> None:
    """@x402/fetch against py/svcpay/examples/resource_server.py, whose gate settles through
    svcpay's facilitator: paid, PAYMENT-RESPONSE, a replay refused, money moved once."""
    metered = billing.plan(amount=USDC, mint=market.mint)
    facilitator = svcpay.facilitator(market.fee_payer)
    api = svcpay.resource_server(facilitator, market, metered)
    before = balances(chain, market)

    report = ts.pay(f"{api}/v1/data", market, replay=True)

    assert report["status"] == 200, report
    assert report["body"]["data"] == "the data", report  # type: ignore[index]
    settled_in(report, market)
    assert "payment-signature" in report["paymentHeaders"]  # type: ignore[operator]
    assert balances(chain, market) == (before[0] - DATA_PRICE, before[1] + DATA_PRICE)
    assert report["replay"]["status"] == 402, report["replay"]  # type: ignore[index]
    assert balances(chain, market) == (before[0] - DATA_PRICE, before[1] + DATA_PRICE)


def test_the_ts_server_settles_through_the_svcpay_facilitator(
    ts: Ts, svcpay: Svcpay, market: Market, chain: Chain
) -> None:
    """@x402/express configured with svcpay's facilitator, paid by @x402/fetch: served once,
    a replay refused, and settling the same transaction again refused (duplicate_settlement)."""
    facilitator = svcpay.facilitator(market.fee_payer)
    server = ts.server(facilitator, market, PRICE)
    before = balances(chain, market)

    report = ts.pay(f"{server}/paid", market, replay=True)

    assert (report["status"], report["body"]) == (200, {"answer": "paid content"}), report
    settled_in(report, market)
    assert balances(chain, market) == (before[0] - PRICE, before[1] + PRICE)
    assert report["replay"]["status"] == 402, report["replay"]  # type: ignore[index]

    header = report["paymentHeaders"]["payment-signature"]  # type: ignore[index]
    payload = json.loads(base64.b64decode(header))
    body = {"x402Version": 2, "paymentPayload": payload, "paymentRequirements": payload["accepted"]}
    again = httpx.post(f"{facilitator}/settle", json=body, timeout=60)
    assert again.status_code == 200, again.text
    assert (again.json()["success"], again.json().get("errorReason")) == (
        False,
        "duplicate_settlement",
    ), again.json()
    assert balances(chain, market) == (before[0] - PRICE, before[1] + PRICE)


def test_the_ts_sdk_pays_its_own_server_through_its_own_facilitator(
    ts: Ts, market: Market, chain: Chain
) -> None:
    """The harness alone (client, Express server, facilitator, all the TS SDK's): it proves
    the programs and the validator, so a failure in the other tests is svcpay's."""
    server = ts.server(ts.facilitator(market.fee_payer_file), market, PRICE)
    before = balances(chain, market)

    report = ts.pay(f"{server}/paid", market, replay=True)

    assert (report["status"], report["body"]) == (200, {"answer": "paid content"}), report
    settled_in(report, market)
    assert balances(chain, market) == (before[0] - PRICE, before[1] + PRICE)
    assert report["replay"]["status"] == 402, report["replay"]  # type: ignore[index]


@pytest.mark.anyio
async def test_payment_auth_pays_the_ts_server(
    ts: Ts, market: Market, chain: Chain, validator: Localnet
) -> None:
    """svcpay's PaymentAuth against @x402/express with the TS SDK's own facilitator, whose
    checks of the transaction are the TypeScript ones: served, calling no facilitator itself."""
    server = ts.server(ts.facilitator(market.fee_payer_file), market, PRICE)
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
