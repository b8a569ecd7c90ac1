"""Webhook signatures, for the facilitator that sends them and the receivers that check them.

Every delivery is a POST of the event as JSON (`{"id", "type", "created", "data"}`) with

    Svcpay-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>
    Svcpay-Event-Id: <event id>

A receiver calls `verify_webhook(secret, body, headers["Svcpay-Signature"])`: it checks the
HMAC in constant time, refuses timestamps more than `tolerance` seconds away (a replayed
delivery), and returns the parsed event. Deliveries are at least once: dedupe by `id`.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from typing import Any

SIGNATURE_HEADER = "Svcpay-Signature"
EVENT_ID_HEADER = "Svcpay-Event-Id"
DEFAULT_TOLERANCE_SECS = 300

__all__ = [
    "DEFAULT_TOLERANCE_SECS",
    "EVENT_ID_HEADER",
    "SIGNATURE_HEADER",
    "WebhookSignatureError",
    "sign_webhook",
    "verify_webhook",
]


class WebhookSignatureError(ValueError):
    """The delivery is not authentic or is stale; answer it with 400."""


def _mac(secret: str, timestamp: int, body: bytes) -> str:
    return hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()


def sign_webhook(secret: str, body: bytes, timestamp: int | None = None) -> str:
    """The `Svcpay-Signature` header value for `body`."""
    ts = int(time.time()) if timestamp is None else timestamp
    return f"t={ts},v1={_mac(secret, ts, body)}"


def verify_webhook(
    secret: str,
    body: bytes,
    signature_header: str | None,
    *,
    tolerance: int = DEFAULT_TOLERANCE_SECS,
    now: int | None = None,
) -> dict[str, Any]:
    """The event in `body` if `signature_header` signs it with `secret` within `tolerance`
    seconds of now; raises WebhookSignatureError otherwise."""
    if not signature_header:
        raise WebhookSignatureError(f"the {SIGNATURE_HEADER} header is missing")
    ts: int | None = None
    candidates: list[str] = []
    for part in signature_header.split(","):
        key, _, value = part.strip().partition("=")
        if key == "t" and value.isascii() and value.isdigit() and len(value) < 12:
            ts = int(value)
        elif key == "v1":
            candidates.append(value)
    if ts is None or not candidates:
        raise WebhookSignatureError("the signature header needs t=<time> and v1=<hmac>")
    current = int(time.time()) if now is None else now
    if abs(current - ts) > tolerance:
        raise WebhookSignatureError(
            f"the signature's timestamp is {current - ts} s away from now (limit {tolerance} s)"
        )
    expected = _mac(secret, ts, body)
    if not any(hmac.compare_digest(expected, c) for c in candidates):
        raise WebhookSignatureError("the signature does not match the body")
    try:
        event = json.loads(body)
    except ValueError as e:
        raise WebhookSignatureError("the body is not JSON") from e
    if not isinstance(event, dict) or not isinstance(event.get("id"), str):
        raise WebhookSignatureError("the body is not an event")
    return event
