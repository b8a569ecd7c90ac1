"""The demo's MPP flow (docs/adr/0029): the same 402 carries MPP's `solana`/`charge`
challenges; `PaymentAuth`, told to prefer MPP, signs the transfer with the facilitator as
fee payer and sends it in `Authorization: Payment`; the gate answers with `Payment-Receipt`;
the same credential again is refused with an RFC 9457 problem."""

from __future__ import annotations

from typing import TYPE_CHECKING

from svcpay.client import PaymentAuth
from svcpay.demo.output import expect, say, show_json, step, usdc
from svcpay.examples.resource_server import DATA_PRICE
from svcpay.protocol import mpp

if TYPE_CHECKING:
    from svcpay.demo.context import Walkthrough


async def charge(w: Walkthrough) -> None:

    step(f"1c. MPP: an MPP client pays GET /v1/data ({usdc(DATA_PRICE)}, Authorization: Payment)")
    say("The same 402 also carries MPP's challenges, WWW-Authenticate: Payment … intent=")
    say('"charge" (the Payment HTTP authentication scheme; pay-kit\'s client prefers it):')
    unpaid = await w.api.get("/v1/data")
    found = mpp.parse_challenges(unpaid.headers.get_list("www-authenticate"))
    charges = [c for c in found if (c.method, c.intent) == ("solana", "charge")]
    expect(unpaid.status_code == 402 and bool(charges), "the 402 carries no MPP charge challenge")
    say("the first challenge's request (base64url JCS) decoded; externalId is the gate's memo:")
    show_json(charges[0].request_json)
    say("PaymentAuth(protocols=('mpp',)) signs [SetComputeUnitLimit, SetComputeUnitPrice,")
    say("TransferChecked to ATA(recipient), Memo(externalId)] with the facilitator as fee payer:")
    before = w.balances()
    auth = PaymentAuth(w.world.client, rpc=w.rpc, max_per_request=DATA_PRICE, protocols=("mpp",))
    paid = await w.api.get("/v1/data", auth=auth)
    receipt_header = paid.headers.get("payment-receipt")
    expect(
        paid.status_code == 200 and receipt_header is not None,
        f"the MPP payment answered {paid.status_code}: {paid.text[:300]}",
    )
    assert receipt_header is not None
    receipt = mpp.Receipt.parse(receipt_header)
    say("the gate checked the transaction, ran the handler and had the facilitator co-sign and")
    say("send it (POST /mpp/charge/settle); Payment-Receipt decoded:")
    show_json({"status": receipt.status, "method": receipt.method, "reference": receipt.reference,
               "challengeId": receipt.challenge_id, **receipt.extra})  # fmt: skip
    say("the 200 body:")
    show_json(paid.json())
    w.show_balances(before, w.balances())
    say("the same credential again (a replay):")
    credential = paid.request.headers["authorization"]
    replay = await w.api.get("/v1/data", headers={"Authorization": credential})
    problem = replay.json()
    say(f"  {replay.status_code} {problem.get('type')}: {problem.get('detail')}")
    expect(replay.status_code == 402, f"the replayed MPP payment answered {replay.status_code}")
    await w.webhooks(["payment.settled"])
