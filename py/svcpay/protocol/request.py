"""What a payment gate sees of an HTTP request, below every scheme and shell: the pricing
terms (`protocol/pricing.py`: a session's `units(request)`) and the schemes' decisions
(`svcpay.schemes.decision`, which re-exports it) name it. No ASGI, no WSGI."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(slots=True)
class Request:
    """What the core sees of a request. `headers`: lower-case names, raw values."""

    method: str
    path: str
    headers: Mapping[bytes, bytes]
    scheme: str = "http"

    @property
    def resource(self) -> str:
        """What memos and proofs are bound to: "GET /v1/data"."""
        return f"{self.method} {self.path}"

    @property
    def url(self) -> str:
        host = self.headers.get(b"host", b"localhost").decode("latin-1")
        return f"{self.scheme}://{host}{self.path}"
