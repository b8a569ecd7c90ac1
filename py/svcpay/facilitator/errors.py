"""The facilitator's one refusal type, shared by the settlement path and each scheme's
facilitator side (`svcpay.schemes.*.facilitator`)."""

from __future__ import annotations


class SettlementError(Exception):
    """A payment cannot be settled. `name` is the spec's error (InsufficientFunds) or one of
    ours (InvalidTransaction, TermsMismatch, BlockhashExpired, SettlementFailed)."""

    def __init__(self, name: str, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.name, self.message, self.status = name, message, status
