"""The facilitator's OpenAPI 3.1 document (served at GET /openapi.json).

It describes exactly what the handlers in `svcpay.facilitator.app` accept and answer: the
request bodies (required fields, types, lengths, base58 addresses, digit-string amounts),
every status a handler can return with its body, the bearer API key of the /v1 routes,
and the protocol's PaymentOption (a 402's `paymentRequirements` entry) and PaymentProof.
tests/facilitator/test_fuzz.py fuzzes the app against it (schemathesis).
"""

from __future__ import annotations

import functools
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import JsonSchemaMode, models_json_schema

from svcpay.facilitator.lifecycle import EVENT_TYPES
from svcpay.facilitator.usage import MAX_AMOUNT as MAX_USAGE_AMOUNT
from svcpay.protocol.headers import PROTOCOL_VERSION, SCHEME_EXACT
from svcpay.schemes.x402_exact.facilitator import RequestV1, RequestV2
from svcpay.schemes.x402_exact.wire import (
    PaymentPayload,
    PaymentPayloadV1,
    SettleResponse,
    Supported,
    VerifyResponse,
)

JSON = "application/json"
Schema = dict[str, Any]

BASE58_ADDRESS = "^[1-9A-HJ-NP-Za-km-z]{32,44}$"
EVENTS_AFTER_MAX = 2**62
# The limits app.py checks (it imports this module, so they are restated here; the fuzz test
# holds the two together).
MAX_BODY = 64 * 1024
MAX_URL = 2000
MAX_IDEMPOTENCY_KEY = 200
# A webhook URL: http(s), optional user info, a host name or IPv4 address, optional port,
# path, query and fragment; no spaces or control characters (spelled out: Python's \s and
# JSON Schema's disagree on some). app.py accepts exactly these (re.fullmatch).
# https, no credentials (http and private addresses only with SVCPAY_WEBHOOK_ALLOW_LOCAL,
# which the server checks beyond this pattern).
WEBHOOK_URL = r"^[Hh][Tt][Tt][Pp][Ss]?://[A-Za-z0-9.-]+(:[0-9]{1,5})?([/?#][^\x00-\x20\x7f]*)?$"


def ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


def json_content(schema: Schema) -> Schema:
    return {JSON: {"schema": schema}}


def ok(description: str, schema: Schema) -> Schema:
    return {"description": description, "content": json_content(schema)}


def error(description: str) -> Schema:
    """A 4xx/5xx answer: `{"error": Name, "message": what to do}`."""
    return {"description": description, "content": json_content(ref("Error"))}


def shared(name: str) -> Schema:
    return {"$ref": f"#/components/responses/{name}"}


def obj(properties: Schema, required: list[str] | None = None, **extra: Any) -> Schema:
    out: Schema = {"type": "object", "properties": properties}
    if required:
        out["required"] = required
    out.update(extra)
    return out


def body(schema: Schema, description: str) -> Schema:
    return {"required": True, "description": description, "content": json_content(schema)}


def query(name: str, description: str, schema: Schema) -> Schema:
    return {
        "name": name,
        "in": "query",
        "required": False,
        "description": description,
        "schema": schema,
    }


BODY_ERRORS = {
    "400": shared("InvalidRequest"),
    "413": shared("RequestTooLarge"),
}
PROVIDER = {"security": [{"apiKey": []}], "tags": ["provider"]}
ENDPOINT_ID = {
    "name": "endpoint_id",
    "in": "path",
    "required": True,
    "description": "the webhook endpoint's id (`we_...`)",
    "schema": {"type": "string", "minLength": 1},
}
# What analytics.parse_range reads, around str.strip()'s whitespace (JSON Schema's \s lacks
# a few of Python's).
_SPACE = r"[\s\x1c-\x1f\x85]*"
RANGE_BOUND = rf"^{_SPACE}([0-9]{{4}}-[0-9]{{2}}-[0-9]{{2}}|[0-9]{{1,15}}){_SPACE}$"
RANGE = [
    query(
        "from",
        "start of the range: a UTC date YYYY-MM-DD or unix seconds (default: 30 days before "
        "`to`); at most 366 days before `to`",
        {"type": "string", "pattern": RANGE_BOUND},
    ),
    query(
        "to",
        "end of the range: a UTC date YYYY-MM-DD (inclusive) or unix seconds (exclusive); "
        "default: the end of today",
        {"type": "string", "pattern": RANGE_BOUND},
    ),
]


