"""svcpay against solana-foundation's pay-kit (PyPI solana-pay-kit, pinned in
scripts/pay-kit.lock, run in its own environment: it needs solana 0.36), the Python peer
that puts x402 and MPP on one gate: its paying client against svcpay's gate, over HTTP
between separate processes, on the local validator (pay-kit's `localnet`, advertised with
devnet's CAIP-2 id, as svcpay's services are told here); money moves on chain."""

from __future__ import annotations

import base64
import json

import httpx
import pytest
from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Confirmed
from solders.keypair import Keypair

from svcpay.client import PaymentAuth
from svcpay.localnet.accounts import LOCAL_USDC_AUTHORITY, USDC_MAINNET_MINT
from svcpay.localnet.process import Localnet
from svcpay.protocol import mpp
from tests.interop.conftest import Market, PayKit, Svcpay, finalize
from tests.interop.test_x402_sdk import DATA_PRICE, balances, settled_in
from tests.support.billing import USDC, Billing
from tests.support.chain import Chain


def test_the_pay_kit_client_pays_the_example_api_with_mpp(
    pay_kit: PayKit, svcpay: Svcpay, market: Market, billing: Billing, chain: Chain
) -> None:
    """PayKitClient against py/svcpay/examples/resource_server.py: it prefers MPP, so it pays
    the gate's `solana`/`charge` challenge (a transaction the facilitator co-signs): 200
    with a Payment-Receipt naming the transaction, paid once, a replay refused."""
    metered = billing.plan(amount=USDC, mint=market.mint)
    facilitator = svcpay.facilitator(market.fee_payer)
    api = svcpay.resource_server(facilitator, market, metered)
    before = balances(chain, market)

    report = pay_kit.pay(f"{api}/v1/data", market, replay=True)

    assert report["status"] == 200, report
    assert report["body"] == {"data": "the data", "paidWith": "mpp"}, report
    assert "authorization" in report["paymentHeaders"], report  # type: ignore[operator]
    receipt = report["paymentReceipt"]
    assert isinstance(receipt, dict) and receipt["status"] == "success", report
    assert receipt["method"] == "solana" and len(receipt["reference"]) > 80, receipt
    assert balances(chain, market) == (before[0] - DATA_PRICE, before[1] + DATA_PRICE)
    replay = report["replay"]
    assert replay["status"] == 402, replay  # type: ignore[index]
    assert balances(chain, market) == (before[0] - DATA_PRICE, before[1] + DATA_PRICE)


def test_the_pay_kit_client_pays_the_example_api_with_x402(
    pay_kit: PayKit, svcpay: Svcpay, market: Market, billing: Billing, chain: Chain
) -> None:
    """PayKitClient told to pay with x402 only (x402 v2 from the gate's PAYMENT-REQUIRED,
    settled through svcpay's facilitator): paid once, a replay refused."""
    metered = billing.plan(amount=USDC, mint=market.mint)
    facilitator = svcpay.facilitator(market.fee_payer)
    api = svcpay.resource_server(facilitator, market, metered)
    before = balances(chain, market)

    report = pay_kit.pay(f"{api}/v1/data", market, replay=True, accept="x402")

    assert report["status"] == 200, report
    assert report["body"]["data"] == "the data", report  # type: ignore[index]
    settled_in(report, market)
    assert balances(chain, market) == (before[0] - DATA_PRICE, before[1] + DATA_PRICE)
    assert report["replay"]["status"] == 402, report["replay"]  # type: ignore[index]
    assert balances(chain, market) == (before[0] - DATA_PRICE, before[1] + DATA_PRICE)


@pytest.mark.anyio
@pytest.mark.parametrize("protocol", ["x402", "mpp"])
async def test_payment_auth_pays_the_pay_kit_server(
    pay_kit: PayKit, market: Market, chain: Chain, validator: Localnet, protocol: str
) -> None:
    """svcpay's PaymentAuth against pay-kit's FastAPI gate, which offers x402 and MPP and
    verifies and settles both itself, in USDC (the validator's, at mainnet USDC's address;
    pay-kit's MPP challenge names it by its symbol): PaymentAuth pays the x402 offer, or
    (told to prefer MPP) the `solana`/`charge` challenge, and is served."""
    seller = Keypair()
    seller_usdc = chain.token_account(seller.pubkey(), USDC_MAINNET_MINT)
    buyer_usdc = chain.token_account(market.buyer.pubkey(), USDC_MAINNET_MINT)
    chain.mint_to(USDC_MAINNET_MINT, buyer_usdc, USDC, authority=LOCAL_USDC_AUTHORITY)
    finalize(chain, buyer_usdc)
    server = pay_kit.server(market.fee_payer, seller.pubkey(), "0.001")

    def amounts() -> tuple[int, int]:
        state = chain.token_state
        return state(buyer_usdc)["amount"], state(seller_usdc)["amount"]

    before = amounts()

    rpc = AsyncClient(validator.url, commitment=Confirmed)
    async with httpx.AsyncClient() as svcpay_fac:
        auth = PaymentAuth(
            market.buyer,
            rpc=rpc,
            facilitator=svcpay_fac,
            max_per_request=USDC,
            protocols=(protocol,),
        )
        try:
            async with httpx.AsyncClient(timeout=60) as http:
                reply = await http.get(f"{server}/paid", auth=auth)
        finally:
            await rpc.close()

    assert (reply.status_code, reply.json()) == (200, {"answer": "paid content"}), reply.text
    if protocol == "x402":
        settled = json.loads(base64.b64decode(reply.headers["payment-response"]))
        assert settled["success"] is True, settled
    else:
        receipt = mpp.Receipt.parse(reply.headers["payment-receipt"])
        assert (receipt.status, receipt.method) == ("success", "solana"), receipt
        assert "authorization" in reply.request.headers
    assert amounts() == (before[0] - 1_000, before[1] + 1_000)
