"""svcpay against solana-foundation's pay-kit (PyPI solana-pay-kit, pinned in
scripts/pay-kit.lock, run in its own environment: it needs solana 0.36), the Python peer
that puts x402 and MPP on one gate: its paying client against svcpay's gate, over HTTP
between separate processes, on the local validator (pay-kit's `localnet`, advertised with
devnet's CAIP-2 id, as svcpay's services are told here); money moves on chain."""

from __future__ import annotations

from tests.interop.conftest import Market, PayKit, Svcpay
from tests.interop.test_x402_sdk import DATA_PRICE, balances, settled_in
from tests.support.billing import USDC, Billing
from tests.support.chain import Chain


def test_the_pay_kit_client_pays_the_example_api(
    pay_kit: PayKit, svcpay: Svcpay, market: Market, billing: Billing, chain: Chain
) -> None:
    """PayKitClient against py/svcpay/examples/resource_server.py (x402 v2 from the gate's
    PAYMENT-REQUIRED, settled through svcpay's facilitator): paid once, a replay refused."""
    metered = billing.plan(amount=USDC, mint=market.mint)
    facilitator = svcpay.facilitator(market.fee_payer)
    api = svcpay.resource_server(facilitator, market, metered)
    before = balances(chain, market)

    report = pay_kit.pay(f"{api}/v1/data", market, replay=True)

    assert report["status"] == 200, report
    assert report["body"]["data"] == "the data", report  # type: ignore[index]
    settled_in(report, market)
    assert balances(chain, market) == (before[0] - DATA_PRICE, before[1] + DATA_PRICE)
    assert report["replay"]["status"] == 402, report["replay"]  # type: ignore[index]
    assert balances(chain, market) == (before[0] - DATA_PRICE, before[1] + DATA_PRICE)
