"""The paths of the facilitator's OpenAPI document (`svcpay.facilitator.openapi`): each
route's operation, statuses, query parameters and security, grouped by who calls it."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from svcpay.facilitator import answers as a
from svcpay.facilitator import models as m
from svcpay.schemes.mpp_charge.wire import ChargeAnswer, SettleCharge, VerifyCharge

JSON = "application/json"
Schema = dict[str, Any]


def ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


def json_content(schema: Schema) -> Schema:
    return {JSON: {"schema": schema}}


def model(cls: type[BaseModel]) -> Schema:
    """A $ref to `cls`'s generated schema (see MODELS)."""
    return ref(cls.__name__)


def ok(description: str, schema: Schema) -> Schema:
    return {"description": description, "content": json_content(schema)}


def error(description: str) -> Schema:
    """A 4xx/5xx answer: `{"error": Name, "message": what to do}`."""
    return {"description": description, "content": json_content(model(a.Error))}


def shared(name: str) -> Schema:
    return {"$ref": f"#/components/responses/{name}"}


def body(schema: Schema | type[BaseModel], description: str) -> Schema:
    content = model(schema) if isinstance(schema, type) else schema
    return {"required": True, "description": description, "content": json_content(content)}


def parameters(cls: type[BaseModel]) -> list[Schema]:
    """The optional query parameters `cls` (a query model of `models`) describes."""
    out = []
    for name, prop in cls.model_json_schema()["properties"].items():
        description = prop.pop("description", "")
        # `X | None` fields: absent is None; a parameter that is present is an X
        variants = [s for s in prop.pop("anyOf", []) if s != {"type": "null"}]
        if prop.get("default", 0) is None:
            del prop["default"]
        schema = {**prop, **variants[0]} if variants else prop
        out.append(
            {
                "name": name,
                "in": "query",
                "required": False,
                "description": description,
                "schema": schema,
            }
        )
    return out


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
RANGE = parameters(m.RangeQuery)
UNAUTHORIZED = {"401": shared("Unauthorized")}
NOT_FOUND = {"404": error("NotFound: no such (active) webhook endpoint of this provider")}


def public_paths() -> Schema:
    """The routes clients and gates call, without an API key."""
    return {**_settlement_paths(), **_charge_and_meta_paths()}


