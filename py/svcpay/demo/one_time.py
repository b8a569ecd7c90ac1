"""Step 1, a one-time payment per request: svcpay's own dialect (`X-PAYMENT`, a proof the
facilitator signs) and x402's (`PAYMENT-SIGNATURE`, settled after the handler ran), each
with its replay refused."""

from __future__ import annotations

import base64
import json
from typing import TYPE_CHECKING

from svcpay.demo.output import expect, say, show_json, step, usdc
from svcpay.examples.resource_server import DATA_PRICE
from svcpay.protocol.headers import X_PAYMENT
from svcpay.schemes.x402_exact import client as x402
from svcpay.schemes.x402_exact.wire import (
    PAYMENT_REQUIRED,
    PAYMENT_RESPONSE,
    PAYMENT_SIGNATURE,
    PaymentRequired,
)

if TYPE_CHECKING:
    from svcpay.demo.context import Walkthrough


async def one_time(w: Walkthrough) -> None:
    step(f"1. One-time payment: GET /v1/data, {usdc(DATA_PRICE)} per request (X-PAYMENT)")
    unpaid = await w.api.get("/v1/data")
    expect(unpaid.status_code == 402, f"unpaid GET /v1/data answered {unpaid.status_code}")
    say("the 402 body (payment terms):")
    show_json(unpaid.json())
    before = w.balances()
    say("the client pays (PaymentAuth): it signs a TransferChecked + memo as token owner,")
    say("leaving the fee payer's signature to the facilitator, which co-signs, sends,")
    say("waits for confirmation and answers a signed proof; then the client retries:")
    paid = await w.api.get("/v1/data", auth=w.auth)
    expect(
        paid.status_code == 200,
        f"the paid GET /v1/data answered {paid.status_code}: {paid.text[:300]}",
    )
    header = paid.request.headers[X_PAYMENT]
    say(f"X-PAYMENT ({len(header)} base64 characters) decoded, the facilitator's proof:")
    show_json(json.loads(base64.b64decode(header)))
    say("the 200 body:")
    show_json(paid.json())
    w.show_balances(before, w.balances())
    say("the same proof again (a replay):")
    replay = await w.api.get("/v1/data", headers={X_PAYMENT: header})
    refusal = replay.json()
    say(f"  {replay.status_code} {refusal.get('error')}: {refusal.get('message')}")
    expect(
        replay.status_code == 402 and refusal.get("error") == "InvalidPaymentProof",
        f"the replayed proof was not refused: {replay.status_code} {replay.text[:200]}",
    )
    await w.webhooks(["payment.settled"])


async def x402_exact(w: Walkthrough) -> None:
    step(f"1b. x402: an x402 client pays GET /v1/data ({usdc(DATA_PRICE)}, PAYMENT-SIGNATURE)")
    say("The same 402 also carries x402's terms, in the PAYMENT-REQUIRED header, for agents")
    say("built on the x402 SDKs (tests/interop runs the PyPI x402 SDK against this server):")
    unpaid = await w.api.get("/v1/data")
    required = x402.payment_required(unpaid)
    expect(
        unpaid.status_code == 402 and isinstance(required, PaymentRequired),
        f"the 402 carries no x402 v2 terms: {unpaid.status_code} {unpaid.headers}",
    )
    assert isinstance(required, PaymentRequired)
    say(f"{PAYMENT_REQUIRED} decoded (extension schemas left out):")
    shown = required.to_json_dict()
    shown["extensions"] = {name: "…" for name in shown.get("extensions", {})}
    show_json(shown)
    option = required.accepts[0]
    say("the x402 client signs [SetComputeUnitLimit, SetComputeUnitPrice, TransferChecked to")
    say("ATA(payTo), Memo(extra.memo)] as token owner, leaves the fee payer's signature to")
    say("the facilitator, and retries with the payment; it calls no facilitator itself:")
    before = w.balances()
    payload = await x402.ExactSvmClient(w.world.client, w.rpc).payload(option, required)
    name, value = x402.payment_header(payload)
    expect(name == PAYMENT_SIGNATURE, f"a v2 payment goes in {PAYMENT_SIGNATURE}, not {name}")
    paid = await w.api.get("/v1/data", headers={name: value})
    settled = x402.settlement(paid)
    expect(
        paid.status_code == 200 and settled is not None and settled.success,
        f"the x402 payment answered {paid.status_code}: {paid.text[:300]}",
    )
    assert settled is not None
    say("the gate checked the transaction itself, ran the handler, then had the facilitator")
    say(f"settle it with POST /settle (one call); {PAYMENT_RESPONSE} decoded:")
    show_json(settled.to_json_dict())
    say("the 200 body:")
    show_json(paid.json())
    w.show_balances(before, w.balances())
    say("the same payment again (a replay):")
    replay = await w.api.get("/v1/data", headers={name: value})
    say(f"  {replay.status_code} {replay.json().get('error')}: {replay.json().get('message')}")
    expect(replay.status_code == 402, f"the replayed x402 payment answered {replay.status_code}")
    await w.webhooks(["payment.settled"])
