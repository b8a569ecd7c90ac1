"""The payment gate: ASGI middleware (and a WSGI adapter) that answers 402 until a request is
paid for. Names load on first use, so importing one does not pull in the shells (pricing
lives in `svcpay.protocol.pricing`, below the gate and the schemes).

Layer 3 (docs/adr/0041): it imports `svcpay.schemes` (the registered schemes),
`svcpay.program`, `svcpay.protocol` and the root modules, never the facilitator, the paying
client or the drop-in validator (its own layer); `svcpay.examples`, `svcpay.mcp` and the
providers' own apps import it.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from svcpay.gate.asgi import PaymentGate, payment_gate
    from svcpay.gate.paywall import Paywall
    from svcpay.gate.wsgi import PaymentGateWSGI, payment_gate_wsgi
    from svcpay.protocol.pricing import OneTime, Session, Subscription, build_payment_required
    from svcpay.schemes.x402_exact.server import X402Options

_WHERE = {
    "PaymentGate": "svcpay.gate.asgi",
    "payment_gate": "svcpay.gate.asgi",
    "Paywall": "svcpay.gate.paywall",
    "OneTime": "svcpay.protocol.pricing",
    "Subscription": "svcpay.protocol.pricing",
    "Session": "svcpay.protocol.pricing",
    "build_payment_required": "svcpay.protocol.pricing",
    "PaymentGateWSGI": "svcpay.gate.wsgi",
    "payment_gate_wsgi": "svcpay.gate.wsgi",
    "X402Options": "svcpay.schemes.x402_exact.server",
}
__all__ = [
    "OneTime",
    "PaymentGate",
    "Paywall",
    "Session",
    "Subscription",
    "build_payment_required",
    "payment_gate",
]
__all__ += ["PaymentGateWSGI", "X402Options", "payment_gate_wsgi"]


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'svcpay.gate' has no attribute {name!r}")
