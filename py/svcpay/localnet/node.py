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

from solders.account import Account
from solders.clock import Clock
from solders.hash import Hash
from solders.keypair import Keypair
from solders.litesvm import LiteSVM
from solders.message import Message
from solders.pubkey import Pubkey
from solders.signature import Signature
from solders.system_program import TransferParams, transfer
from solders.transaction import VersionedTransaction
from solders.transaction_metadata import FailedTransactionMetadata

from svcpay.localnet import parsed

SLOT_MS = 400  # mainnet's target slot time
SLOTS_PER_EPOCH = 432_000
RECENT_BLOCKHASHES = 150  # how long a blockhash stays usable, as on a real cluster
FAUCET_LAMPORTS = 500_000_000 * 10**9  # solana-test-validator's faucet holds 500M SOL
UNPROCESSED = str(Signature.default())  # LiteSVM's signature for a transaction it dropped

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
        # address -> signatures of the landed transactions naming it, oldest first
        self.by_address: dict[str, list[str]] = {}
        self.faucet = Keypair()
        self.svm.set_account(
            self.faucet.pubkey(), Account(FAUCET_LAMPORTS, b"", Pubkey.from_string(parsed.SYSTEM))
        )
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
        """Executes `tx` and commits it if it lands: succeeded, or failed while executing (it
        still pays its fee). One that cannot pay or load (AccountNotFound, ...) is dropped, as
        a cluster drops it: it is in no history. Returns the outcome either way."""
        self.tick()
        if not self.blockhash_is_recent(str(tx.message.recent_blockhash)):
            raise BlockhashNotFound(str(tx.message.recent_blockhash))
        keys = [str(k) for k in tx.message.account_keys]
        addresses = [Pubkey.from_string(k) for k in keys]
        programs = {ix.program_id_index for ix in tx.message.instructions}
        pre = [self.svm.get_balance(a) or 0 for a in addresses]
        pre_tokens = self._token_balances(addresses, programs)
        result = self.svm.send_transaction(tx)
        if isinstance(result, FailedTransactionMetadata):
            err = json.loads(result.to_json())["err"]
            meta = result.meta()
        else:
            err, meta = None, result
        returned = meta.return_data()
        record = TxRecord(
            signature=str(tx.signatures[0]),
            slot=self.slot,
            block_time=self.svm.get_clock().unix_timestamp,
            raw=bytes(tx),
            err=err,
            logs=list(meta.logs()),
            compute_units=meta.compute_units_consumed(),
            fee=meta.fee(),
            account_keys=keys,
            pre_balances=pre,
            post_balances=[self.svm.get_balance(a) or 0 for a in addresses],
            inner_instructions=[
                (
                    index,
                    [
                        (
                            inner.instruction().program_id_index,
                            list(bytes(inner.instruction().accounts)),
                            bytes(inner.instruction().data),
                            inner.stack_height(),
                        )
                        for inner in inners
                    ],
                )
                for index, inners in enumerate(meta.inner_instructions())
                if inners
            ],
            pre_token_balances=pre_tokens,
            post_token_balances=self._token_balances(addresses, programs),
            return_data=(
                (str(returned.program_id), bytes(returned.data)) if returned.data else None
            ),
            memo=parsed.memo(
                [(keys[ix.program_id_index], bytes(ix.data)) for ix in tx.message.instructions]
            ),
        )
        landed = str(meta.signature()) != UNPROCESSED and err != "AlreadyProcessed"
        if landed and record.signature not in self.history:
            self.history[record.signature] = record
            self.transaction_count += 1
            record.order = self.transaction_count
            for key in dict.fromkeys(keys):
                self.by_address.setdefault(key, []).append(record.signature)
        return record

    def _token_balances(self, addresses: list[Pubkey], programs: set[int]) -> list[dict[str, Any]]:
        """pre/postTokenBalances: every token account the transaction names (not as a program),
        with its mint's decimals."""
        out = []
        for index, address in enumerate(addresses):
            if index in programs or str(address) in parsed.TOKEN_PROGRAMS:
                continue
            acct = self.svm.get_account(address)
            if acct is None or not parsed.is_token_account(str(acct.owner), bytes(acct.data)):
                continue
            data = bytes(acct.data)
            mint = self.svm.get_account(Pubkey.from_bytes(data[0:32]))
            decimals = (
                parsed.mint_decimals(str(mint.owner), bytes(mint.data))
                if mint is not None
                else None
            )
            if decimals is not None:
                out.append(parsed.token_balance(index, str(acct.owner), data, decimals))
        return out

    def airdrop(self, address: Pubkey, lamports: int) -> str:
        """requestAirdrop as solana-test-validator's faucet does it: a transfer it signs. The
        same request again under the same blockhash is the same transaction (not repeated)."""
        self.tick()
        ix = transfer(
            TransferParams(from_pubkey=self.faucet.pubkey(), to_pubkey=address, lamports=lamports)
        )
        message = Message.new_with_blockhash([ix], self.faucet.pubkey(), self.blockhash())
        tx = VersionedTransaction(message, [self.faucet])
        record = self.process(tx)
        if record.signature in self.history:
            return record.signature
        raise ValueError(f"airdrop failed: {record.err}")

    def record(self, signature: str) -> TxRecord | None:
        return self.history.get(signature)

    @staticmethod
    def parse_signature(text: str) -> Signature:
        return Signature.from_string(text)
