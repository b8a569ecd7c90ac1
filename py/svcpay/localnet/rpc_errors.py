"""JSON-RPC error codes and parameter helpers shared by the drop-in's method modules."""

from __future__ import annotations

from typing import Any

import base58
from solders.pubkey import Pubkey
from solders.signature import Signature

from svcpay.localnet.node import COMMITMENTS, FINALIZED, PROCESSED

INVALID_PARAMS = -32602
METHOD_NOT_FOUND = -32601
SIMULATION_FAILED = -32002
SIGNATURE_VERIFICATION_FAILED = -32003
UNSUPPORTED_TRANSACTION_VERSION = -32015
MIN_CONTEXT_SLOT_NOT_REACHED = -32016
FILTER_TRANSACTION_NOT_FOUND = -32020


class RpcError(Exception):
    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code, self.message, self.data = code, message, data


def param(params: list[Any], i: int, name: str, default: Any = ...) -> Any:
    """Positional parameter `i` (`name`), or `default`; missing without a default is -32602,
    worded as agave words it (the required parameters come first)."""
    if i < len(params) and params[i] is not None:
        return params[i]
    if default is ...:
        raise RpcError(INVALID_PARAMS, f"`params` should have at least {i + 1} argument(s)")
    return default


def _decode(text: Any, size: int) -> bytes:
    """Base58 `text` of `size` bytes, or -32602 with Agave's parse error (WrongSize, Invalid)."""
    if not isinstance(text, str) or len(text) > (44 if size == 32 else 88):
        raise RpcError(INVALID_PARAMS, "Invalid param: WrongSize")
    try:
        raw = base58.b58decode(text)
    except ValueError as e:
        raise RpcError(INVALID_PARAMS, "Invalid param: Invalid") from e
    if len(raw) != size:
        raise RpcError(INVALID_PARAMS, "Invalid param: WrongSize")
    return bytes(raw)


def pubkey(text: Any) -> Pubkey:
    return Pubkey.from_bytes(_decode(text, 32))


def signature(text: Any) -> Signature:
    return Signature.from_bytes(_decode(text, 64))


def commitment(config: dict[str, Any], key: str = "commitment") -> str:
    """The `commitment` (or another `key`: sendTransaction's `preflightCommitment`) of a
    method's config object, as Agave reads it: `finalized` when absent or null. The levels
    deprecated in 1.5 (recent, single, singleGossip, root, max) left the RPC with Agave 2.0,
    which refuses them like any unknown string."""
    level = config.get(key)
    if level is None:
        return FINALIZED
    if isinstance(level, str) and level in COMMITMENTS:
        return level
    got = (
        f"unknown variant `{level}`" if isinstance(level, str) else f"invalid type: {_kind(level)}"
    )
    raise RpcError(
        INVALID_PARAMS,
        f"Invalid params: {got}, expected one of `processed`, `confirmed`, `finalized`.",
    )


def check_commitment(config: dict[str, Any]) -> str:
    """History methods answer only at `confirmed` or `finalized` (the default): the level."""
    level = commitment(config)
    if level == PROCESSED:
        raise RpcError(INVALID_PARAMS, "Method does not support commitment below `confirmed`")
    return level


def _kind(value: Any) -> str:
    """A JSON value as serde names it in an "invalid type" error."""
    if isinstance(value, bool):
        return f"boolean `{str(value).lower()}`"
    if isinstance(value, int):
        return f"integer `{value}`"
    if isinstance(value, float):
        return f"floating point `{value}`"
    return "map" if isinstance(value, dict) else "sequence"


