"""`getRecentPrioritizationFees` for the drop-in validator, as agave answers it: for each of
the last 150 slots that landed transactions, the least compute-unit price (micro-lamports)
paid in that block, raised to the least paid by a transaction write-locking each of the
requested accounts (the fee a new transaction locking them all would have had to beat).
A transaction without `SetComputeUnitPrice` paid 0."""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from solders.message import Message, MessageV0, MessageV1
from solders.pubkey import Pubkey

from svcpay.protocol.programs import COMPUTE_BUDGET

CACHE_SLOTS = 150  # agave's prioritization-fee cache
SET_COMPUTE_UNIT_PRICE = 3
MAX_ACCOUNTS = 128  # agave refuses more addresses in one call


def compute_unit_price(message: Message | MessageV0 | MessageV1) -> int:
    """The price `message` sets with SetComputeUnitPrice; 0 without one."""
    keys = message.account_keys
    for ix in message.instructions:
        data = bytes(ix.data)
        is_price = data[:1] == bytes([SET_COMPUTE_UNIT_PRICE]) and len(data) == 9
        if keys[ix.program_id_index] == COMPUTE_BUDGET and is_price:
            return int(struct.unpack_from("<Q", data, 1)[0])
    return 0


@dataclass
class _Block:
    least: int
    by_account: dict[str, int] = field(default_factory=dict)


class PrioritizationFees:
    """The node's cache: `record` each landed transaction, `recent` answers the RPC."""

    def __init__(self) -> None:
        self.blocks: dict[int, _Block] = {}
        self.slots: deque[int] = deque()

    def record(self, slot: int, price: int, writable: Sequence[Pubkey]) -> None:
        block = self.blocks.get(slot)
        if block is None:
            block = self.blocks[slot] = _Block(price)
            self.slots.append(slot)
            while self.slots and self.slots[0] <= slot - CACHE_SLOTS:
                self.blocks.pop(self.slots.popleft(), None)
        block.least = min(block.least, price)
        for key in map(str, writable):
            block.by_account[key] = min(block.by_account.get(key, price), price)

    def recent(self, accounts: Sequence[str], tip: int) -> list[dict[str, int]]:
        out = []
        for slot in sorted(self.blocks):
            if slot <= tip - CACHE_SLOTS or slot > tip:
                continue
            block = self.blocks[slot]
            fee = max([block.least, *(block.by_account.get(a, 0) for a in accounts)])
            out.append({"slot": slot, "prioritizationFee": fee})
        return out