# x402's objects, generated from the pydantic models the handlers use (requests as they are
# validated, answers as they are serialized), named X402<Model> among the components.
X402_MODELS: list[tuple[type[BaseModel], JsonSchemaMode]] = [
    (RequestV2, "validation"),
    (RequestV1, "validation"),
    (PaymentPayload, "validation"),  # what paymentPayload holds, judged as a payment
    (PaymentPayloadV1, "validation"),
    (VerifyResponse, "serialization"),
    (SettleResponse, "serialization"),
    (Supported, "serialization"),
]


def generated(models: list[tuple[type[BaseModel], JsonSchemaMode]], prefix: str) -> Schema:
    """JSON Schemas of `models` and of every model they use, keyed `prefix` + class name,
    their $refs pointing into the document's components."""
    _, top = models_json_schema(models, ref_template=f"#/components/schemas/{prefix}{{model}}")
    return {f"{prefix}{name}": s for name, s in top.get("$defs", {}).items()}


def _components() -> Schema:
    address = {
        "type": "string",
        "pattern": BASE58_ADDRESS,
        "description": "a base58 Solana address (32 bytes)",
    }
    amount = {
        "type": "string",
        "pattern": "^[0-9]{1,20}$",
        "description": 'base units as a decimal string within u64, e.g. "500000"',
    }
    unix = {"type": "integer", "minimum": 0, "description": "unix seconds"}
    schemas: Schema = {
        "Error": obj(
            {
                "error": {
                    "type": "string",
                    "description": "what went wrong, e.g. InvalidRequest, Unauthorized, "
                    "NotFound, InsufficientFunds, TermsMismatch, AllowanceExhausted",
                },
                "message": {"type": "string", "description": "what to do about it"},
            },
            ["error", "message"],
        ),
        "Address": address,
        "Amount": amount,
        "SvcExtension": obj(
            {
                "planId": ref("Address"),
                "subscriptionScheme": {"type": "boolean"},
                "facilitator": {"type": "string"},
                "interval": {"type": "integer", "minimum": 1},
            },
            description="svc: subscription and plan information (spec 2.3)",
        ),
        "PaymentOption": obj(
            {
                "scheme": {"type": "string", "enum": [SCHEME_EXACT]},
                "network": {"type": "string", "description": "e.g. solana-mainnet"},
                "token": ref("Address"),
                "amount": ref("Amount"),
                "payTo": ref("Address"),
                "memo": {
                    "type": "string",
                    "minLength": 1,
                    "description": "the memo the server issued (required for one-time)",
                },
                "svc": ref("SvcExtension"),
            },
            ["scheme", "network", "token", "amount", "payTo", "memo"],
            description="one entry of a 402 body's `accepts` (its paymentRequirements); "
            "unknown fields are tolerated",
        ),
        "PaymentProof": obj(
            {
                "version": {"type": "string", "enum": [PROTOCOL_VERSION]},
                "network": {"type": "string"},
                "transaction": {
                    "type": "string",
                    "description": "the settled transaction's signature (base58)",
                },
                "payer": ref("Address"),
                "payTo": ref("Address"),
                "token": ref("Address"),
                "amount": ref("Amount"),
                "memo": {"type": "string"},
                "issuedAt": unix,
                "expiresAt": unix,
                "facilitator": ref("Address"),
                "signature": {
                    "type": "string",
                    "description": "the facilitator's base58 ed25519 signature over "
                    'b"svcpay-proof-v1:" + the canonical JSON of the other fields',
                },
            },
            [
                "network",
                "transaction",
                "payer",
                "payTo",
                "token",
                "amount",
                "memo",
                "issuedAt",
                "expiresAt",
                "facilitator",
            ],
            description="a settlement's signed proof, sent to gates as X-PAYMENT: base64(JSON)",
        ),
        "Event": obj(
            {
                "id": {"type": "string"},
                "type": {"type": "string", "enum": list(EVENT_TYPES)},
                "created": unix,
                "data": {"type": "object"},
            },
            ["id", "type", "created", "data"],
            additionalProperties=False,
            description="a lifecycle event (also the body of a webhook delivery)",
        ),
        "WebhookEndpoint": obj(
            {
                "id": {"type": "string"},
                "url": {"type": "string"},
                "eventTypes": {"type": "array", "items": {"type": "string"}},
                "created": unix,
                "disabled": {"type": "boolean"},
            },
            ["id", "url", "eventTypes", "created", "disabled"],
        ),
        "Delivery": obj(
            {
                "id": {"type": "integer"},
                "eventId": {"type": "string"},
                "status": {"type": "string", "enum": ["pending", "delivered", "dead"]},
                "attempts": {"type": "integer", "minimum": 0},
                "lastStatus": {"type": ["integer", "null"]},
                "lastError": {"type": ["string", "null"]},
                "deliveredAt": {"type": ["integer", "null"]},
            },
            ["id", "eventId", "status", "attempts", "lastStatus", "lastError", "deliveredAt"],
        ),
    }
    schemas["AnalyticsReport"] = _analytics_report()
    schemas.update(generated(X402_MODELS, "X402"))
    responses: Schema = {
        "InvalidRequest": error(
            "InvalidRequest: the body is not a JSON object, a field is missing or malformed, "
            "or a query parameter is out of range; the message names it"
        ),
        "RequestTooLarge": error(f"RequestTooLarge: the body exceeds {MAX_BODY} bytes"),
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
                "api-key create`",
            }
        },
    }