# How agave words a TransactionError (its Display), for "Transaction simulation failed: ...".
_TRANSACTION_ERRORS = {
    "AccountInUse": "Account in use",
    "AccountLoadedTwice": "Account loaded twice",
    "AccountNotFound": "Attempt to debit an account but found no record of a prior credit.",
    "ProgramAccountNotFound": "Attempt to load a program that does not exist",
    "InsufficientFundsForFee": "Insufficient funds for fee",
    "InvalidAccountForFee": "This account may not be used to pay transaction fees",
    "AlreadyProcessed": "This transaction has already been processed",
    "BlockhashNotFound": "Blockhash not found",
    "CallChainTooDeep": "Loader call chain is too deep",
    "MissingSignatureForFee": "Transaction requires a fee but has no signature present",
    "InvalidAccountIndex": "Transaction contains an invalid account reference",
    "SignatureFailure": "Transaction did not pass signature verification",
    "InvalidProgramForExecution": "This program may not be used for executing instructions",
    "SanitizeFailure": "Transaction failed to sanitize accounts offsets correctly",
    "ClusterMaintenance": "Transactions are currently disabled due to cluster maintenance",
    "AccountBorrowOutstanding": (
        "Transaction processing left an account with an outstanding borrowed reference"
    ),
    "WouldExceedMaxBlockCostLimit": "Transaction would exceed max Block Cost Limit",
    "UnsupportedVersion": "Transaction version is unsupported",
    "InvalidWritableAccount": "Transaction loads a writable account that cannot be written",
    "WouldExceedMaxAccountCostLimit": "Transaction would exceed max account limit within the block",
    "WouldExceedAccountDataBlockLimit": (
        "Transaction would exceed account data limit within the block"
    ),
    "TooManyAccountLocks": "Transaction locked too many accounts",
    "AddressLookupTableNotFound": "Transaction loads an address table account that doesn't exist",
    "InvalidAddressLookupTableOwner": (
        "Transaction loads an address table account with an invalid owner"
    ),
    "InvalidAddressLookupTableData": (
        "Transaction loads an address table account with invalid data"
    ),
    "InvalidAddressLookupTableIndex": "Transaction address table lookup uses an invalid index",
    "InvalidRentPayingAccount": (
        "Transaction leaves an account with a lower balance than rent-exempt minimum"
    ),
    "WouldExceedMaxVoteCostLimit": "Transaction would exceed max Vote Cost Limit",
    "WouldExceedAccountDataTotalLimit": "Transaction would exceed total account data limit",
    "MaxLoadedAccountsDataSizeExceeded": "Transaction exceeded max loaded accounts data size cap",
    "InvalidLoadedAccountsDataSizeLimit": (
        "LoadedAccountsDataSizeLimit set for transaction must be greater than 0."
    ),
    "ResanitizationNeeded": "ResanitizationNeeded",
    "UnbalancedTransaction": "Sum of account balances before and after transaction do not match",
    "ProgramCacheHitMaxLimit": "Program cache hit max limit",
    "CommitCancelled": "CommitCancelled",
}

