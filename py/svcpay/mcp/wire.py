"""Payments in MCP messages, both ways, for the server (`svcpay.mcp.server`) and the client
(`svcpay.mcp.client`): a tool call's `_meta` to the HTTP headers the gate's schemes read, the
gate's answers (a 402 `Reply`, the headers an `Admit` adds) to MCP results and errors, and
back. No MCP SDK here: messages are plain dicts (docs/adr/0039).

The `_meta` keys:
- x402's MCP transport: `x402/payment` (the PaymentPayload object; `PAYMENT-SIGNATURE`, or
  `X-PAYMENT` for version 1) and `x402/payment-response` (the SettleResponse).
- MPP's (draft-payment-transport-mcp-00): `org.paymentauth/credential` (the credential, its
  challenge's `request` a JSON object), `org.paymentauth/receipt`, and
  `org.paymentauth/payment-required` (challenges in a tool result, as mppx reads them).
- svcpay's own: `svcpay/payment` (a proof, `X-PAYMENT`'s value), `svcpay/subscription`
  (`X-Svc-Sub`), `svcpay/payment-required` (the 402 body), `svcpay/settlement` ("pending"
  when a settlement got no answer) and `svcpay/problem` (a refusal that is not a 402).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable, Mapping
from typing import Any

import httpx

from svcpay.protocol import mpp

X402_PAYMENT = "x402/payment"
X402_PAYMENT_RESPONSE = "x402/payment-response"
MPP_CREDENTIAL = "org.paymentauth/credential"
MPP_RECEIPT = "org.paymentauth/receipt"
MPP_PAYMENT_REQUIRED = "org.paymentauth/payment-required"
SVCPAY_PAYMENT = "svcpay/payment"
SVCPAY_SUBSCRIPTION = "svcpay/subscription"
SVCPAY_PAYMENT_REQUIRED = "svcpay/payment-required"
SVCPAY_SETTLEMENT = "svcpay/settlement"
SVCPAY_PROBLEM = "svcpay/problem"

PAYMENT_REQUIRED_CODE = -32042  # MPP: payment required
VERIFICATION_FAILED_CODE = -32043  # MPP: a credential was refused; fresh challenges
INVALID_PARAMS_CODE = -32602  # a malformed credential

Json = dict[str, Any]


class MetaError(ValueError):
    """A payment in `_meta` that is not of the shape its key asks for."""


# -- the server's side: `_meta` in, MCP answers out --------------------------------------------


def request_headers(meta: object) -> dict[bytes, bytes]:
    """The gate's request headers (lower-case names) for the payments in a call's `_meta`."""
    if not isinstance(meta, Mapping):
        return {}
    headers: dict[bytes, bytes] = {}
    x402 = meta.get(X402_PAYMENT)
    if x402 is not None:
        if isinstance(x402, str):  # a JSON string, as x402's helpers also accept
            try:
                x402 = json.loads(x402)
            except ValueError:
                raise MetaError(f"{X402_PAYMENT} is not a JSON object") from None
        if not isinstance(x402, dict):
            raise MetaError(f"{X402_PAYMENT} is not a PaymentPayload object")
        name = b"x-payment" if x402.get("x402Version") == 1 else b"payment-signature"
        headers[name] = _b64_json(_without_nulls(x402))
    credential = meta.get(MPP_CREDENTIAL)
    if credential is not None:
        headers[b"authorization"] = mpp_authorization(credential).encode()
    proof = meta.get(SVCPAY_PAYMENT)
    if proof is not None:
        if not isinstance(proof, str):
            raise MetaError(f"{SVCPAY_PAYMENT} is not a proof (base64 text)")
        headers.setdefault(b"x-payment", proof.encode())
    sub = meta.get(SVCPAY_SUBSCRIPTION)
    if sub is not None:
        if not isinstance(sub, str):
            raise MetaError(f"{SVCPAY_SUBSCRIPTION} is not a subscription address")
        headers[b"x-svc-sub"] = sub.encode()
    return headers


def mpp_authorization(credential: object) -> str:
    """`Authorization: Payment ...` for an MCP credential (its challenge's `request` an
    object, or already base64url as HTTP carries it)."""
    if isinstance(credential, str):
        return credential if mpp.is_payment_authorization(credential.encode()) else ""
    if not isinstance(credential, dict) or not isinstance(credential.get("challenge"), dict):
        raise MetaError(f"{MPP_CREDENTIAL} is not a credential object with a challenge")
    challenge = dict(credential["challenge"])
    request = challenge.get("request")
    if isinstance(request, dict):
        challenge["request"] = mpp.encode_json(request)
    data: Json = {"challenge": challenge, "payload": credential.get("payload")}
    if credential.get("source"):
        data["source"] = credential["source"]
    # Only the challenge's request must be JCS (the challenge id was made over it); the
    # credential around it is any JSON, and json.dumps (C) is a tenth of the cost.
    return f"{mpp.SCHEME} {mpp.b64url(json.dumps(data, separators=(',', ':')).encode())}"


class Refusal:
    """A gate's answer that does not run the tool, read for MCP: x402's PaymentRequired,
    MPP's challenges and problem, svcpay's 402 body, or a problem of another status."""

    def __init__(self, status: int, headers: Iterable[tuple[bytes, bytes]], body: bytes) -> None:
        self.status = status
        self.x402: Json | None = None
        self.challenges: list[Json] = []
        values: list[str] = []
        retry_after: str | None = None
        for name, value in headers:
            lower = name.lower()
            if lower == b"payment-required":
                try:
                    self.x402 = _json_of(base64.b64decode(value, validate=True))
                except (binascii.Error, ValueError):
                    self.x402 = None
            elif lower == b"www-authenticate":
                values.append(value.decode("latin-1"))
            elif lower == b"retry-after":
                retry_after = value.decode("latin-1")
        self.challenges = [mcp_challenge(c) for c in mpp.parse_challenges(values)]
        try:
            data = _json_of(body)
        except ValueError:
            data = None
        self.svcpay = data if data is not None and "accepts" in data else None
        self.problem = data if data is not None and "type" in data and "status" in data else None
        if self.x402 is None and data is not None and data.get("x402Version") == 1:
            self.x402 = data
        message = ""
        if data is not None:
            message = str(data.get("message") or data.get("detail") or data.get("error") or "")
        if not message and self.x402 is not None:
            message = str(self.x402.get("error") or "")
        self.message = message or f"the gate answered {status}"
        self.error = str(data.get("error", "")) if data is not None else ""
        self.retry_after = retry_after

    @property
    def payment_required(self) -> bool:
        return self.status == 402

    def mpp_data(self) -> Json:
        """`error.data` of MPP's -32042/-32043 (svcpay's body and x402's terms ride along)."""
        data: Json = {"httpStatus": self.status, "challenges": self.challenges}
        if self.problem is not None:
            data["problem"] = self.problem
        if self.svcpay is not None:
            data["svcpay"] = self.svcpay
        if self.x402 is not None:
            data["x402"] = self.x402
        return data

    def tool_result(self) -> Json:
        """A tool result with `isError: true`: x402's PaymentRequired as its structured
        content (what x402's MCP clients read), MPP's challenges and svcpay's body in
        `_meta`; a refusal that is not a 402 is a problem (status, error, message)."""
        meta: Json = {}
        if not self.payment_required:
            problem: Json = {"status": self.status, "error": self.error, "message": self.message}
            if self.retry_after is not None:
                problem["retryAfter"] = self.retry_after
            return _error_result(problem, {SVCPAY_PROBLEM: problem})
        if self.challenges:
            meta[MPP_PAYMENT_REQUIRED] = {
                "httpStatus": 402,
                "challenges": self.challenges,
                **({"problem": self.problem} if self.problem is not None else {}),
            }
        if self.svcpay is not None:
            meta[SVCPAY_PAYMENT_REQUIRED] = self.svcpay
        structured = self.x402 or self.svcpay or self.problem or {"message": self.message}
        return _error_result(structured, meta)


