"""The state behind the drop-in validator: LiteSVM with mainnet's features, a clock, history.

Runs in its own environment (solders 0.29, whose LiteSVM loads SBPF v3 and knows mainnet's
feature set); imports nothing of svcpay but this package. One lock serialises all access:
LiteSVM is not thread-safe and a validator processes transactions in order anyway.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from solders.clock import Clock
from solders.hash import Hash
from solders.litesvm import LiteSVM
from solders.pubkey import Pubkey
from solders.signature import Signature
from solders.transaction import VersionedTransaction

SLOT_MS = 400  # mainnet's target slot time
SLOTS_PER_EPOCH = 432_000
RECENT_BLOCKHASHES = 150  # how long a blockhash stays usable, as on a real cluster


@dataclass
class TxRecord:
    """A processed transaction, as getTransaction and getSignatureStatuses report it."""

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
    inner_instructions: list[Any] = field(default_factory=list)


class BlockhashNotFound(ValueError):
    """A transaction's blockhash is not among the last RECENT_BLOCKHASHES."""


class TimeTravelError(ValueError):
    """A time-travel target in the past."""


class Node:
    """LiteSVM plus what an RPC node adds: slots and time that move, a transaction history."""

    def __init__(self, programs: list[tuple[Pubkey, Path]]) -> None:
        self.lock = threading.RLock()
        # LiteSVM accepts only its latest blockhash; a cluster accepts the last 150.
        self.svm = LiteSVM().with_mainnet_features().with_blockhash_check(False)
        self.recent: deque[str] = deque(maxlen=RECENT_BLOCKHASHES)
        for program_id, path in programs:
            self.svm.add_program(program_id, path.read_bytes())
        self.genesis_ms = int(time.time() * 1000)
        self.offset_ms = 0  # added to wall time by time travel
        self.slot = 0
        self.history: dict[str, TxRecord] = {}
        self.by_address: dict[str, list[str]] = {}  # address -> signatures, oldest first
        self.transaction_count = 0
        self.recent.append(str(self.svm.latest_blockhash()))
        self.tick()

    # -- time -------------------------------------------------------------------------
    def now_ms(self) -> int:
        return int(time.time() * 1000) + self.offset_ms

    def tick(self) -> None:
        """Moves the slot and the Clock sysvar to the present (wall time plus travel)."""
        now = self.now_ms()
        slot = max(self.slot, (now - self.genesis_ms) // SLOT_MS)
        self._set_clock(slot, now // 1000)

    def _set_clock(self, slot: int, unix_timestamp: int) -> None:
        if slot > self.slot and self.recent:
            self._new_block()  # one blockhash per slot, as on a cluster
        self.slot = slot
        epoch = slot // SLOTS_PER_EPOCH
        old = self.svm.get_clock()
        ts = max(unix_timestamp, old.unix_timestamp)  # the clock never runs backwards
        self.svm.set_clock(Clock(slot, old.epoch_start_timestamp, epoch, epoch + 1, ts))

    def time_travel(self, config: dict[str, int]) -> None:
        """surfnet_timeTravel: `absoluteTimestamp` (ms), `absoluteSlot` or `absoluteEpoch`."""
        if len(config) != 1:
            raise ValueError("give exactly one of absoluteTimestamp, absoluteSlot, absoluteEpoch")
        ((kind, value),) = config.items()
        if kind == "absoluteTimestamp":
            target_ms = int(value)
        elif kind == "absoluteSlot":
            target_ms = self.genesis_ms + int(value) * SLOT_MS
        elif kind == "absoluteEpoch":
            target_ms = self.genesis_ms + int(value) * SLOTS_PER_EPOCH * SLOT_MS
        else:
            raise ValueError(f"unknown time travel kind {kind!r}")
        current = self.now_ms()
        if target_ms < current:
            raise TimeTravelError(f"cannot travel to {target_ms} ms: the clock is at {current} ms")
        self.offset_ms += target_ms - current
        self.tick()

    def epoch_info(self) -> dict[str, int]:
        return {
            "absoluteSlot": self.slot,
            "blockHeight": self.slot,
            "epoch": self.slot // SLOTS_PER_EPOCH,
            "slotIndex": self.slot % SLOTS_PER_EPOCH,
            "slotsInEpoch": SLOTS_PER_EPOCH,
            "transactionCount": self.transaction_count,
        }

    # -- transactions -----------------------------------------------------------------
    def blockhash(self) -> Hash:
        blockhash: Hash = self.svm.latest_blockhash()
        return blockhash

    def blockhash_is_recent(self, blockhash: str) -> bool:
        return blockhash in self.recent

    def _new_block(self) -> None:
        self.svm.expire_blockhash()
        self.recent.append(str(self.svm.latest_blockhash()))

    def simulate(self, tx: VersionedTransaction) -> tuple[Any, list[str], int]:
        """(err JSON or None, logs, compute units) of running `tx` without committing it."""
        self.tick()
        if not self.blockhash_is_recent(str(tx.message.recent_blockhash)):
            return "BlockhashNotFound", [], 0
        result = self.svm.simulate_transaction(tx)
        if hasattr(result, "err"):
            data = json.loads(result.to_json())
            meta = data["meta"]
            return data["err"], meta["logs"], meta["compute_units_consumed"]
        meta = result.meta()
        return None, list(meta.logs()), meta.compute_units_consumed()

    def process(self, tx: VersionedTransaction) -> TxRecord:
        """Executes and commits `tx` (a failed one still pays its fee), records it."""
        self.tick()
        if not self.blockhash_is_recent(str(tx.message.recent_blockhash)):
            raise BlockhashNotFound(str(tx.message.recent_blockhash))
        keys = [str(k) for k in tx.message.account_keys]
        pre = [self.svm.get_balance(Pubkey.from_string(k)) or 0 for k in keys]
        result = self.svm.send_transaction(tx)
        data = json.loads(result.to_json())
        meta = data.get("meta", data)
        record = TxRecord(
            signature=str(tx.signatures[0]),
            slot=self.slot,
            block_time=self.svm.get_clock().unix_timestamp,
            raw=bytes(tx),
            err=data.get("err"),
            logs=meta["logs"],
            compute_units=meta["compute_units_consumed"],
            fee=meta.get("fee", 0),
            account_keys=keys,
            pre_balances=pre,
            post_balances=[self.svm.get_balance(Pubkey.from_string(k)) or 0 for k in keys],
        )
        if record.err != "AlreadyProcessed" and record.signature not in self.history:
            self.history[record.signature] = record
            self.transaction_count += 1
            for key in keys:
                self.by_address.setdefault(key, []).append(record.signature)
        return record

    def airdrop(self, address: Pubkey, lamports: int) -> str:
        self.tick()
        result = self.svm.airdrop(address, lamports)
        if hasattr(result, "err"):
            raise ValueError(f"airdrop failed: {result.err()}")
        signature = str(result.signature())
        self.history[signature] = TxRecord(
            signature, self.slot, self.svm.get_clock().unix_timestamp, b"", None,
            list(result.logs()), result.compute_units_consumed(), result.fee(),
            [str(address)], [0], [self.svm.get_balance(address) or 0],
        )  # fmt: skip
        self.by_address.setdefault(str(address), []).append(signature)
        return signature

    def record(self, signature: str) -> TxRecord | None:
        return self.history.get(signature)

    @staticmethod
    def parse_signature(text: str) -> Signature:
        return Signature.from_string(text)
