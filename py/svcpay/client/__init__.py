"""The paying client: `PaymentAuth` for httpx and `pay()`; `settlement(response)` reads an
x402 server's report of the payment it settled.

Layer 3 (docs/adr/0041): it imports `svcpay.schemes` (each scheme's client side),
`svcpay.program`, `svcpay.protocol`, `svcpay.rpc` and the root modules, never the gate, the
facilitator or the drop-in validator (its own layer); `svcpay.mcp`, `svcpay.demo` and
`svcpay.cli` import it.
"""

from svcpay.client.payer import PROTOCOLS, PaymentAuth, SpendingPolicy, pay
from svcpay.protocol.errors import (
    InsufficientFunds,
    InvalidPaymentProof,
    NoAcceptableOption,
    OriginNotAllowed,
    PaymentError,
    PaymentRefused,
    SpendingLimitExceeded,
)
from svcpay.schemes.svcpay_proof.client import build_payment
from svcpay.schemes.x402_exact.client import settlement

__all__ = [
    "PROTOCOLS",
    "InsufficientFunds",
    "InvalidPaymentProof",
    "NoAcceptableOption",
    "OriginNotAllowed",
    "PaymentAuth",
    "PaymentError",
    "PaymentRefused",
    "SpendingLimitExceeded",
    "SpendingPolicy",
    "build_payment",
    "pay",
    "settlement",
]
