"""The 402 body: strict parsing with a reason per defect; unknown fields tolerated."""

from __future__ import annotations

import json

import pytest
from solders.pubkey import Pubkey

from svcpay.protocol.models import PaymentRequired, ProtocolError

MINT, PAY_TO, PLAN = (str(Pubkey.new_unique()) for _ in range(3))


def body(**option: object) -> dict[str, object]:
    base: dict[str, object] = {
        "scheme": "exact",
        "network": "solana-mainnet",
        "token": MINT,
        "amount": "500000",
        "payTo": PAY_TO,
        "memo": "m1",
    }
    base.update(option)
    return {"version": "1", "accepts": [base]}


def test_a_one_time_body_parses_with_camel_case_fields() -> None:
    parsed = PaymentRequired.parse(json.dumps(body()))
    option = parsed.accepts[0]
    assert (option.pay_to, option.amount_units, option.is_subscription) == (PAY_TO, 500_000, False)
    assert parsed.to_json_dict()["accepts"][0]["payTo"] == PAY_TO


def test_a_subscription_option_carries_plan_amount_interval_and_token() -> None:
    svc = {
        "planId": PLAN,
        "subscriptionScheme": True,
        "interval": 2_592_000,
        "facilitator": "http://f",
    }
    option = PaymentRequired.parse(json.dumps(body(svc=svc, memo=None))).accepts[0]
    assert option.is_subscription and option.svc is not None
    assert (option.svc.plan_id, option.svc.interval, option.amount, option.token) == (
        PLAN,
        2_592_000,
        "500000",
        MINT,
    )


def test_unknown_fields_are_tolerated() -> None:
    raw = body(extraThing={"x": 1})
    raw["futureField"] = True
    parsed = PaymentRequired.parse(json.dumps(raw))
    assert parsed.accepts[0].model_extra == {"extraThing": {"x": 1}}


@pytest.mark.parametrize(
    ("mutate", "reason"),
    [
        (lambda b: b.update(version="2"), "unsupported version '2'; supported: 1"),
        (lambda b: b.update(accepts=[]), "accepts"),
        (lambda b: b["accepts"][0].update(amount="0.5"), "decimal string of base units"),
        (lambda b: b["accepts"][0].update(amount=str(2**64)), "exceeds u64"),
        (lambda b: b["accepts"][0].update(payTo="nope"), "payTo must be a base58 Solana address"),
        (lambda b: b["accepts"][0].update(scheme="upto"), "unsupported scheme"),
        (lambda b: b["accepts"][0].pop("memo"), "needs the memo"),
        (
            lambda b: b["accepts"][0].update(svc={"subscriptionScheme": True}),
            "svc.planId and svc.interval",
        ),
    ],
)
def test_each_defect_is_named(mutate: object, reason: str) -> None:
    raw = body()
    mutate(raw)  # type: ignore[operator]
    with pytest.raises(ProtocolError, match=reason):
        PaymentRequired.parse(json.dumps(raw))


def test_non_json_is_refused_with_a_reason() -> None:
    with pytest.raises(ProtocolError, match="not JSON"):
        PaymentRequired.parse(b"<html>")