# How agave words an InstructionError (its Display).
_INSTRUCTION_ERRORS = {
    "GenericError": "generic instruction error",
    "InvalidArgument": "invalid program argument",
    "InvalidInstructionData": "invalid instruction data",
    "InvalidAccountData": "invalid account data for instruction",
    "AccountDataTooSmall": "account data too small for instruction",
    "InsufficientFunds": "insufficient funds for instruction",
    "IncorrectProgramId": "incorrect program id for instruction",
    "MissingRequiredSignature": "missing required signature for instruction",
    "AccountAlreadyInitialized": "instruction requires an uninitialized account",
    "UninitializedAccount": "instruction requires an initialized account",
    "UnbalancedInstruction": "sum of account balances before and after instruction do not match",
    "ModifiedProgramId": "instruction illegally modified the program id of an account",
    "ExternalAccountLamportSpend": (
        "instruction spent from the balance of an account it does not own"
    ),
    "ExternalAccountDataModified": "instruction modified data of an account it does not own",
    "ReadonlyLamportChange": "instruction changed the balance of a read-only account",
    "ReadonlyDataModified": "instruction modified data of a read-only account",
    "DuplicateAccountIndex": "instruction contains duplicate accounts",
    "ExecutableModified": "instruction changed executable bit of an account",
    "RentEpochModified": "instruction modified rent epoch of an account",
    "NotEnoughAccountKeys": "insufficient account keys for instruction",
    "AccountDataSizeChanged": (
        "program other than the account's owner changed the size of the account data"
    ),
    "AccountNotExecutable": "instruction expected an executable account",
    "AccountBorrowFailed": (
        "instruction tries to borrow reference for an account which is already borrowed"
    ),
    "AccountBorrowOutstanding": "instruction left account with an outstanding borrowed reference",
    "DuplicateAccountOutOfSync": "instruction modifications of multiply-passed account differ",
    "InvalidError": "program returned invalid error code",
    "ExecutableDataModified": "instruction changed executable accounts data",
    "ExecutableLamportChange": "instruction changed the balance of an executable account",
    "ExecutableAccountNotRentExempt": "executable accounts must be rent exempt",
    "UnsupportedProgramId": "Unsupported program id",
    "CallDepth": "Cross-program invocation call depth too deep",
    "MissingAccount": "An account required by the instruction is missing",
    "ReentrancyNotAllowed": "Cross-program invocation reentrancy not allowed for this instruction",
    "MaxSeedLengthExceeded": "Length of the seed is too long for address generation",
    "InvalidSeeds": "Provided seeds do not result in a valid address",
    "InvalidRealloc": "Failed to reallocate account data",
    "ComputationalBudgetExceeded": "Computational budget exceeded",
    "PrivilegeEscalation": "Cross-program invocation with unauthorized signer or writable account",
    "ProgramEnvironmentSetupFailure": "Failed to create program execution environment",
    "ProgramFailedToComplete": "Program failed to complete",
    "ProgramFailedToCompile": "Program failed to compile",
    "Immutable": "Account is immutable",
    "IncorrectAuthority": "Incorrect authority provided",
    "BorshIoError": "Failed to serialize or deserialize account data",
    "AccountNotRentExempt": "An account does not have enough lamports to be rent-exempt",
    "InvalidAccountOwner": "Invalid account owner",
    "ArithmeticOverflow": "Program arithmetic overflowed",
    "UnsupportedSysvar": "Unsupported sysvar",
    "IllegalOwner": "Provided owner is not allowed",
    "MaxAccountsDataAllocationsExceeded": (
        "Accounts data allocations exceeded the maximum allowed per transaction"
    ),
    "MaxAccountsExceeded": "Max accounts exceeded",
    "MaxInstructionTraceLengthExceeded": "Max instruction trace length exceeded",
    "BuiltinProgramsMustConsumeComputeUnits": "Builtin programs must consume compute units",
}


def describe(err: Any) -> str:
    """A transaction error (its RPC JSON) as agave's Display words it."""
    if isinstance(err, str):
        return _TRANSACTION_ERRORS.get(err, err)
    if isinstance(err, dict) and len(err) == 1:
        ((kind, value),) = err.items()
        if kind == "InstructionError" and isinstance(value, list) and len(value) == 2:
            index, inner = value
            if isinstance(inner, dict) and "Custom" in inner:
                what = f"custom program error: {inner['Custom']:#x}"
            elif isinstance(inner, dict) and "BorshIoError" in inner:  # older JSON: a payload
                what = _INSTRUCTION_ERRORS["BorshIoError"]
            else:
                what = _INSTRUCTION_ERRORS.get(str(inner), str(inner))
            return f"Error processing Instruction {index}: {what}"
        if kind == "DuplicateInstruction":
            return f"Transaction contains a duplicate instruction ({value}) that is not allowed"
        if kind == "InsufficientFundsForRent" and isinstance(value, dict):
            return (
                f"Transaction results in an account ({value.get('account_index')}) with "
                "insufficient funds for rent"
            )
        if kind == "ProgramExecutionTemporarilyRestricted" and isinstance(value, dict):
            return (
                "Execution of the program referenced by account at index "
                f"{value.get('account_index')} is temporarily restricted."
            )
    return str(err)
