"""The paying client: `PaymentAuth` for httpx and `pay()`."""

from svcpay.client.payer import (
    InsufficientFunds,
    InvalidPaymentProof,
    NoAcceptableOption,
    PaymentAuth,
    PaymentError,
    SpendingLimitExceeded,
    build_payment,
    pay,
)

__all__ = [
    "InsufficientFunds",
    "InvalidPaymentProof",
    "NoAcceptableOption",
    "PaymentAuth",
    "PaymentError",
    "SpendingLimitExceeded",
    "build_payment",
    "pay",
]
