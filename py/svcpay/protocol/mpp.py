"""MPP, the `Payment` HTTP authentication scheme (draft-ryan-httpauth-payment): challenges,
credentials and receipts on the wire. Pure: no I/O. docs/adr/0025.

- A challenge is one `WWW-Authenticate: Payment id=..., realm=..., method=..., intent=...,
  request=..., expires=...` per offered (method, intent). `request` is the method's JSON in
  JCS (RFC 8785), base64url without padding. `id` binds the challenge statelessly: the
  base64url HMAC-SHA256, under the server's secret, of the seven slots `realm | method |
  intent | request | expires | digest | opaque` (absent ones empty).
- A credential is `Authorization: Payment <base64url(JSON)>` with `{challenge: {...the echoed
  params}, source?, payload}`.
- A receipt is `Payment-Receipt: <base64url(JSON)>`.
- A failure is an RFC 9457 problem whose `type` is one of `PROBLEMS`.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import rfc8785

SCHEME = "Payment"
MAX_CHALLENGE_BYTES = 8 * 1024  # the draft's bound on one WWW-Authenticate value
MAX_CREDENTIAL_BYTES = 16 * 1024  # what this side reads of one Authorization value
PROBLEM_BASE = "https://paymentauth.org/problems/"
PROBLEMS = (
    "payment-required",
    "payment-insufficient",
    "payment-expired",
    "verification-failed",
    "malformed-credential",
    "invalid-challenge",
    "method-unsupported",
)


class MppError(ValueError):
    """A credential, challenge or receipt that cannot be read; `problem` names its type."""

    def __init__(self, message: str, problem: str = "malformed-credential") -> None:
        super().__init__(message)
        self.problem = problem


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def unb64url(text: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError) as e:
        raise MppError(f"not base64url: {e}") from e


def encode_json(value: Any) -> str:
    """JCS, then base64url without padding (the `request` param, credentials, receipts).
    JSON of ASCII strings, integers, booleans, null, lists and objects is JCS already when
    its keys are sorted and nothing is spaced (json.dumps, in C); anything else (floats,
    non-ASCII text) goes through rfc8785, which is pure Python."""
    if _plain(value):
        return b64url(json.dumps(value, sort_keys=True, separators=(",", ":")).encode())
    return b64url(rfc8785.dumps(value))


def _ascii(text: str) -> bool:
    """ASCII that json.dumps writes as JCS does (it escapes DEL, which JCS leaves raw)."""
    return text.isascii() and "\x7f" not in text


def _plain(value: Any, depth: int = 0) -> bool:
    if isinstance(value, str):
        return _ascii(value)
    if value is None or isinstance(value, bool):
        return True
    if isinstance(value, int):
        return abs(value) < 2**53  # JCS refuses larger integers (they are not I-JSON)
    if depth > 16:
        return False
    if isinstance(value, dict):
        return all(
            isinstance(k, str) and _ascii(k) and _plain(v, depth + 1) for k, v in value.items()
        )
    if isinstance(value, list):
        return all(_plain(v, depth + 1) for v in value)
    return False


def encode_plain(value: dict[str, str | int]) -> str:
    """`encode_json` for a flat object of ASCII strings and integers, where JCS is sorted
    keys and no spaces (receipts on the hot path: rfc8785 is pure Python)."""
    return b64url(json.dumps(value, sort_keys=True, separators=(",", ":")).encode())


def decode_json(text: str) -> Any:
    try:
        return json.loads(unb64url(text.strip()))
    except ValueError as e:
        if isinstance(e, MppError):
            raise
        raise MppError(f"not base64url JSON: {e}") from e


def rfc3339(unix: int) -> str:
    return datetime.fromtimestamp(unix, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_rfc3339(text: str) -> int | None:
    """Unix seconds of an RFC 3339 timestamp, None when it is not one."""
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        return None
    return int(moment.timestamp())


@dataclass(frozen=True)
class Challenge:
    id: str
    realm: str
    method: str
    intent: str
    request: str  # base64url(JCS(request JSON))
    expires: str = ""
    digest: str = ""
    description: str = ""
    opaque: str | None = None

    @property
    def request_json(self) -> Any:
        return decode_json(self.request)

    def header(self) -> str:
        """The `WWW-Authenticate` value."""
        params = [
            ("id", self.id),
            ("realm", self.realm),
            ("method", self.method),
            ("intent", self.intent),
            ("request", self.request),
        ]
        params += [
            (k, v)
            for k, v in (
                ("description", self.description),
                ("digest", self.digest),
                ("expires", self.expires),
            )
            if v
        ]
        if self.opaque is not None:
            params.append(("opaque", self.opaque))
        return SCHEME + " " + ", ".join(f'{k}="{_quote(v)}"' for k, v in params)

    def echo(self) -> dict[str, str]:
        """The challenge as a credential echoes it."""
        out = {
            "id": self.id,
            "realm": self.realm,
            "method": self.method,
            "intent": self.intent,
            "request": self.request,
        }
        for key in ("expires", "digest"):
            if value := getattr(self, key):
                out[key] = value
        if self.opaque is not None:
            out["opaque"] = self.opaque
        return out


def challenge_id(
    secret: bytes,
    realm: str,
    method: str,
    intent: str,
    request: str,
    expires: str = "",
    digest: str = "",
    opaque: str | None = None,
) -> str:
    slots = "|".join((realm, method, intent, request, expires, digest, opaque or ""))
    return b64url(hmac.new(secret, slots.encode(), hashlib.sha256).digest())


@dataclass(frozen=True)
class ChallengeIssuer:
    """Issues challenges under one secret and realm, and recognises them when echoed."""

    secret: bytes
    realm: str

    def issue(
        self,
        method: str,
        intent: str,
        request: Any,
        *,
        expires: int | None = None,
        description: str = "",
    ) -> Challenge:
        return self.issue_encoded(
            method, intent, encode_json(request), expires=expires, description=description
        )

    def issue_encoded(
        self,
        method: str,
        intent: str,
        encoded: str,
        *,
        expires: int | None = None,
        description: str = "",
    ) -> Challenge:
        """`issue` for a `request` already encoded (`encode_json`)."""
        stamp = rfc3339(expires) if expires is not None else ""
        cid = challenge_id(self.secret, self.realm, method, intent, encoded, stamp)
        return Challenge(cid, self.realm, method, intent, encoded, stamp, "", description)

    def recognises(self, echo: Challenge) -> bool:
        """Whether `echo` (from a credential) is a challenge this issuer made, unaltered."""
        expected = challenge_id(
            self.secret,
            echo.realm,
            echo.method,
            echo.intent,
            echo.request,
            echo.expires,
            echo.digest,
            echo.opaque,
        )
        return echo.realm == self.realm and hmac.compare_digest(expected, echo.id)


@dataclass(frozen=True)
class Credential:
    challenge: Challenge
    payload: dict[str, Any]
    source: str | None = None

    def header(self) -> str:
        """The `Authorization` value."""
        data: dict[str, Any] = {"challenge": self.challenge.echo(), "payload": self.payload}
        if self.source:
            data["source"] = self.source
        return f"{SCHEME} {encode_json(data)}"


def is_payment_authorization(value: bytes) -> bool:
    head = value.lstrip()[: len(SCHEME) + 1]
    return head[: len(SCHEME)].lower() == SCHEME.lower().encode() and (
        len(head) == len(SCHEME) or head[len(SCHEME) : len(SCHEME) + 1] in (b" ", b"\t")
    )


def parse_credential(value: str) -> Credential:
    """An `Authorization: Payment ...` value; MppError(malformed-credential) otherwise."""
    value = value.strip()
    if not value[: len(SCHEME)].lower() == SCHEME.lower():
        raise MppError("the Authorization scheme is not Payment")
    token = value[len(SCHEME) :].strip()
    if not token:
        raise MppError("the Payment credential is empty")
    if len(token) > MAX_CREDENTIAL_BYTES:
        raise MppError(f"the Payment credential exceeds {MAX_CREDENTIAL_BYTES} bytes")
    data = decode_json(token)
    if not isinstance(data, dict):
        raise MppError("the credential is not a JSON object")
    echo, payload, source = data.get("challenge"), data.get("payload"), data.get("source")
    if not isinstance(echo, dict):
        raise MppError("the credential carries no challenge object")
    if not isinstance(payload, dict):
        raise MppError("the credential carries no payload object")
    if source is not None and not isinstance(source, str):
        raise MppError("source must be a string")
    text: dict[str, str] = {}
    for key in ("id", "realm", "method", "intent", "request", "expires", "digest"):
        item = echo.get(key, "")
        if not isinstance(item, str):
            raise MppError(f"challenge.{key} must be a string")
        text[key] = item
    opaque = echo.get("opaque")
    if opaque is not None and not isinstance(opaque, str):
        raise MppError("challenge.opaque must be a string")
    for key in ("id", "method", "intent", "request"):
        if not text[key]:
            raise MppError(f"challenge.{key} is missing")
    return Credential(
        Challenge(
            text["id"],
            text["realm"],
            text["method"],
            text["intent"],
            text["request"],
            text["expires"],
            text["digest"],
            "",
            opaque,
        ),
        payload,
        source,
    )


def parse_challenges(values: Iterable[str]) -> list[Challenge]:
    """Every well-formed `Payment` challenge in `WWW-Authenticate` values (other schemes and
    malformed challenges are skipped)."""
    found = []
    for value in values:
        for scheme, params in _auth_challenges(value):
            if scheme.lower() != SCHEME.lower():
                continue
            get = params.get
            cid, method, intent, request = get("id"), get("method"), get("intent"), get("request")
            if not (cid and method and intent and request and "realm" in params):
                continue
            extra = (get("expires", ""), get("digest", ""), get("description", ""))
            found.append(
                Challenge(cid, params["realm"], method, intent, request, *extra, get("opaque"))
            )
    return found


@dataclass(frozen=True)
class Receipt:
    method: str
    reference: str
    timestamp: int
    challenge_id: str = ""
    intent: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    status: str = "success"

    def header(self) -> str:
        data: dict[str, Any] = {
            "status": self.status,
            "method": self.method,
            "timestamp": rfc3339(self.timestamp),
            "reference": self.reference,
            **({"challengeId": self.challenge_id} if self.challenge_id else {}),
            **({"intent": self.intent} if self.intent else {}),
            **self.extra,
        }
        flat = all(
            isinstance(v, str | int) and (not isinstance(v, str) or v.isascii())
            for v in data.values()
        )
        return encode_plain(data) if flat else encode_json(data)

    @classmethod
    def parse(cls, value: str) -> Receipt:
        data = decode_json(value)
        if not isinstance(data, dict):
            raise MppError("the receipt is not a JSON object")
        for key in ("status", "method", "reference", "timestamp"):
            if not isinstance(data.get(key), str) or not data[key]:
                raise MppError(f"the receipt's {key} is missing")
        moment = parse_rfc3339(data["timestamp"])
        if moment is None:
            raise MppError("the receipt's timestamp is not RFC 3339")
        known = {"status", "method", "reference", "timestamp", "challengeId", "intent"}
        return cls(
            data["method"],
            data["reference"],
            moment,
            str(data.get("challengeId", "")),
            str(data.get("intent", "")),
            {k: v for k, v in data.items() if k not in known},
            data["status"],
        )


def problem(kind: str, detail: str, **extra: Any) -> dict[str, Any]:
    """An RFC 9457 problem of one of the draft's types."""
    assert kind in PROBLEMS, kind
    title = kind.replace("-", " ").capitalize()
    status = 400 if kind == "method-unsupported" else 402
    return {
        "type": PROBLEM_BASE + kind,
        "title": title,
        "status": status,
        "detail": detail,
        **extra,
    }