def mcp_challenge(challenge: mpp.Challenge) -> Json:
    """A challenge as MPP's MCP transport carries it: `request` a JSON object."""
    out: Json = {
        "id": challenge.id,
        "realm": challenge.realm,
        "method": challenge.method,
        "intent": challenge.intent,
        "request": challenge.request_json,
    }
    for key in ("expires", "digest", "description"):
        if value := getattr(challenge, key):
            out[key] = value
    if challenge.opaque is not None:
        out["opaque"] = challenge.opaque
    return out


def result_meta(headers: Iterable[tuple[bytes, bytes]]) -> Json:
    """The `_meta` entries of a paid answer, from the headers the admission added."""
    meta: Json = {}
    for name, value in headers:
        lower, text = name.lower(), value.decode("latin-1")
        if lower in (b"payment-response", b"x-payment-response"):
            try:
                meta[X402_PAYMENT_RESPONSE] = _json_of(base64.b64decode(text, validate=True))
            except (binascii.Error, ValueError):
                continue
        elif lower == b"payment-receipt":
            try:
                receipt = mpp.decode_json(text)
            except ValueError:
                continue
            if isinstance(receipt, dict):
                meta[MPP_RECEIPT] = receipt
        elif lower == b"x-svc-settlement":
            meta[SVCPAY_SETTLEMENT] = text
    return meta


def _error_result(structured: Json, meta: Json) -> Json:
    result: Json = {
        "content": [{"type": "text", "text": json.dumps(structured)}],
        "structuredContent": structured,
        "isError": True,
    }
    if meta:
        result["_meta"] = meta
    return result


# -- the client's side: MCP answers in, HTTP for PaymentAuth out --------------------------------


