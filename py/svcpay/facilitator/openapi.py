"""The facilitator's OpenAPI 3.1 document (served at GET /openapi.json).

Its schemas are generated from the pydantic models the handlers validate with and answer
in (`svcpay.facilitator.models` and `.answers`, the protocol's PaymentOption and PaymentProof,
x402's request and answer models), so the document and the app refuse the same bodies; this
module adds the paths, statuses, query parameters and the bearer API key of the /v1 routes.
tests/facilitator/test_fuzz.py fuzzes the app against it (schemathesis).
"""

from __future__ import annotations

import functools
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import JsonSchemaMode, models_json_schema

from svcpay.facilitator import answers as a
from svcpay.facilitator import models as m
from svcpay.facilitator.models import MAX_BODY
from svcpay.facilitator.openapi_paths import Schema, error, provider_paths, public_paths, shared
from svcpay.schemes.mpp_charge.wire import ChargeAnswer, SettleCharge, VerifyCharge
from svcpay.schemes.x402_exact.facilitator import RequestV1, RequestV2
from svcpay.schemes.x402_exact.wire import (
    PaymentPayload,
    PaymentPayloadV1,
    SettleResponse,
    VerifyResponse,
)

# The models the handlers use, requests as they are validated and answers as they are
# serialized, named by class among the components; x402's are named X402<Model>.
MODELS: list[tuple[type[BaseModel], JsonSchemaMode]] = [
    (m.AuthorizeRequest, "validation"),  # its PaymentOption (OneTimeOption)
    (m.VerifyRequest, "validation"),  # its PaymentProof, also /authorize's answer
    (m.UsageRequest, "validation"),
    (m.SessionVouchersRequest, "validation"),
    (m.WebhookRequest, "validation"),
    (SettleCharge, "validation"),
    (VerifyCharge, "validation"),
    (ChargeAnswer, "serialization"),
    (a.Error, "serialization"),
    (a.Verdict, "serialization"),
    (a.UsageResult, "serialization"),
    (a.EventPage, "serialization"),
    (a.VoucherAnswers, "serialization"),
    (a.HeldSessions, "serialization"),
    (a.EndpointList, "serialization"),
    (a.CreatedEndpoint, "serialization"),
    (a.DeliveryList, "serialization"),
    (a.Health, "serialization"),
    (a.SupportedHere, "serialization"),
    (a.AnalyticsReport, "serialization"),
]
X402_MODELS: list[tuple[type[BaseModel], JsonSchemaMode]] = [
    (RequestV2, "validation"),
    (RequestV1, "validation"),
    (PaymentPayload, "validation"),  # what paymentPayload holds, judged as a payment
    (PaymentPayloadV1, "validation"),
    (VerifyResponse, "serialization"),
    (SettleResponse, "serialization"),
]


def generated(models: list[tuple[type[BaseModel], JsonSchemaMode]], prefix: str) -> Schema:
    """JSON Schemas of `models` and of every model they use, keyed `prefix` + class name,
    their $refs pointing into the document's components."""
    _, top = models_json_schema(models, ref_template=f"#/components/schemas/{prefix}{{model}}")
    return {f"{prefix}{name}": s for name, s in top.get("$defs", {}).items()}


def _components() -> Schema:
    schemas: Schema = {
        **generated(MODELS, ""),
        **generated(X402_MODELS, "X402"),
    }
    responses: Schema = {
        "InvalidRequest": error(
            "InvalidRequest: the body is not a JSON object, a field is missing or malformed, "
            "or a query parameter is out of range; the message names it"
        ),
        "RequestTooLarge": error(f"RequestTooLarge: the body exceeds {MAX_BODY} bytes"),
        "Unavailable": {
            **error(
                "DatabaseUnavailable or RpcUnavailable: the database or the RPC node is "
                "unreachable; send the same request again after the Retry-After header's "
                "seconds (a payment is settled at most once however often it is sent)"
            ),
            "headers": {"Retry-After": {"schema": {"type": "integer"}}},
        },
        "Unauthorized": error(
            "Unauthorized: no `Authorization: Bearer <API key>`, or the key is unknown or revoked"
        ),
    }
    return {
        "schemas": schemas,
        "responses": responses,
        "securitySchemes": {
            "apiKey": {
                "type": "http",
                "scheme": "bearer",
                "description": "a provider's API key (`svc_...`), from `svcpay facilitator "
                "provider create`",
            }
        },
    }


def _with_unavailable(paths: Schema) -> Schema:
    """Every operation may answer 503 while the database or the RPC node is away."""
    for operations in paths.values():
        for operation in operations.values():
            operation["responses"].setdefault("503", shared("Unavailable"))
    return paths


@functools.cache
def schema() -> dict[str, Any]:
    """The OpenAPI document, built once (callers share it: do not modify it)."""
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "svcpay facilitator",
            "version": "1",
            "description": "Settles HTTP 402 payments on Solana, verifies their proofs, and "
            "serves providers metered usage, lifecycle events, webhooks and analytics. Every "
            'error is {"error": Name, "message": what to do}.',
        },
        "tags": [
            {"name": "payments", "description": "public: clients and gates"},
            {"name": "provider", "description": "providers, with their API key"},
            {"name": "meta"},
        ],
        "paths": _with_unavailable({**public_paths(), **provider_paths()}),
        "components": _components(),
    }
