"""x402's `payment-identifier` on the gate (specs/extensions/payment_identifier.md): the same id
with the same payload gets the response it got the first time, without paying again; the
same id with another payload gets 409.

In process and bounded: at most `max_entries` ids (the oldest go first) for `ttl` seconds
each, and responses up to `max_body` bytes (a larger one is served but not kept, so its
resend is treated as a new payment: the facilitator refuses the settled transaction).
Processes behind one load balancer each keep their own: a resend that reaches another
process is not recognised (it fails as a replayed transaction instead).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from svcpay.schemes.decision import RawHeaders, Reply


@dataclass(slots=True)
class _Entry:
    fingerprint: bytes
    expires: float
    reply: Reply | None = None  # None while the first request is being served


class PaymentIds:
    def __init__(
        self, max_entries: int = 10_000, ttl: float = 3600.0, max_body: int = 1 << 20
    ) -> None:
        self.max_entries, self.ttl, self.max_body = max_entries, ttl, max_body
        self._entries: OrderedDict[tuple[str, str], _Entry] = OrderedDict()

    @staticmethod
    def fingerprint(payload: dict[str, Any]) -> bytes:
        """The exact payload (canonical JSON): a lookup happens before verification, so
        only the very same signed payload may see the stored response."""
        canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).digest()

    def begin(self, scope: str, pid: str, fingerprint: bytes) -> Reply | None:
        """None: a new id, now held for this request (`finish` or `abandon` it). Else the
        answer: the stored response, or 409 (another payload; or the first request with
        this id is still being served)."""
        now = time.monotonic()
        key = (scope, pid)
        entry = self._entries.get(key)
        if entry is not None and entry.expires < now:
            del self._entries[key]
            entry = None
        if entry is None:
            self._entries[key] = _Entry(fingerprint, now + self.ttl)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)
            return None
        if entry.fingerprint != fingerprint:
            return _conflict("this payment id was used with another payment", retry=False)
        if entry.reply is None:
            return _conflict("the request with this payment id is still being served", True)
        return entry.reply

    def finish(self, scope: str, pid: str, status: int, headers: RawHeaders, body: bytes) -> None:
        """Stores the response sent for the paid request (as it was sent)."""
        entry = self._entries.get((scope, pid))
        if entry is None:
            return
        if len(body) > self.max_body:
            del self._entries[(scope, pid)]
            return
        entry.reply = Reply(status, list(headers), body)

    def abandon(self, scope: str, pid: str) -> None:
        """Forgets an id whose request was not paid for (it may be tried again)."""
        entry = self._entries.get((scope, pid))
        if entry is not None and entry.reply is None:
            del self._entries[(scope, pid)]


def _conflict(message: str, retry: bool) -> Reply:
    headers: RawHeaders = [(b"retry-after", b"1")] if retry else []
    return Reply.json(409, {"error": "PaymentIdConflict", "message": message}, headers)
