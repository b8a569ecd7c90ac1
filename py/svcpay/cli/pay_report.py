"""What `svcpay pay` prints: the response, and what was paid for it (a one-time proof, a
subscription, an x402 or MPP transfer, a session voucher) with what left the wallet."""

from __future__ import annotations

import argparse
import json
from typing import Any

import httpx

from svcpay.cli._common import emit, format_units, stderr
from svcpay.client import PaymentAuth, settlement
from svcpay.protocol.headers import X_PAYMENT, X_SVC_SUB
from svcpay.protocol.models import ProtocolError
from svcpay.protocol.proof import parse_payment_proof
from svcpay.schemes.x402_exact import client as x402
from svcpay.schemes.x402_exact.wire import PaymentPayloadV1


def x402_payment(response: httpx.Response) -> dict[str, Any] | None:
    """What was paid with x402 for the request that got `response`."""
    payload = x402.payment_in(response.request.headers)
    if payload is None:
        return None
    paid = x402.transfer_in(payload)
    try:
        settled = settlement(response)
    except ProtocolError:
        settled = None
    network = payload.network if isinstance(payload, PaymentPayloadV1) else payload.accepted.network
    return {
        "kind": "x402",
        "x402Version": payload.x402_version,
        "network": network,
        "amount": paid.amount,
        "amountDecimal": format_units(paid.amount, paid.decimals),
        "token": str(paid.mint),
        "payTo": str(paid.destination),
        "transaction": settled.transaction if settled else None,
        "settlement": settled.to_json_dict() if settled else None,
    }


def payment_of(
    response: httpx.Response, held: dict[str, str], decimals: dict[str, int]
) -> dict[str, Any] | None:
    """What was paid for the request that got `response`."""
    request = response.request
    if x402.payment_in(request.headers) is not None:
        return x402_payment(response)
    if X_PAYMENT in request.headers:
        proof = parse_payment_proof(request.headers[X_PAYMENT])
        return {
            "kind": "one-time",
            "amount": int(proof.amount),
            "amountDecimal": format_units(int(proof.amount), decimals.get(proof.token, 0)),
            "token": proof.token,
            "payTo": proof.pay_to,
            "transaction": proof.transaction,
            "facilitator": proof.facilitator,
        }
    if X_SVC_SUB in request.headers:
        sub = request.headers[X_SVC_SUB]
        return {"kind": "subscription", "subscription": sub, "new": sub not in held.values()}
    return None


def with_cost(
    payment: dict[str, Any] | None, auth: PaymentAuth, decimals: dict[str, int]
) -> dict[str, Any] | None:
    """`payment` with what left the wallet (`sent`) and, when a Token-2022 transfer-fee mint
    withheld part of it, the `fee`: the payee receives `amount`, the wallet paid more."""
    if payment is None or payment["kind"] not in ("one-time", "mpp"):
        return payment
    sent = auth.spent_today()
    if sent <= int(payment["amount"]):
        return payment
    places = decimals.get(payment["token"], 0)
    fee = sent - int(payment["amount"])
    return {
        **payment,
        "sent": sent,
        "sentDecimal": format_units(sent, places),
        "fee": fee,
        "feeDecimal": format_units(fee, places),
    }


def _paid(payment: dict[str, Any]) -> str:
    """`paid X`: what left the wallet, with the fee a transfer-fee mint withheld of it."""
    if "sent" not in payment:
        return f"paid {payment['amountDecimal']}"
    return (
        f"paid {payment['sentDecimal']} (the payee receives {payment['amountDecimal']}; the "
        f"mint withheld a fee of {payment['feeDecimal']})"
    )


def _payment_line(payment: dict[str, Any] | None) -> str:
    if payment is None:
        return "no payment"
    if payment["kind"] in ("one-time", "x402"):
        how = "once" if payment["kind"] == "one-time" else f"with x402 v{payment['x402Version']}"
        return (
            f"{_paid(payment)} {how} ({payment['amount']} base units of "
            f"{payment['token']} to {payment['payTo']}), transaction {payment['transaction']}"
        )
    if payment["kind"] == "mpp":
        return (
            f"{_paid(payment)} with an MPP charge ({payment['amount']} base "
            f"units of {payment['token']} to {payment['recipient']}), transaction "
            f"{payment['transaction']}"
        )
    if payment["kind"] == "session":
        return (
            f"paid {payment['amountDecimal']} with a voucher on session {payment['session']} "
            f"({payment['cumulative']} of {payment['deposit']} base units used, "
            f"{payment['leftDecimal']} left)"
        )
    how = "subscribed: new subscription" if payment["new"] else "used subscription"
    return f"{how} {payment['subscription']} (X-Svc-Sub)"


def report(
    args: argparse.Namespace,
    method: str,
    response: httpx.Response,
    payment: dict[str, Any] | None,
) -> int:
    try:
        body: Any = response.json()
        text = json.dumps(body, indent=2)
    except ValueError:
        body = text = response.text
    data = {
        "url": args.target,
        "method": method,
        "status": response.status_code,
        "payment": payment,
        "body": body,
    }
    status = f"HTTP {response.status_code} {response.reason_phrase}".rstrip()
    emit(args, data, [status, _payment_line(payment), "", text])
    if response.status_code == 402:
        why = ""
        if isinstance(body, dict) and body.get("error"):
            why = f": {body['error']}: {body.get('message') or ''}".rstrip(": ")
        elif isinstance(body, dict) and body.get("detail"):  # an MPP problem
            why = f": {str(body.get('type', '')).rsplit('/', 1)[-1]}: {body['detail']}"
        stderr(f"svcpay pay: payment still required{why}")
        return 4
    if response.status_code >= 400:
        stderr(f"svcpay pay: {args.target} answered {status}")
        return 1
    return 0