def _settlement_paths() -> Schema:
    """svcpay's one-time payments and x402's verify and settle."""
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
                "requestBody": body(
                    m.AuthorizeRequest, "the signed transfer and the terms it pays"
                ),
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
                    {"anyOf": [model(m.VerifyRequest), *x402_body["anyOf"]]},
                    "the proof to check, or an x402 payment and its requirements",
                ),
                "responses": {
                    "200": ok(
                        "the verdict",
                        {"anyOf": [model(a.Verdict), ref("X402VerifyResponse")]},
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
    }


def _charge_and_meta_paths() -> Schema:
    """MPP's Solana `charge`, pulled or pushed; what the facilitator supports, its health and
    this document."""
    return {
        "/mpp/charge/settle": {
            "post": {
                "operationId": "mppChargeSettle",
                "tags": ["payments"],
                "summary": "Settle a pulled MPP Solana `charge` (the payer signed it)",
                "description": "Checks the transaction against the charge request (one "
                "TransferChecked of the amount to ATA(recipient), the externalId memo, compute "
                "budget bounds, this facilitator as fee payer and nothing else), co-signs, "
                "simulates, sends and confirms, once per transaction whichever protocol "
                "brings it.",
                "requestBody": body(SettleCharge, "the charge request and the transaction"),
                "responses": {
                    "200": ok(
                        "the outcome: success and reference, or problem", model(ChargeAnswer)
                    ),
                    **BODY_ERRORS,
                },
            }
        },
        "/mpp/charge/verify": {
            "post": {
                "operationId": "mppChargeVerify",
                "tags": ["payments"],
                "summary": "Record an MPP Solana `charge` the payer sent itself (push)",
                "description": "Finds the transaction at `confirmed`, checks it as /mpp/charge/"
                "settle does (without a fee payer), and records it once: a signature pays once.",
                "requestBody": body(VerifyCharge, "the charge request and the signature"),
                "responses": {
                    "200": ok(
                        "the outcome: success and reference, or problem", model(ChargeAnswer)
                    ),
                    **BODY_ERRORS,
                },
            }
        },
        "/supported": {
            "get": {
                "operationId": "supported",
                "tags": ["payments"],
                "summary": "Networks and schemes settled here, and the key gates trust",
                "responses": {"200": ok("what this facilitator supports", model(a.SupportedHere))},
            }
        },
        "/health": {
            "get": {
                "operationId": "health",
                "tags": ["meta"],
                "responses": {
                    "200": ok("database and RPC node reachable, fee payer funded", model(a.Health)),
                    "503": ok(
                        "the database or the RPC node is unreachable, or the fee "
                        "payer's balance is low",
                        model(a.Health),
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


def provider_paths() -> Schema:
    """The /v1 routes providers call with their API key."""
    return {**_usage_paths(), **_event_and_analytics_paths()}


def _usage_paths() -> Schema:
    """Metered usage and session vouchers to redeem."""
    return {
        "/v1/usage": {
            "post": {
                **PROVIDER,
                "operationId": "reportUsage",
                "summary": "Report metered usage: the facilitator signs deduct_allowance",
                "requestBody": body(m.UsageRequest, "the usage to deduct from the allowance"),
                "responses": {
                    "200": ok("deducted", model(a.UsageResult)),
                    "400": error("InvalidRequest, ZeroAmount or MathOverflow"),
                    **UNAUTHORIZED,
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
                        "DeductionPending (sent, not yet confirmed), DatabaseUnavailable or "
                        "RpcUnavailable (unreachable): transient, report again with "
                        "the same key after the Retry-After header's seconds"
                    ),
                },
            }
        },
        "/v1/sessions/vouchers": {
            "post": {
                **PROVIDER,
                "operationId": "reportVouchers",
                "summary": "Report the highest session vouchers a gate took: the facilitator "
                "redeems them on chain, many sessions per transaction",
                "requestBody": body(m.SessionVouchersRequest, "one voucher per session"),
                "responses": {
                    "200": ok("one answer per voucher, in order", model(a.VoucherAnswers)),
                    "400": shared("InvalidRequest"),
                    **UNAUTHORIZED,
                    "413": shared("RequestTooLarge"),
                },
            }
        },
        "/v1/sessions": {
            "get": {
                **PROVIDER,
                "operationId": "listSessions",
                "summary": "This provider's sessions with vouchers: what is held, redeemed, due",
                "responses": {
                    "200": ok("the sessions, newest first", model(a.HeldSessions)),
                    **UNAUTHORIZED,
                },
            }
        },
    }


def _event_and_analytics_paths() -> Schema:
    """Lifecycle events, the webhooks that deliver them, and revenue and lifecycle counts (as
    JSON or a chart)."""
    return {
        "/v1/events": {
            "get": {
                **PROVIDER,
                "operationId": "listEvents",
                "summary": "This provider's lifecycle events, oldest first",
                "parameters": parameters(m.EventsQuery),
                "responses": {
                    "200": ok("a page of events", model(a.EventPage)),
                    "400": shared("InvalidRequest"),
                    **UNAUTHORIZED,
                },
            }
        },
        "/v1/webhooks": {
            "get": {
                **PROVIDER,
                "operationId": "listWebhooks",
                "responses": {
                    "200": ok("this provider's webhook endpoints", model(a.EndpointList)),
                    **UNAUTHORIZED,
                },
            },
            "post": {
                **PROVIDER,
                "operationId": "createWebhook",
                "requestBody": body(m.WebhookRequest, "where to deliver which events"),
                "responses": {
                    "201": ok("created, with its signing secret", model(a.CreatedEndpoint)),
                    **BODY_ERRORS,
                    **UNAUTHORIZED,
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
                    **UNAUTHORIZED,
                    **NOT_FOUND,
                },
            }
        },
        "/v1/webhooks/{endpoint_id}/deliveries": {
            "get": {
                **PROVIDER,
                "operationId": "listDeliveries",
                "parameters": [ENDPOINT_ID],
                "responses": {
                    "200": ok("the endpoint's deliveries, oldest first", model(a.DeliveryList)),
                    **UNAUTHORIZED,
                    **NOT_FOUND,
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
                    "200": ok("the report", model(a.AnalyticsReport)),
                    "400": shared("InvalidRequest"),
                    **UNAUTHORIZED,
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
                    **UNAUTHORIZED,
                },
            }
        },
    }
