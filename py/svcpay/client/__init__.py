"""The paying client: `PaymentAuth` for httpx and `pay()`; `settlement(response)` reads an
x402 server's report of the payment it settled."""

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
