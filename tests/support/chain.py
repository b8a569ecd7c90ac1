"""The chain the tests use: a real local validator (solana-test-validator or svcpay's
drop-in) running the built program, reached over JSON-RPC. Never a mock."""

from svcpay.localnet.chain import AccountData, Chain, RpcError, TxResult
from svcpay.localnet.process import ProgramBinaryMissing

__all__ = ["AccountData", "Chain", "ProgramBinaryMissing", "RpcError", "TxResult"]