def _quote(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


def _auth_challenges(value: str) -> list[tuple[str, dict[str, str]]]:
    """RFC 9110's `challenge *( "," challenge )`: each scheme with its auth-params (token68
    forms are kept under the empty name)."""
    out: list[tuple[str, dict[str, str]]] = []
    i, n = 0, len(value)

    def skip_ws(j: int) -> int:  # CR and LF too: a folded value, as the draft prints them
        while j < n and value[j] in " \t\r\n":
            j += 1
        return j

    def token(j: int) -> tuple[str, int]:
        start = j
        while j < n and value[j] not in ' \t\r\n,="':
            j += 1
        return value[start:j], j

    while i < n:
        i = skip_ws(i)
        while i < n and value[i] == ",":
            i = skip_ws(i + 1)
        if i >= n:
            break
        name, i = token(i)
        if not name:
            return out  # not a header we can read further
        params: dict[str, str] = {}
        out.append((name, params))
        i = skip_ws(i)
        while i < n:
            key, j = token(i)
            j = skip_ws(j)
            if not key or j >= n or value[j] != "=":
                break  # the next challenge's scheme (or the end)
            j = skip_ws(j + 1)
            if j < n and value[j] == '"':
                j += 1
                chars = []
                while j < n and value[j] != '"':
                    if value[j] == "\\" and j + 1 < n:
                        j += 1
                    chars.append(value[j])
                    j += 1
                params[key.lower()] = "".join(chars)
                j += 1
            else:
                item, j = token(j)
                params[key.lower()] = item
            j = skip_ws(j)
            if j < n and value[j] == ",":
                j = skip_ws(j + 1)
            i = j
    return out
