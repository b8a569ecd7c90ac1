"""The runtime the tests use: svcpay's LiteSVM chain with the built program (never a mock)."""

from svcpay.localnet.svm import LocalChain as Chain
from svcpay.localnet.svm import ProgramBinaryMissing, TxResult

__all__ = ["Chain", "ProgramBinaryMissing", "TxResult"]
