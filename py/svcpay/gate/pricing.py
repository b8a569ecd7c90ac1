"""The pricing terms of a gated route (`OneTime`, `Subscription`, `Session`, `Terms`) live in
`svcpay.protocol.pricing`, below both the gate and the schemes; this name stays for
providers' imports."""

from svcpay.protocol.pricing import (
    OneTime,
    PricingEntry,
    Session,
    Subscription,
    Terms,
    build_payment_required,
)

__all__ = ["OneTime", "PricingEntry", "Session", "Subscription", "Terms", "build_payment_required"]
