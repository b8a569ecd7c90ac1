"""The request models the handlers parse with and the OpenAPI document generated from them
refuse the same bodies (pure: no app, no chain). The fuzz test (test_fuzz.py) checks the
same against the running app; these pin the edges it may not reach."""

from __future__ import annotations

from typing import Any

import jsonschema_rs
import pytest
from pydantic import BaseModel

from svcpay.facilitator import models as m
from svcpay.facilitator import openapi
from svcpay.protocol.models import ProtocolError

ADDRESS = "So11111111111111111111111111111111111111112"
# 44 base58 characters that decode to more than 32 bytes: the pattern passes, the key does not
NOT_A_KEY = "z" * 44
OPTION = {
    "scheme": "exact",
    "network": "solana-mainnet",
    "token": ADDRESS,
    "amount": "1000",
    "payTo": ADDRESS,
    "memo": "order-1",
}
PROOF = {
    "network": "solana-mainnet",
    "transaction": "5" * 88,
    "payer": ADDRESS,
    "payTo": ADDRESS,
    "token": ADDRESS,
    "amount": "1000",
    "memo": "order-1",
    "issuedAt": 1_700_000_000,
    "expiresAt": 4_000_000_000,
    "facilitator": ADDRESS,
}


def documented(model: type[BaseModel]) -> jsonschema_rs.Validator:
    doc = openapi.schema()
    root = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$ref": f"#/components/schemas/{model.__name__}",
        "components": doc["components"],
    }
    return jsonschema_rs.Draft202012Validator(root)


def parsed(model: type[BaseModel], body: Any) -> bool:
    try:
        m.parse(model, body)
    except ProtocolError:
        return False
    return True


def authorize(**fields: Any) -> dict[str, Any]:
    return {"signedPayment": "AAAA", "paymentRequirements": OPTION, **fields}


def usage(**fields: Any) -> dict[str, Any]:
    return {"subscription": ADDRESS, "amount": "5", "idempotencyKey": "k", **fields}


CASES: list[tuple[type[BaseModel], Any, bool]] = [
    (m.AuthorizeRequest, authorize(), True),
    (m.AuthorizeRequest, authorize(signedPayment="ABC="), True),
    (m.AuthorizeRequest, authorize(signedPayment=""), True),
    (m.AuthorizeRequest, authorize(signedPayment="ABCD=="), False),  # padding after a quad
    (m.AuthorizeRequest, authorize(signedPayment="AB C"), False),
    (m.AuthorizeRequest, authorize(signedPayment=5), False),
    (m.AuthorizeRequest, {"signed_payment": "AAAA", "paymentRequirements": OPTION}, False),
    (m.AuthorizeRequest, authorize(paymentRequirements={**OPTION, "memo": ""}), False),
    (m.AuthorizeRequest, authorize(paymentRequirements={**OPTION, "memo": None}), False),
    (m.AuthorizeRequest, authorize(paymentRequirements={**OPTION, "scheme": "upto"}), False),
    (m.AuthorizeRequest, authorize(paymentRequirements={**OPTION, "amount": 5}), False),
    (m.AuthorizeRequest, authorize(paymentRequirements={**OPTION, "amount": "٣"}), False),
    (m.AuthorizeRequest, authorize(paymentRequirements={**OPTION, "amount": "0" * 30}), True),
    (m.AuthorizeRequest, authorize(paymentRequirements={**OPTION, "extra": [1]}), True),
    (
        m.AuthorizeRequest,
        authorize(paymentRequirements={**OPTION, "svc": {"interval": True}}),
        False,
    ),
    (m.VerifyRequest, {"proof": PROOF}, True),
    (m.VerifyRequest, {"proof": {**PROOF, "version": "2"}}, False),
    (m.VerifyRequest, {"proof": {**PROOF, "issuedAt": "5"}}, False),
    (m.VerifyRequest, {"proof": {**PROOF, "payer": "0" * 44}}, False),
    (m.UsageRequest, usage(), True),
    (m.UsageRequest, usage(amount=1), True),
    (m.UsageRequest, usage(amount=m.MAX_AMOUNT), True),
    (m.UsageRequest, usage(amount=m.MAX_AMOUNT + 1), False),
    (m.UsageRequest, usage(amount=0), False),
    (m.UsageRequest, usage(amount=True), False),
    (m.UsageRequest, usage(amount="-1"), False),
    (m.UsageRequest, usage(amount=" 1"), False),
    (m.UsageRequest, usage(idempotencyKey="k" * 200), True),
    (m.UsageRequest, usage(idempotencyKey="k" * 201), False),
    (m.UsageRequest, usage(idempotencyKey=""), False),
    (m.UsageRequest, {"subscription": ADDRESS, "amount": "5", "idempotency_key": "k"}, False),
    (m.WebhookRequest, {"url": "https://hooks.example.com/a?b#c"}, True),
    (m.WebhookRequest, {"url": "HTTP://10.0.0.1:8080"}, True),
    (m.WebhookRequest, {"url": "https://example.com", "eventTypes": ["*"]}, True),
    (m.WebhookRequest, {"url": "https://user@example.com"}, False),
    (m.WebhookRequest, {"url": "https://example.com/a b"}, False),
    (m.WebhookRequest, {"url": "https://example.com/\n"}, False),
    (m.WebhookRequest, {"url": "https://example.com/" + "a" * 2000}, False),
    (m.WebhookRequest, {"url": "https://example.com", "eventTypes": []}, False),
    (m.WebhookRequest, {"url": "https://example.com", "eventTypes": ["nope"]}, False),
    (m.WebhookRequest, {"url": "https://example.com", "event_types": ["*"]}, True),  # ignored
]


@pytest.mark.parametrize(("model", "body", "valid"), CASES)
def test_the_document_and_the_handler_agree(model: type[BaseModel], body: Any, valid: bool) -> None:
    assert documented(model).is_valid(body) is valid
    assert parsed(model, body) is valid


@pytest.mark.parametrize(
    ("model", "body"),
    [
        (m.UsageRequest, usage(subscription=NOT_A_KEY)),
        (m.UsageRequest, usage(amount=str(m.MAX_AMOUNT + 1))),
        (m.AuthorizeRequest, authorize(paymentRequirements={**OPTION, "payTo": NOT_A_KEY})),
        (m.AuthorizeRequest, authorize(paymentRequirements={**OPTION, "amount": "9" * 20})),
        (m.VerifyRequest, {"proof": {**PROOF, "amount": str(2**64)}}),
        # JSON Schema's integers include 1.0 (the same number); the handlers take JSON's
        # integers only
        (m.VerifyRequest, {"proof": {**PROOF, "expiresAt": 1.0}}),
        (m.UsageRequest, usage(amount=5.0)),
    ],
)
def test_what_a_schema_cannot_say_is_refused_by_the_handler_alone(
    model: type[BaseModel], body: Any
) -> None:
    """Keys that are no 32-byte point and amounts beyond the store's range pass the
    patterns; the models refuse them (which is why the fuzz test lets these operations
    refuse schema-valid bodies: SEMANTIC)."""
    assert documented(model).is_valid(body)
    assert not parsed(model, body)


def test_every_schema_in_the_document_is_generated() -> None:
    """openapi.py writes paths; every component schema comes from a model."""
    generated = {
        **openapi.generated(openapi.MODELS, ""),
        **openapi.generated(openapi.X402_MODELS, "X402"),
    }
    assert openapi.schema()["components"]["schemas"] == generated
