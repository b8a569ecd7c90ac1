"""What paying can fail with, for every scheme's client side and `PaymentAuth`
(`svcpay.client` re-exports them)."""

from __future__ import annotations


class PaymentError(Exception):
    """Paying failed; the subclass is the spec's error name where there is one."""


class InsufficientFunds(PaymentError):
    """The wallet lacks the token amount: top up USDC."""


class InvalidPaymentProof(PaymentError):
    """The server kept rejecting the proof after the retries."""


class SpendingLimitExceeded(PaymentError):
    """Paying would pass a limit the user set; nothing was paid."""


class OriginNotAllowed(PaymentError):
    """The 402 came from an origin the client's SpendingPolicy does not list; nothing was
    paid."""


class NoAcceptableOption(PaymentError):
    """The 402 offers nothing this client can pay (network, scheme, token, subscription
    only, or no facilitator to settle through)."""


class WrongNetwork(NoAcceptableOption):
    """The 402 asks for payment on another cluster than the one the client's RPC node is on
    (docs/adr/0038); nothing was paid."""


class PaymentRefused(PaymentError):
    """An x402 server answered the paid request with 402 again; `reason` is what it said."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"the server refused the payment: {reason}")
        self.reason = reason
