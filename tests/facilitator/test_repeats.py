"""A payment submitted again after the request that stored it went away (an outage, a
restart, another instance): decided at once when its blockhash has expired meanwhile, so the
client signs a new one, instead of waiting out a new flight's 90 s on every instance it is
retried on (cold run 11: one such payment was still 504 SettlementPending after 195 s)."""

from __future__ import annotations

import base64
import time

import pytest
from solders.transaction import VersionedTransaction

from svcpay.client import build_payment
from svcpay.protocol.headers import NETWORK_MAINNET
from tests.facilitator.test_service import PRICE, Shop, option, payment
from tests.facilitator.test_service import shop as shop  # noqa: F401 (the fixture)
from tests.gate.test_x402_expired import past_its_lifetime
from tests.support.chain import Chain

pytestmark = pytest.mark.anyio


async def test_a_payment_stored_long_ago_whose_blockhash_expired_unsent_is_refused_at_once(
    shop: Shop, chain: Chain
) -> None:
    body, wallet = await payment(shop, chain, "memo-late")
    service = shop.fac.service
    tx = VersionedTransaction.from_bytes(base64.b64decode(str(body["signedPayment"])))
    signed = service.settler.cosign(tx)
    key = str(signed.signatures[0])
    # What a request 100 s ago left: the payment stored, then an outage before any send.
    await service.store.settlements.begin(
        {
            "signature": key,
            "network": NETWORK_MAINNET,
            "payer": str(wallet.pubkey()),
            "pay_to": str(shop.destination),
            "token": str(shop.mint),
            "amount": PRICE,
            "memo": "memo-late",
            "transaction": base64.b64encode(bytes(signed)).decode(),
            "status": "sending",
            "issued_at": 0,
            "created_at": int(time.time()) - 100,
        }
    )
    await past_its_lifetime(chain, tx)

    again = await shop.fac.http.post("/authorize", json=body)
    # Not 504 SettlementPending: no node calls the blockhash valid, and the payment was
    # received longer ago than any node lags.
    assert again.status_code == 400, again.text
    assert again.json()["error"] == "BlockhashExpired"
    assert chain.token_state(shop.destination)["amount"] == 0  # nothing was paid
    assert await service.store.settlements.get(key) is None  # a new one may be signed

    # The client signs again, with a fresh blockhash, and pays once.
    fresh = await build_payment(
        shop.fac.rpc, wallet, option(shop, "memo-late"), shop.fac.fee_payer.pubkey()
    )
    paid = await shop.fac.http.post(
        "/authorize",
        json={**body, "signedPayment": base64.b64encode(fresh).decode()},
    )
    assert paid.status_code == 200, paid.text
    assert chain.token_state(shop.destination)["amount"] == PRICE
