"""What a scheme's server side answers a request, shared by every scheme and the gate's core:
`Reply` (the gate sends this; the handler does not run) or `Admit` (the handler runs, and the
admission hears how it went). No ASGI, no WSGI: the shells in `svcpay.gate` translate.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from svcpay.protocol.pricing import PricingEntry
from svcpay.protocol.request import Request

__all__ = [
    "ADMIT",
    "Admit",
    "GateScheme",
    "Offer",
    "PaymentRequiredFn",
    "RawHeaders",
    "Reply",
    "Request",
]

RawHeaders = list[tuple[bytes, bytes]]


@dataclass(slots=True)
class Reply:
    """A whole response the gate sends itself."""

    status: int
    headers: RawHeaders
    body: bytes

    @classmethod
    def json(cls, status: int, body: dict[str, Any], headers: RawHeaders = ()) -> Reply:  # type: ignore[assignment]
        data = json.dumps(body).encode()
        return cls(
            status,
            [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(data)).encode()),
                *headers,
            ],
            data,
        )


class Admit:
    """The handler runs. A shell calls `start` (when `wants_start`) with the handler's
    status and headers before sending them: it answers headers to add, or a `Reply` that
    replaces the handler's response (whose body is then dropped). Once the handler is done
    the shell calls `end` with its status (None when it raised or sent nothing) and, when
    `capture` is set, its whole body."""

    wants_start: ClassVar[bool] = False
    capture: bool = False

    async def start(self, status: int, headers: RawHeaders) -> Reply | RawHeaders:
        return []

    async def end(self, status: int | None, body: bytes | None) -> None:
        return None


ADMIT = Admit()  # an admission with nothing to do afterwards


PaymentRequiredFn = Callable[
    ["Request", "list[PricingEntry]", "str | None", str, "str | None"], Reply
]
"""The core's 402 builder: (request, pricing, svcpay error, message, x402 error) -> Reply."""


@dataclass(slots=True)
class Offer:
    """A 402 being built, for each scheme to add its headers: the request, the route's
    pricing, the one-time options with the memos svcpay's body issued for them (every wire
    protocol binds its payment to the same memo), and why payment is asked."""

    request: Request
    pricing: list[PricingEntry]
    memos: list[tuple[Any, str]]  # (OneTime, memo)
    message: str
    reason: str | None = None  # x402's reason string, when a payment was refused


class GateScheme(Protocol):
    """One way to pay, plugged into the gate's core (`svcpay.gate.core.GateCore`): the core
    asks each registered scheme in turn whether it claims the request's credential, lets the
    one that does admit it, and lets every scheme add its headers to a 402. Adding a wire
    protocol is one module that implements this and one registration."""

    @property
    def name(self) -> str: ...

    @property
    def headers(self) -> tuple[bytes, ...]:
        """The request headers it reads (the core refuses oversized ones first)."""
        ...

    def claims(self, request: Request, pricing: list[PricingEntry]) -> bool: ...

    async def admit(
        self, request: Request, pricing: list[PricingEntry], payment_required: PaymentRequiredFn
    ) -> Reply | Admit: ...

    def offer(self, offer: Offer) -> RawHeaders: ...