def _analytics_report() -> Schema:
    """What `analytics.report` answers for one provider."""
    units = {"type": "string", "pattern": "^[0-9]+$", "description": "base units"}
    count = {"type": "integer", "minimum": 0}
    day = {"type": "string", "format": "date"}
    volume = obj({"volume": units, "payments": count}, ["volume", "payments"])
    modes = ["oneTime", "subscription", "metered"]
    day_row = obj(
        {
            "date": day,
            **dict.fromkeys(modes, units),
            "volume": units,
            "payments": count,
            "newSubscriptions": count,
            "churned": count,
            "activeSubscriptions": {"type": "integer"},
        },
        ["date", *modes, "volume", "payments", "newSubscriptions", "churned"],
    )
    return obj(
        {
            "from": day,
            "to": day,
            "start": {"type": "integer", "minimum": 0},
            "end": {"type": "integer", "minimum": 0},
            "provider": {"type": ["string", "null"]},
            "totals": obj(
                {
                    "volume": units,
                    "payments": count,
                    "byMode": obj(dict.fromkeys(modes, volume), modes),
                },
                ["volume", "payments", "byMode"],
            ),
            "days": {"type": "array", "items": day_row},
            "byPlan": {
                "type": "array",
                "items": obj(
                    {"plan": {"type": "string"}, "volume": units, "payments": count},
                    ["plan", "volume", "payments"],
                ),
            },
            "subscriptions": obj(
                {"active": count, "new": count, "churned": count}, ["active", "new", "churned"]
            ),
            "recurringRevenue": obj(
                {"monthly": units, "basis": {"type": "string"}}, ["monthly", "basis"]
            ),
        },
        [
            "from",
            "to",
            "start",
            "end",
            "totals",
            "days",
            "byPlan",
            "subscriptions",
            "recurringRevenue",
        ],
        description="payment volume by day, mode and plan; subscriptions; recurring revenue "
        "(amounts in base units)",
    )


