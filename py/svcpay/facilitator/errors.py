"""The facilitator's one refusal type, shared by the settlement path and each scheme's
facilitator side; it lives in `svcpay.protocol.settlement`, below both."""

from svcpay.protocol.settlement import SettlementError

__all__ = ["SettlementError"]
