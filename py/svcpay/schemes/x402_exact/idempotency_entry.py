"""One payment id as every store of `svcpay.schemes.x402_exact.idempotency` holds it (in
memory, SQLite, PostgreSQL): the entry, what it answers a resend, how its response's headers
are stored, and the default lifetimes. Below both `idempotency` and `idempotency_postgres`,
so neither imports the other back."""

from __future__ import annotations

import json
from dataclasses import dataclass

from svcpay.schemes.decision import RawHeaders, Reply

TTL = 3600.0
PENDING_TTL = 300.0
MAX_BODY = 1 << 20


@dataclass(slots=True)
class Entry:
    """One id as a store holds it; `reply` is None while its first request is served."""

    fingerprint: bytes
    expires: float
    pending_until: float
    reply: Reply | None = None

    def live(self, now: float) -> bool:
        return self.expires >= now and (self.reply is not None or self.pending_until >= now)


def answer(entry: Entry, fingerprint: bytes) -> Reply:
    """What a live entry answers a request that carries its id."""
    if entry.fingerprint != fingerprint:
        return _conflict("this payment id was used with another payment", retry=False)
    if entry.reply is None:
        return _conflict("the request with this payment id is still being served", retry=True)
    return entry.reply


def _conflict(message: str, retry: bool) -> Reply:
    headers: RawHeaders = [(b"retry-after", b"1")] if retry else []
    return Reply.json(409, {"error": "PaymentIdConflict", "message": message}, headers)


def encode_headers(headers: RawHeaders) -> str:
    return json.dumps([[k.decode("latin-1"), v.decode("latin-1")] for k, v in headers])


def decode_headers(text: str) -> RawHeaders:
    return [(k.encode("latin-1"), v.encode("latin-1")) for k, v in json.loads(text)]