def _public_paths() -> Schema:
    fee_payer = obj(
        {
            "address": {"type": "string"},
            "lamports": {"type": ["integer", "null"]},
            "status": {"type": "string", "enum": ["ok", "low", "unknown"]},
        },
        ["address", "lamports", "status"],
    )
    health_body = obj(
        {
            "status": {"type": "string", "enum": ["ok", "degraded"]},
            "database": {"type": "string", "enum": ["ok", "unreachable"]},
            "rpc": {"type": "string", "enum": ["ok", "unreachable"]},
            "feePayer": fee_payer,
        },
        ["status", "database", "rpc", "feePayer"],
    )
    authorize_body = obj(
        {
            "signedPayment": {
                "type": "string",
                "description": "base64 of the client-signed v0 transaction whose fee payer "
                "is the facilitator",
            },
            "paymentRequirements": ref("PaymentOption"),
        },
        ["signedPayment", "paymentRequirements"],
    )
    verify_body = obj({"proof": ref("PaymentProof")}, ["proof"])
    supported = {
        "allOf": [
            ref("X402Supported"),
            obj(
                {
                    "feePayer": ref("Address"),
                    "facilitatorKey": ref("Address"),
                    "eventTypes": {"type": "array", "items": {"type": "string"}},
                },
                ["feePayer", "facilitatorKey", "eventTypes"],
            ),
        ],
        "description": "x402's SupportedResponse (an `exact` kind per wire version) and "
        "svcpay's fields: the fee payer, the key that signs proofs, the webhook event types",
    }
    x402_body = {"anyOf": [ref("X402RequestV2"), ref("X402RequestV1")]}
    x402_errors = {
        "400": error(
            "InvalidRequest: not an x402 request (x402Version 1 or 2, paymentPayload and "
            "well-formed paymentRequirements); every payment itself is answered with 200"
        ),
        "413": shared("RequestTooLarge"),
    }
    return {
        "/authorize": {
            "post": {
                "operationId": "authorize",
                "tags": ["payments"],
                "summary": "Settle a one-time payment and answer its signed proof",
                "requestBody": body(authorize_body, "the signed transfer and the terms it pays"),
                "responses": {
                    "200": ok("settled: the proof", ref("PaymentProof")),
                    "400": error(
                        "InvalidRequest, InvalidTransaction (not exactly one TransferChecked "
                        "and one memo, a foreign fee payer, ...), TermsMismatch, or "
                        "BlockhashExpired (sign again)"
                    ),
                    "402": error("InsufficientFunds: the payer's token account lacks the amount"),
                    "403": error(
                        "UnknownPayTo: payTo is not a registered provider's account "
                        "(the facilitator pays fees only for its providers' payments)"
                    ),
                    "429": error("RateLimited: too many payments from this payer; retry later"),
                    "413": shared("RequestTooLarge"),
                    "422": error(
                        "SettlementFailed: the transaction failed in simulation or on chain"
                    ),
                    "504": error(
                        "SettlementPending: sent but not yet confirmed; submit the "
                        "same request again"
                    ),
                },
            }
        },
        "/verify": {
            "post": {
                "operationId": "verify",
                "tags": ["payments"],
                "summary": "Check an svcpay proof, or verify an x402 payment (by the body)",
                "description": "A body with `x402Version` is x402's verify: every check "
                "/settle makes and a simulation, answered with 200 and x402's reason. "
                "Otherwise the proof is checked: this facilitator's, unexpired, settled.",
                "requestBody": body(
                    {"anyOf": [verify_body, x402_body["anyOf"][0], x402_body["anyOf"][1]]},
                    "the proof to check, or an x402 payment and its requirements",
                ),
                "responses": {
                    "200": ok(
                        "the verdict",
                        {
                            "anyOf": [
                                obj(
                                    {"valid": {"type": "boolean"}, "reason": {"type": "string"}},
                                    ["valid", "reason"],
                                ),
                                ref("X402VerifyResponse"),
                            ]
                        },
                    ),
                    **BODY_ERRORS,
                },
            }
        },
        "/settle": {
            "post": {
                "operationId": "settle",
                "tags": ["payments"],
                "summary": "Settle an x402 `exact` payment (v1 or v2)",
                "description": "Checks, simulates, co-signs as fee payer, sends and confirms. "
                "A transaction settled before (by any request, instance, or /authorize) "
                "fails with duplicate_settlement; concurrent duplicates settle once.",
                "requestBody": body(x402_body, "the payment and its requirements"),
                "responses": {
                    "200": ok(
                        "the outcome: success, or errorReason (x402's reason string)",
                        ref("X402SettleResponse"),
                    ),
                    **x402_errors,
                },
            }
        },
        "/supported": {
            "get": {
                "operationId": "supported",
                "tags": ["payments"],
                "summary": "Networks and schemes settled here, and the key gates trust",
                "responses": {"200": ok("what this facilitator supports", supported)},
            }
        },
        "/health": {
            "get": {
                "operationId": "health",
                "tags": ["meta"],
                "responses": {
                    "200": ok("database and RPC node reachable, fee payer funded", health_body),
                    "503": ok(
                        "the database or the RPC node is unreachable, or the fee "
                        "payer's balance is low",
                        health_body,
                    ),
                },
            }
        },
        "/openapi.json": {
            "get": {
                "operationId": "openapi",
                "tags": ["meta"],
                "responses": {"200": ok("this document", {"type": "object"})},
            }
        },
    }


