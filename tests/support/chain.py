"""The chain the tests use: a real local validator (solana-test-validator or svcpay's
drop-in) running the built program, reached over JSON-RPC. Never a mock."""

from svcpay.localnet.chain import AccountData, Chain, RpcError, TxResult
from svcpay.localnet.process import ProgramBinaryMissing

__all__ = [
    "TICKS_PER_SLOT", "AccountData", "Chain", "ProgramBinaryMissing", "RpcError", "TxResult"
]  # fmt: skip

# solana-test-validator's slots at 100 ms instead of 400 (64 ticks): each confirmation and
# finality come four times sooner, which halves its stage of scripts/test. Blockhashes then
# live about 15 s, longer than any test holds a signed transaction. The drop-in ignores it.
TICKS_PER_SLOT = 16
