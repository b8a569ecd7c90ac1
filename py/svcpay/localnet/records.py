"""What the node keeps of each transaction that landed (`TxRecord`, as the RPC methods report
it) and the errors its ledger raises."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# (program id index, account indexes, data, stack height) of one inner instruction
InnerInstruction = tuple[int, list[int], bytes, int | None]


@dataclass
class TxRecord:
    """A transaction that landed (succeeded, or failed and paid its fee), as getTransaction,
    getSignatureStatuses and getSignaturesForAddress report it."""

    signature: str
    slot: int
    block_time: int
    raw: bytes  # the wire transaction
    err: Any  # RPC-shaped error JSON, or None
    logs: list[str]
    compute_units: int
    fee: int
    account_keys: list[str]
    pre_balances: list[int]
    post_balances: list[int]
    # per top-level instruction with any, in order: (its index, its inner instructions)
    inner_instructions: list[tuple[int, list[InnerInstruction]]] = field(default_factory=list)
    pre_token_balances: list[dict[str, Any]] = field(default_factory=list)
    post_token_balances: list[dict[str, Any]] = field(default_factory=list)
    return_data: tuple[str, bytes] | None = None  # (program id, data) when data was set
    memo: str | None = None
    order: int = 0  # position in the ledger: later transactions have larger numbers
    index: int = 0  # position in its slot's block (transactionIndex)


class BlockhashNotFound(ValueError):
    """A transaction's blockhash is not among the last RECENT_BLOCKHASHES."""


class TimeTravelError(ValueError):
    """A time-travel target in the past."""
