"""Memos that bind a payment to a request: issued by the gate, checked without storage.

memo = base64url(nonce[12] || expires_at[8] || HMAC-SHA256(secret, nonce || expires_at ||
resource || amount || payTo || token)[:16]). Unguessable without the secret, bound to the
resource and the price, and expiring; the gate accepts a proof only for a memo it issued.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import struct
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class MemoTerms:
    resource: str  # e.g. "GET /v1/data"
    amount: str
    pay_to: str
    token: str


class Memos:
    def __init__(self, secret: bytes, ttl_secs: int = 300) -> None:
        if len(secret) < 16:
            raise ValueError("the memo secret must be at least 16 bytes")
        self._secret = secret
        self.ttl_secs = ttl_secs

    def derive(self, purpose: bytes) -> bytes:
        """A key for another use (MPP's challenge ids), from this secret: processes that
        share the memo secret share it too."""
        return hmac.new(self._secret, purpose, hashlib.sha256).digest()

    def _mac(self, nonce: bytes, expires_at: int, terms: MemoTerms) -> bytes:
        msg = b"\0".join(
            [
                nonce,
                struct.pack(">Q", expires_at),
                *(s.encode() for s in (terms.resource, terms.amount, terms.pay_to, terms.token)),
            ]
        )
        return hmac.digest(self._secret, msg, hashlib.sha256)[:16]  # one-shot: the C fast path

    def issue(self, terms: MemoTerms, now: int | None = None) -> str:
        expires_at = (int(time.time()) if now is None else now) + self.ttl_secs
        nonce = os.urandom(12)
        raw = nonce + struct.pack(">Q", expires_at) + self._mac(nonce, expires_at, terms)
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    def check(self, memo: str, terms: MemoTerms, now: int | None = None) -> str | None:
        """None if this gate issued `memo` for `terms` and it has not expired; else why not."""
        try:
            raw = base64.urlsafe_b64decode(memo + "=" * (-len(memo) % 4))
        except (binascii.Error, ValueError):
            return "the memo is not one this server issues"
        if len(raw) != 36:
            return "the memo is not one this server issues"
        nonce, (expires_at,), mac = raw[:12], struct.unpack(">Q", raw[12:20]), raw[20:]
        if not hmac.compare_digest(mac, self._mac(nonce, expires_at, terms)):
            return "the memo was not issued for this resource and price"
        if (int(time.time()) if now is None else now) > expires_at:
            return "the memo has expired; request fresh terms"
        return None