def payment_meta(request: httpx.Request) -> Json:
    """The `_meta` entries carrying what `PaymentAuth` put in `request`'s headers."""
    meta: Json = {}
    headers = request.headers
    if value := headers.get("payment-signature"):
        meta[X402_PAYMENT] = _json_of(base64.b64decode(value))
    if value := headers.get("x-payment"):
        try:
            decoded = _json_of(base64.b64decode(value, validate=True))
        except (binascii.Error, ValueError):
            decoded = None
        if decoded is not None and "x402Version" in decoded:
            meta[X402_PAYMENT] = decoded
        else:
            meta[SVCPAY_PAYMENT] = value
    if (value := headers.get("authorization")) and mpp.is_payment_authorization(value.encode()):
        credential = mpp.parse_credential(value)
        echo: Json = {**credential.challenge.echo(), "request": credential.challenge.request_json}
        meta[MPP_CREDENTIAL] = {
            "challenge": echo,
            "payload": credential.payload,
            **({"source": credential.source} if credential.source else {}),
        }
    if value := headers.get("x-svc-sub"):
        meta[SVCPAY_SUBSCRIPTION] = value
    return meta


def http_response(
    request: httpx.Request, result: Json | None, error: tuple[int, Json] | None = None
) -> httpx.Response:
    """The HTTP answer a tool result (or an MCP error: code, data) stands for, for
    `PaymentAuth`'s flow: a 402 with x402's, MPP's and svcpay's terms, a problem's status,
    or 200 (500 for a failed tool) with the payment's response headers."""
    headers: list[tuple[str, str]] = []
    body: Json = {}
    status = 200
    if error is not None:
        code, data = error
        if code in (PAYMENT_REQUIRED_CODE, VERIFICATION_FAILED_CODE):
            status = int(data.get("httpStatus", 402))
            _terms(headers, data.get("challenges"), data.get("x402"))
            body = data.get("svcpay") or data.get("problem") or {}
            if body is data.get("problem"):
                headers.append(("content-type", "application/problem+json"))
        else:
            status = 400
        return _response(request, status, headers, body)
    assert result is not None
    meta = result.get("_meta") or {}
    structured = result.get("structuredContent")
    if not isinstance(structured, dict):
        structured = _text_json(result)
    if result.get("isError"):
        status = 500
        x402 = structured if structured is not None and "x402Version" in structured else None
        required = meta.get(MPP_PAYMENT_REQUIRED)
        svcpay = meta.get(SVCPAY_PAYMENT_REQUIRED)
        if x402 is not None or isinstance(required, dict) or isinstance(svcpay, dict):
            status = 402
            challenges = required.get("challenges") if isinstance(required, dict) else None
            _terms(headers, challenges, x402)
            if isinstance(svcpay, dict):
                body = svcpay
            elif isinstance(required, dict) and isinstance(required.get("problem"), dict):
                body = required["problem"]
                headers.append(("content-type", "application/problem+json"))
        elif isinstance(problem := meta.get(SVCPAY_PROBLEM), dict):
            status = int(problem.get("status", 500))
            body = problem
        return _response(request, status, headers, body)
    if isinstance(response := meta.get(X402_PAYMENT_RESPONSE), dict):
        headers.append(("payment-response", _b64_json(response).decode()))
    if isinstance(receipt := meta.get(MPP_RECEIPT), dict):
        headers.append(("payment-receipt", mpp.encode_json(receipt)))
    if isinstance(settlement := meta.get(SVCPAY_SETTLEMENT), str):
        headers.append(("x-svc-settlement", settlement))
    return _response(request, status, headers, {})


def _terms(headers: list[tuple[str, str]], challenges: object, x402: object) -> None:
    if isinstance(x402, dict):
        if x402.get("x402Version") == 1:
            return  # version 1 travels in the body; svcpay's body wins when both are there
        headers.append(("payment-required", _b64_json(x402).decode()))
    if isinstance(challenges, list):
        for item in challenges:
            if isinstance(item, dict):
                headers.append(("www-authenticate", _challenge_header(item)))


def _challenge_header(item: Json) -> str:
    request = item.get("request")
    encoded = mpp.encode_json(request) if isinstance(request, dict) else str(request or "")
    return mpp.Challenge(
        str(item.get("id", "")),
        str(item.get("realm", "")),
        str(item.get("method", "")),
        str(item.get("intent", "")),
        encoded,
        str(item.get("expires", "")),
        str(item.get("digest", "")),
        str(item.get("description", "")),
        item.get("opaque") if isinstance(item.get("opaque"), str) else None,
    ).header()


def _response(
    request: httpx.Request, status: int, headers: list[tuple[str, str]], body: Json
) -> httpx.Response:
    if not any(name == "content-type" for name, _ in headers):
        headers.append(("content-type", "application/json"))
    return httpx.Response(status, headers=headers, content=json.dumps(body), request=request)


def _text_json(result: Json) -> Json | None:
    content = result.get("content")
    if isinstance(content, list) and content and isinstance(content[0], dict):
        text = content[0].get("text")
        if isinstance(text, str):
            try:
                return _json_of(text.encode())
            except ValueError:
                return None
    return None


def _json_of(data: bytes) -> Json | None:
    value = json.loads(data)
    return value if isinstance(value, dict) else None


def _b64_json(value: Json) -> bytes:
    return base64.b64encode(json.dumps(value, separators=(",", ":")).encode())


def _without_nulls(value: Any) -> Any:
    """`value` without null members: x402's Python MCP session dumps its payload with them
    (`model_dump(by_alias=True)`), where its HTTP encoder leaves them out."""
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value
