"""The state behind the drop-in validator: LiteSVM with mainnet's features, a clock, history.

Commitment, as a single-node cluster has it: `processed` and `confirmed` are the current state
(a transaction is confirmed as soon as it lands, so the drop-in stays fast); `finalized` is the
state as of slot F = slot - FINALITY_SLOTS. LiteSVM keeps only the current state, so the node
keeps, for every account written after F, its pre-image: the account as it was before the
first transaction of a slot > F wrote it (None: it did not exist). A finalized read returns
that pre-image where there is one, else the current account. Pre-images at or below F are
dropped as slots pass, so memory stays bounded (a burst of writes is held for ~13 s); time
travel jumps the slot far ahead and so finalizes everything. Sysvars (the Clock) are not
versioned: they read at the current slot at every level.

Simulation (simulateTransaction, and sendTransaction's preflight) runs against the bank of its
commitment, as agave's does: the blockhash must be known to that bank, a transaction that bank
has already seen is AlreadyProcessed, and at `finalized` every account the transaction names is
briefly set back to its pre-image, simulated against, and restored. So a preflight left at the
default (`finalized`) right after an airdrop fails with AccountNotFound here as on a cluster.
The node keeps the history itself (LiteSVM's is off): a transaction already landed is
AlreadyProcessed, and not run again.

Runs in its own environment (solders 0.29, whose LiteSVM loads SBPF v3 and knows mainnet's
feature set); imports nothing of svcpay but this package. One lock serialises all access:
LiteSVM is not thread-safe and a validator processes transactions in order anyway.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections import deque
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from solders.account import Account
from solders.clock import Clock
from solders.hash import Hash
from solders.keypair import Keypair
from solders.litesvm import LiteSVM
from solders.message import Message, MessageV0, MessageV1
from solders.pubkey import Pubkey
from solders.signature import Signature
from solders.system_program import TransferParams, transfer
from solders.transaction import VersionedTransaction
from solders.transaction_metadata import FailedTransactionMetadata

from svcpay.localnet import parsed
from svcpay.localnet.fees import PrioritizationFees, compute_unit_price
from svcpay.localnet.records import BlockhashNotFound, TimeTravelError, TxRecord

SLOT_MS = 400  # mainnet's target slot time
SLOTS_PER_EPOCH = 432_000
RECENT_BLOCKHASHES = 150  # how long a blockhash stays usable, as on a real cluster
FAUCET_LAMPORTS = 500_000_000 * 10**9  # solana-test-validator's faucet holds 500M SOL
UNPROCESSED = str(Signature.default())  # LiteSVM's signature for a transaction it dropped
# How far `finalized` lags the tip. A slot is rooted once 31 more votes stack on it (Tower
# BFT's MAX_LOCKOUT_HISTORY), so solana-test-validator finalizes ~32 slots (~13 s) behind.
FINALITY_SLOTS = 32
PROCESSED, CONFIRMED, FINALIZED = "processed", "confirmed", "finalized"
COMMITMENTS = (PROCESSED, CONFIRMED, FINALIZED)
LOOKUP_TABLE_META_SIZE = 56  # an address lookup table's header; its addresses follow

# What LiteSVM holds for an address with no account (it reads back as None)
_NO_ACCOUNT = Account(0, b"", Pubkey.from_string(parsed.SYSTEM))


class ProgramLoadError(ValueError):
    """A --bpf-program file that cannot be read or is not a loadable program."""


class Node:
    """LiteSVM plus what an RPC node adds: slots and time that move, a transaction history."""

    def __init__(
        self,
        programs: list[tuple[Pubkey, Path]],
        accounts: Sequence[tuple[Pubkey, Account]] = (),
    ) -> None:
        self.lock = threading.RLock()
        # LiteSVM accepts only its latest blockhash; a cluster accepts the last 150. Its own
        # history is off: the node's decides what is AlreadyProcessed, at each commitment.
        self.svm = (
            LiteSVM()
            .with_mainnet_features()
            .with_blockhash_check(False)
            .with_transaction_history(0)
        )
        # the last RECENT_BLOCKHASHES blockhashes, oldest first, each with the slot it began
        self.recent: dict[str, int] = {}
        for program_id, path in programs:
            try:
                self.svm.add_program(program_id, path.read_bytes())
            except OSError as e:
                raise ProgramLoadError(f"{path}: cannot read it: {e.strerror or e}") from e
            except Exception as e:  # solders' LiteSVMError: not an ELF the runtime loads
                raise ProgramLoadError(
                    f"{path} is not a program the Solana runtime can load ({e}): give the "
                    ".so that scripts/build-program (or cargo build-sbf) wrote"
                ) from e
        for address, account in accounts:  # solana-test-validator's --account
            self.svm.set_account(address, account)
        self.genesis_ms = int(time.time() * 1000)
        self.offset_ms = 0  # added to wall time by time travel
        self.slot = 0
        self._clock_at = (-1, -1)  # the (slot, unix time) the Clock sysvar was last set to
        # address -> [(slot, the account before that slot's first write)], oldest first,
        # for slots after the finalized one only (see the module's docstring)
        self.pre_images: dict[Pubkey, deque[tuple[int, Account | None]]] = {}
        self._unfinalized: deque[tuple[int, Pubkey]] = deque()  # those entries, in order
        self._unfinalized_txs: deque[int] = deque()  # slots of the landed, not finalized
        self.history: dict[str, TxRecord] = {}
        self.fees = PrioritizationFees()  # getRecentPrioritizationFees (svcpay.localnet.fees)
        # address -> signatures of the landed transactions naming it, oldest first
        self.by_address: dict[str, list[str]] = {}
        self.faucet = Keypair()
        self.svm.set_account(
            self.faucet.pubkey(), Account(FAUCET_LAMPORTS, b"", Pubkey.from_string(parsed.SYSTEM))
        )
        self.transaction_count = 0
        self._block = (-1, 0)  # (slot, transactions landed in it so far)
        self.recent[str(self.svm.latest_blockhash())] = self.slot
        self.tick()

    # -- time -------------------------------------------------------------------------
    def now_ms(self) -> int:
        return int(time.time() * 1000) + self.offset_ms

    def tick(self) -> None:
        """Moves the slot and the Clock sysvar to the present (wall time plus travel)."""
        now = self.now_ms()
        slot = max(self.slot, (now - self.genesis_ms) // SLOT_MS)
        if (slot, now // 1000) != self._clock_at:  # cheap when called again within a slot
            self._set_clock(slot, now // 1000)

    def _set_clock(self, slot: int, unix_timestamp: int) -> None:
        self._clock_at = (slot, unix_timestamp)
        if slot > self.slot and self.recent:
            # One blockhash per slot, as on a cluster. After a jump (time travel, or no call
            # for a while) the last FINALITY_SLOTS + 1 are enough: a `finalized` read still
            # finds a block of its slot, and older ones would be spent anyway.
            for new in range(max(self.slot + 1, slot - FINALITY_SLOTS), slot + 1):
                self._new_block(new)
        self.slot = slot
        epoch = slot // SLOTS_PER_EPOCH
        old = self.svm.get_clock()
        ts = max(unix_timestamp, old.unix_timestamp)  # the clock never runs backwards
        self.svm.set_clock(Clock(slot, old.epoch_start_timestamp, epoch, epoch + 1, ts))
        self._finalize()

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

    def epoch_info(self, commitment: str = CONFIRMED) -> dict[str, int]:
        slot = self.slot_at(commitment)
        count = self.transaction_count
        if commitment == FINALIZED:
            count -= len(self._unfinalized_txs)
        return {
            "absoluteSlot": slot,
            "blockHeight": slot,
            "epoch": slot // SLOTS_PER_EPOCH,
            "slotIndex": slot % SLOTS_PER_EPOCH,
            "slotsInEpoch": SLOTS_PER_EPOCH,
            "transactionCount": count,
        }

    # -- commitment -------------------------------------------------------------------
    def finalized_slot(self) -> int:
        """F, the slot `finalized` reads: 0 (genesis) until FINALITY_SLOTS have passed."""
        return max(0, self.slot - FINALITY_SLOTS)

    def _final_through(self) -> int:
        """The newest slot whose transactions are finalized: below 0 for the first
        FINALITY_SLOTS, as transactions land in slot 0 here (a cluster's is genesis)."""
        return self.slot - FINALITY_SLOTS

    def slot_at(self, commitment: str) -> int:
        """The slot a read at `commitment` sees: the tip, or the finalized slot."""
        return self.finalized_slot() if commitment == FINALIZED else self.slot

    def is_finalized(self, record: TxRecord) -> bool:
        return record.slot <= self._final_through()

    def visible(self, record: TxRecord, commitment: str) -> bool:
        """Whether a read at `commitment` sees the landed transaction."""
        return commitment != FINALIZED or self.is_finalized(record)

    def get_account(self, address: Pubkey, commitment: str) -> Account | None:
        """The account as of the slot `commitment` reads (None: it does not exist)."""
        if commitment == FINALIZED and (images := self.pre_images.get(address)):
            return images[0][1]
        account: Account | None = self.svm.get_account(address)
        return account

    def program_accounts(self, program: Pubkey, commitment: str) -> list[tuple[Pubkey, Account]]:
        """The accounts `program` owns as of the slot `commitment` reads: at finalized, those
        written since show their pre-image (gone if they did not exist or belonged to another
        program) and those closed or reassigned since are back."""
        current: list[tuple[Pubkey, Account]] = self.svm.get_program_accounts(program)
        if commitment != FINALIZED or not self.pre_images:
            return current
        out = []
        for address, account in current:
            images = self.pre_images.get(address)
            if images is None:
                out.append((address, account))
            elif (old := images[0][1]) is not None and old.owner == program:
                out.append((address, old))
        owned_now = {address for address, _ in current}
        for address, images in self.pre_images.items():
            old = images[0][1]
            if old is not None and old.owner == program and address not in owned_now:
                out.append((address, old))
        return out

    def blockhash_at(self, commitment: str) -> tuple[str, int]:
        """(blockhash, the slot it began) of the newest block `commitment` sees; at finalized
        the oldest recent one if none is that old (just after genesis)."""
        if commitment != FINALIZED:
            return str(self.blockhash()), self.slot
        final = self.finalized_slot()
        for blockhash, slot in reversed(self.recent.items()):
            if slot <= final:
                return blockhash, slot
        oldest = next(iter(self.recent))
        return oldest, self.recent[oldest]

    def blockhash_is_valid(self, blockhash: str, commitment: str) -> bool:
        """isBlockhashValid: known to the bank `commitment` reads, and that bank's height
        (here its slot) not past the blockhash's lastValidBlockHeight."""
        slot, at = self.recent.get(blockhash), self.slot_at(commitment)
        return slot is not None and slot <= at <= slot + RECENT_BLOCKHASHES

    def _writable(self, message: Message | MessageV0 | MessageV1) -> list[Pubkey]:
        """The accounts `message` may write: writable by its header (a superset of what the
        runtime locks) and, for v0, the writable addresses it loads from lookup tables."""
        header, keys = message.header, message.account_keys
        signed = header.num_required_signatures
        writable_signed = signed - header.num_readonly_signed_accounts
        writable_end = len(keys) - header.num_readonly_unsigned_accounts
        out = [
            key for i, key in enumerate(keys) if i < writable_signed or signed <= i < writable_end
        ]
        if isinstance(message, MessageV0):
            for lookup in message.address_table_lookups:
                table = self.svm.get_account(lookup.account_key)
                if table is None:
                    continue
                listed = bytes(table.data)[LOOKUP_TABLE_META_SIZE:]
                for i in bytes(lookup.writable_indexes):
                    if 32 * (i + 1) <= len(listed):
                        out.append(Pubkey.from_bytes(listed[32 * i : 32 * (i + 1)]))
        return out

    def _pre_images(self, addresses: Iterable[Pubkey]) -> list[tuple[Pubkey, Account | None]]:
        """The current accounts at `addresses`, except those already imaged in this slot (a
        finalized read needs only the state before a slot's first write)."""
        slot, known = self.slot, self.pre_images
        return [
            (address, self.svm.get_account(address))
            for address in dict.fromkeys(addresses)
            if (images := known.get(address)) is None or images[-1][0] != slot
        ]

    def _remember(self, images: list[tuple[Pubkey, Account | None]]) -> None:
        slot = self.slot
        self._unfinalized_txs.append(slot)
        for address, account in images:
            self.pre_images.setdefault(address, deque()).append((slot, account))
            self._unfinalized.append((slot, address))

    def _finalize(self) -> None:
        """Drops what the finalized state no longer needs: pre-images at or below F."""
        final = self._final_through()
        pending, txs = self._unfinalized, self._unfinalized_txs
        while pending and pending[0][0] <= final:
            _, address = pending.popleft()
            images = self.pre_images[address]
            images.popleft()
            if not images:
                del self.pre_images[address]
        while txs and txs[0] <= final:
            txs.popleft()

    # -- transactions -----------------------------------------------------------------
    def blockhash(self) -> Hash:
        blockhash: Hash = self.svm.latest_blockhash()
        return blockhash

    def blockhash_is_recent(self, blockhash: str) -> bool:
        """Whether a transaction on `blockhash` may still land: by block height, as the
        clients decide expiry (lastValidBlockHeight), never by how many blocks came since
        (after time travel, one block stands for many slots)."""
        slot = self.recent.get(blockhash)
        return slot is not None and self.slot <= slot + RECENT_BLOCKHASHES

    def _new_block(self, slot: int) -> None:
        self.svm.expire_blockhash()
        self.recent[str(self.svm.latest_blockhash())] = slot
        if len(self.recent) > RECENT_BLOCKHASHES:
            del self.recent[next(iter(self.recent))]

    def simulate(
        self, tx: VersionedTransaction, commitment: str = FINALIZED
    ) -> tuple[Any, list[str], int]:
        """(err JSON or None, logs, compute units) of running `tx` without committing it,
        against the bank `commitment` reads (see the module's docstring). Signatures are not
        checked here: the RPC checks them first when asked to (sigVerify, preflight)."""
        self.tick()
        if not self.blockhash_is_valid(str(tx.message.recent_blockhash), commitment):
            return "BlockhashNotFound", [], 0
        seen = self.history.get(str(tx.signatures[0]))
        if seen is not None and self.visible(seen, commitment):
            return "AlreadyProcessed", [], 0
        restore = self._roll_back(tx.message) if commitment == FINALIZED else []
        self.svm.with_sigverify(False)
        try:
            result = self.svm.simulate_transaction(tx)
        finally:
            self.svm.with_sigverify(True)
            for address, account in restore:
                self.svm.set_account(address, account)
        if hasattr(result, "err"):
            data = json.loads(result.to_json())
            meta = data["meta"]
            return data["err"], meta["logs"], meta["compute_units_consumed"]
        meta = result.meta()
        return None, list(meta.logs()), meta.compute_units_consumed()

    def _roll_back(self, message: Message | MessageV0 | MessageV1) -> list[tuple[Pubkey, Account]]:
        """Sets every account `message` names (its keys, its lookup tables and the addresses
        it loads from them) that changed since the finalized slot back to its finalized
        image. Returns what to set to restore the current state exactly."""
        if not self.pre_images:
            return []
        named = list(message.account_keys)
        if isinstance(message, MessageV0):
            for lookup in message.address_table_lookups:
                named.append(lookup.account_key)
                table = self.get_account(lookup.account_key, FINALIZED)
                if table is None:
                    continue
                listed = bytes(table.data)[LOOKUP_TABLE_META_SIZE:]
                for i in bytes(lookup.writable_indexes) + bytes(lookup.readonly_indexes):
                    if 32 * (i + 1) <= len(listed):
                        named.append(Pubkey.from_bytes(listed[32 * i : 32 * (i + 1)]))
        restore = []
        for address in dict.fromkeys(named):
            images = self.pre_images.get(address)
            if images is None:
                continue
            current = self.svm.get_account(address)
            restore.append((address, _NO_ACCOUNT if current is None else current))
            old = images[0][1]
            self.svm.set_account(address, _NO_ACCOUNT if old is None else old)
        return restore

    def process(self, tx: VersionedTransaction) -> TxRecord:
        """Executes `tx` and commits it if it lands: succeeded, or failed while executing (it
        still pays its fee). One that cannot pay or load (AccountNotFound, ...) is dropped, as
        a cluster drops it: it is in no history. Returns the outcome either way."""
        self.tick()
        if not self.blockhash_is_recent(str(tx.message.recent_blockhash)):
            raise BlockhashNotFound(str(tx.message.recent_blockhash))
        signature = str(tx.signatures[0])
        if signature in self.history:  # a cluster's status cache refuses it: it never runs
            seen = self.history[signature]
            return dataclasses.replace(seen, err="AlreadyProcessed", logs=[], compute_units=0)
        keys = [str(k) for k in tx.message.account_keys]
        addresses = [Pubkey.from_string(k) for k in keys]
        programs = {ix.program_id_index for ix in tx.message.instructions}
        pre = [self.svm.get_balance(a) or 0 for a in addresses]
        pre_tokens = self._token_balances(addresses, programs)
        images = self._pre_images(self._writable(tx.message))
        result = self.svm.send_transaction(tx)
        if isinstance(result, FailedTransactionMetadata):
            err = json.loads(result.to_json())["err"]
            meta = result.meta()
        else:
            err, meta = None, result
        returned = meta.return_data()
        record = TxRecord(
            signature=signature,
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
        if str(meta.signature()) != UNPROCESSED:  # landed
            self.history[record.signature] = record
            price = compute_unit_price(tx.message)
            self.fees.record(self.slot, price, self._writable(tx.message))
            self.transaction_count += 1
            record.order = self.transaction_count
            slot, count = self._block
            record.index = count if slot == self.slot else 0
            self._block = (self.slot, record.index + 1)
            self._remember(images)
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