def _provider_paths() -> Schema:
    amount = {
        "oneOf": [
            ref("Amount"),
            {"type": "integer", "minimum": 1, "maximum": MAX_USAGE_AMOUNT},
        ],
        "description": f"base units, 1 to {MAX_USAGE_AMOUNT}: a decimal string or an integer",
    }
    usage_body = obj(
        {
            "subscription": ref("Address"),
            "amount": amount,
            "idempotencyKey": {
                "type": "string",
                "minLength": 1,
                "maxLength": MAX_IDEMPOTENCY_KEY,
                "description": "the same key reports the same usage once",
            },
        },
        ["subscription", "amount", "idempotencyKey"],
    )
    usage_result = obj(
        {
            "id": {"type": "string"},
            "status": {"type": "string", "description": "deducted"},
            "subscription": ref("Address"),
            "amount": ref("Amount"),
            "transaction": {"type": "string", "description": "the deduction's signature"},
            "used": {"type": "string", "pattern": "^[0-9]+$"},
            "cap": {"type": "string", "pattern": "^[0-9]+$"},
            "remaining": {"type": "string", "pattern": "^[0-9]+$"},
        },
        ["id", "status", "subscription", "amount", "transaction"],
    )
    webhook_body = obj(
        {
            "url": {
                "type": "string",
                "maxLength": MAX_URL,
                "pattern": WEBHOOK_URL,
                "description": "an absolute http(s) URL: a host name or IPv4 address, no spaces",
            },
            "eventTypes": {
                "type": "array",
                "minItems": 1,
                "items": {"type": "string", "enum": ["*", *EVENT_TYPES]},
                "default": ["*"],
            },
        },
        ["url"],
    )
    created_endpoint = {
        "allOf": [
            ref("WebhookEndpoint"),
            obj(
                {"secret": {"type": "string", "description": "the signing secret, shown once"}},
                ["secret"],
            ),
        ]
    }
    unauthorized = {"401": shared("Unauthorized")}
    not_found = {"404": error("NotFound: no such (active) webhook endpoint of this provider")}
    return {
        "/v1/usage": {
            "post": {
                **PROVIDER,
                "operationId": "reportUsage",
                "summary": "Report metered usage: the facilitator signs deduct_allowance",
                "requestBody": body(usage_body, "the usage to deduct from the allowance"),
                "responses": {
                    "200": ok("deducted", usage_result),
                    "400": error("InvalidRequest, ZeroAmount or MathOverflow"),
                    **unauthorized,
                    "402": error(
                        "AllowanceExhausted, SubscriptionNotActive or SubscriptionEnded: the "
                        "subscriber must act"
                    ),
                    "403": error("Forbidden: the subscription's plan is not this provider's"),
                    "404": error("NotFound: no such subscription"),
                    "409": error(
                        "IdempotencyKeyReused (different content), NoAllowance (the "
                        "subscription has no metered allowance), Unauthorized (the "
                        "facilitator is not the plan's billing authority), DeductionFailed "
                        "or another program error: final, a retry gets the same answer"
                    ),
                    "413": shared("RequestTooLarge"),
                    "503": error(
                        "DeductionPending (sent, not yet confirmed) or Unavailable (the RPC "
                        "node or the database is unreachable): transient, report again with "
                        "the same key after the Retry-After header's seconds"
                    ),
                },
            }
        },
        "/v1/events": {
            "get": {
                **PROVIDER,
                "operationId": "listEvents",
                "summary": "This provider's lifecycle events, oldest first",
                "parameters": [
                    query(
                        "after",
                        "only events after this sequence number (the previous page's `next`)",
                        {"type": "integer", "minimum": 0, "maximum": EVENTS_AFTER_MAX},
                    ),
                    query(
                        "limit",
                        "at most this many events",
                        {"type": "integer", "minimum": 1, "maximum": 1000, "default": 100},
                    ),
                ],
                "responses": {
                    "200": ok(
                        "a page of events",
                        obj(
                            {
                                "events": {"type": "array", "items": ref("Event")},
                                "next": {"type": "integer", "minimum": 0},
                            },
                            ["events", "next"],
                        ),
                    ),
                    "400": shared("InvalidRequest"),
                    **unauthorized,
                },
            }
        },
        "/v1/webhooks": {
            "get": {
                **PROVIDER,
                "operationId": "listWebhooks",
                "responses": {
                    "200": ok(
                        "this provider's webhook endpoints",
                        obj(
                            {"endpoints": {"type": "array", "items": ref("WebhookEndpoint")}},
                            ["endpoints"],
                        ),
                    ),
                    **unauthorized,
                },
            },
            "post": {
                **PROVIDER,
                "operationId": "createWebhook",
                "requestBody": body(webhook_body, "where to deliver which events"),
                "responses": {
                    "201": ok("created, with its signing secret", created_endpoint),
                    **BODY_ERRORS,
                    **unauthorized,
                },
            },
        },
        "/v1/webhooks/{endpoint_id}": {
            "delete": {
                **PROVIDER,
                "operationId": "disableWebhook",
                "parameters": [ENDPOINT_ID],
                "responses": {
                    "204": {"description": "disabled"},
                    **unauthorized,
                    **not_found,
                },
            }
        },
        "/v1/webhooks/{endpoint_id}/deliveries": {
            "get": {
                **PROVIDER,
                "operationId": "listDeliveries",
                "parameters": [ENDPOINT_ID],
                "responses": {
                    "200": ok(
                        "the endpoint's deliveries, oldest first",
                        obj(
                            {"deliveries": {"type": "array", "items": ref("Delivery")}},
                            ["deliveries"],
                        ),
                    ),
                    **unauthorized,
                    **not_found,
                },
            }
        },
        "/v1/analytics": {
            "get": {
                **PROVIDER,
                "operationId": "analytics",
                "summary": "Revenue and lifecycle counts over a time range",
                "parameters": RANGE,
                "responses": {
                    "200": ok("the report", ref("AnalyticsReport")),
                    "400": shared("InvalidRequest"),
                    **unauthorized,
                },
            }
        },
        "/v1/analytics/chart.png": {
            "get": {
                **PROVIDER,
                "operationId": "analyticsChart",
                "summary": "The report as a PNG chart",
                "parameters": RANGE,
                "responses": {
                    "200": {
                        "description": "the chart",
                        "content": {
                            "image/png": {"schema": {"type": "string", "format": "binary"}}
                        },
                    },
                    "400": shared("InvalidRequest"),
                    **unauthorized,
                },
            }
        },
    }


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
        "paths": {**_public_paths(), **_provider_paths()},
        "components": _components(),
    }
