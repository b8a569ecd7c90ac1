"""The payment gate: ASGI middleware that answers 402 until a request is paid for."""

from svcpay.gate.asgi import PaymentGate, payment_gate
from svcpay.gate.pricing import OneTime, Subscription, build_payment_required
from svcpay.gate.wsgi import PaymentGateWSGI, payment_gate_wsgi

__all__ = ["OneTime", "PaymentGate", "Subscription", "build_payment_required", "payment_gate"]
__all__ += ["PaymentGateWSGI", "payment_gate_wsgi"]
