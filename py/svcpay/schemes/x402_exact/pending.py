"""A pending x402 settlement as every store of `svcpay.schemes.x402_exact.settling` holds it (in
memory, SQLite, PostgreSQL), and how long a reconciler leases one. Below both `settling` and
`pending_postgres`, so neither imports the other back."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

LEASE_SECS = 30.0  # a reconciler takes an entry for this long


@dataclass(frozen=True)
class PendingSettlement:
    """A payment whose settle got no answer after its handler ran."""

    key: str  # the replay claim (x402:<sha256 of the message>)
    version: int
    payload: dict[str, Any]
    requirements: dict[str, Any]
    resource: str
    created_at: float
    attempts: int = 0
    next_at: float = 0.0

    @property
    def amount(self) -> str:
        req = self.requirements
        return str(req.get("amount") or req.get("maxAmountRequired") or "")
