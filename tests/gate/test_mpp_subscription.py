"""MPP's `subscription` intent on svc_billing's plans (issue 24): the 402 of a subscription
route carries a `solana`/`subscription` challenge (a 30-day plan is `day` x 30; periods that
are not whole days are not offered, and none as `month`); a credential naming an ACTIVE
subscription to the plan is served once per challenge with a `Payment-Receipt` carrying the
`subscriptionId`; anything else is a 402 problem with fresh challenges."""

from __future__ import annotations

import pytest

from svcpay.program.client import BillingClient
from svcpay.protocol import mpp
from svcpay.schemes.mpp_subscription.server import DAY, WEEK, period
from tests.gate.test_subscription import setup
from tests.support.chain import Chain

pytestmark = pytest.mark.anyio


def test_only_whole_days_and_weeks_are_offered_never_months() -> None:
    assert period(30 * DAY) == ("day", 30) and period(2 * WEEK) == ("week", 2)
    assert period(DAY + 1) is None and period(3_600) is None and period(0) is None


async def test_a_subscription_credential_is_served_once_with_a_receipt(
    chain: Chain, client: BillingClient
) -> None:
    http, plan, subscriber, sub_id = await setup(chain, client)
    async with http:
        unpaid = await http.get("/v1/resource")
        assert unpaid.status_code == 402 and unpaid.json()["accepts"]  # svcpay's body stays
        [challenge] = [
            c
            for c in mpp.parse_challenges(unpaid.headers.get_list("www-authenticate"))
            if c.intent == "subscription"
        ]
        request = challenge.request_json
        assert (request["periodUnit"], request["periodCount"]) == ("day", "30")
        assert request["methodDetails"]["planId"] == plan and request["amount"] == "10000000"

        value = mpp.Credential(
            challenge, {"type": "subscription", "subscriptionId": sub_id}
        ).header()
        paid = await http.get("/v1/resource", headers={"Authorization": value})
        assert paid.status_code == 200 and paid.json() == {"served": "/v1/resource"}
        receipt = mpp.Receipt.parse(paid.headers["payment-receipt"])
        assert receipt.extra["subscriptionId"] == sub_id == receipt.reference
        assert receipt.challenge_id == challenge.id

        again = await http.get("/v1/resource", headers={"Authorization": value})
        assert again.status_code == 402
        assert again.json()["type"].endswith("/verification-failed")
        assert mpp.parse_challenges(again.headers.get_list("www-authenticate"))
        # later requests name the subscription as svcpay's clients do
        assert (await http.get("/v1/resource", headers={"X-Svc-Sub": sub_id})).status_code == 200


async def test_a_credential_without_an_active_subscription_is_refused(
    chain: Chain, client: BillingClient
) -> None:
    http, plan, subscriber, sub_id = await setup(chain, client)
    async with http:
        unpaid = await http.get("/v1/resource")
        [challenge] = [
            c
            for c in mpp.parse_challenges(unpaid.headers.get_list("www-authenticate"))
            if c.intent == "subscription"
        ]
        stranger = mpp.Credential(
            challenge,
            {"type": "subscription", "subscriptionId": str(chain.funded_keypair().pubkey())},
        ).header()
        refused = await http.get("/v1/resource", headers={"Authorization": stranger})
        assert refused.status_code == 402 and refused.json()["type"].endswith(
            "/verification-failed"
        )
        malformed = mpp.Credential(challenge, {"type": "transaction"}).header()
        refused = await http.get("/v1/resource", headers={"Authorization": malformed})
        assert refused.json()["type"].endswith("/malformed-credential")
        # the unused challenge still works once the right subscription is named
        good = mpp.Credential(challenge, {"type": "subscription", "subscriptionId": sub_id})
        served = await http.get("/v1/resource", headers={"Authorization": good.header()})
        assert served.status_code == 200
