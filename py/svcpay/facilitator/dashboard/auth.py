"""Dashboard sessions: a signed cookie, and the CSRF token every form carries.

The cookie holds `{"p": provider id or null, "k": API key id, "e": expiry, "c": CSRF
token}` as base64url JSON with an HMAC-SHA256 of it. A visitor gets one without a provider
on the login page (so the login form has a token too); logging in replaces it with one that
names the provider and the key it was opened with, and a fresh token. The session ends at
its expiry, at logout, or when that key is revoked.

The signing secret is SVCPAY_DASHBOARD_SECRET when set, else derived from the facilitator's
keypair (HMAC with a fixed label): every instance of one facilitator shares it, restarts keep
sessions, and a database dump alone cannot forge one.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import secrets
import time
from dataclasses import dataclass
from typing import Any

from solders.keypair import Keypair
from starlette.requests import Request
from starlette.responses import Response

COOKIE = "svcpay_dashboard"
COOKIE_PATH = "/dashboard"
SESSION_SECS = 12 * 3600  # a provider's session
VISITOR_SECS = 3600  # the login page's, until the form is sent
SECRET_ENV = "SVCPAY_DASHBOARD_SECRET"
_LABEL = b"svcpay dashboard session cookie v1"
_MAX_COOKIE = 1024


def signing_secret(keypair: Keypair, configured: str | None) -> bytes:
    """The cookie key: the configured secret, else one derived from the keypair."""
    if configured:
        return hashlib.sha256(_LABEL + b"\0" + configured.encode()).digest()
    return hmac.new(bytes(keypair), _LABEL, hashlib.sha256).digest()


@dataclass(frozen=True)
class Session:
    provider_id: str | None
    key_id: str | None
    expires: int
    csrf: str

    @classmethod
    def visitor(cls) -> Session:
        return cls(None, None, int(time.time()) + VISITOR_SECS, secrets.token_urlsafe(24))

    @classmethod
    def provider(cls, provider_id: str, key_id: str) -> Session:
        return cls(provider_id, key_id, int(time.time()) + SESSION_SECS, secrets.token_urlsafe(24))

    def csrf_ok(self, sent: str | None) -> bool:
        return sent is not None and hmac.compare_digest(sent.encode(), self.csrf.encode())


class Cookies:
    def __init__(self, secret: bytes) -> None:
        self._secret = secret

    def _mac(self, payload: bytes) -> str:
        return _b64(hmac.new(self._secret, payload, hashlib.sha256).digest())

    def dump(self, session: Session) -> str:
        body = {"p": session.provider_id, "k": session.key_id, "e": session.expires}
        payload = _b64(json.dumps({**body, "c": session.csrf}, separators=(",", ":")).encode())
        return f"{payload}.{self._mac(payload.encode())}"

    def load(self, request: Request) -> Session | None:
        """The request's session, if its cookie is ours, intact and unexpired."""
        raw = request.cookies.get(COOKIE, "")
        if not raw or len(raw) > _MAX_COOKIE or not raw.isascii():
            return None
        payload, _, mac = raw.partition(".")
        if not hmac.compare_digest(mac.encode(), self._mac(payload.encode()).encode()):
            return None
        try:
            data: Any = json.loads(_unb64(payload))
            session = Session(data["p"], data["k"], int(data["e"]), str(data["c"]))
        except (ValueError, KeyError, TypeError, binascii.Error):
            return None
        return session if session.expires > time.time() else None

    def set(self, response: Response, request: Request, session: Session) -> None:
        response.set_cookie(
            COOKIE,
            self.dump(session),
            max_age=max(session.expires - int(time.time()), 0),
            path=_path(request),
            secure=request.url.scheme == "https",
            httponly=True,
            samesite="strict",
        )

    @staticmethod
    def clear(response: Response, request: Request) -> None:
        response.delete_cookie(
            COOKIE,
            path=_path(request),
            secure=request.url.scheme == "https",
            httponly=True,
            samesite="strict",
        )


def _path(request: Request) -> str:
    """Where the dashboard is mounted (the cookie goes nowhere else)."""
    return str(request.scope.get("root_path") or COOKIE_PATH)


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
