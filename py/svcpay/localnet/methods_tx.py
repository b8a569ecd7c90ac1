"""Transaction methods of the drop-in validator: send, simulate, statuses, history.

A landed transaction is `confirmed` at once and `finalized` FINALITY_SLOTS later (node.py):
getSignatureStatuses says which; getTransaction and getSignaturesForAddress at `finalized`
(their default) see only finalized ones, as on a cluster. simulateTransaction runs against the
bank of its `commitment`, and sendTransaction's preflight against that of its
`preflightCommitment`, both `finalized` by default, as agave's do.
"""

from __future__ import annotations

import base64
from typing import Any

import base58
from solders.hash import Hash
from solders.message import Message, MessageHeader, MessageV0
from solders.transaction import VersionedTransaction

from svcpay.localnet import parsed
from svcpay.localnet.node import CONFIRMED, FINALIZED, RECENT_BLOCKHASHES, Node
from svcpay.localnet.records import BlockhashNotFound, TxRecord
from svcpay.localnet.rpc_errors import (
    FILTER_TRANSACTION_NOT_FOUND,
    INVALID_PARAMS,
    MIN_CONTEXT_SLOT_NOT_REACHED,
    SIMULATION_FAILED,
    UNSUPPORTED_TRANSACTION_VERSION,
    RpcError,
    check_commitment,
    commitment,
    describe,
    param,
    pubkey,
    signature,
)

MAX_SIGNATURES = 1000  # getSignaturesForAddress's largest (and default) limit
TRANSACTION_LEVEL_STACK_HEIGHT = 1
_ENCODINGS = ("json", "jsonParsed", "base64", "base58", "binary")
UPGRADEABLE_LOADER = "BPFLoaderUpgradeab1e11111111111111111111111"
# Agave's reserved account keys (builtin programs and sysvars): never write-locked.
RESERVED_ACCOUNT_KEYS = frozenset(
    f"""
    AddressLookupTab1e1111111111111111111111111 BPFLoader2111111111111111111111111111111111
    BPFLoader1111111111111111111111111111111111 {UPGRADEABLE_LOADER}
    ComputeBudget111111111111111111111111111111 Config1111111111111111111111111111111111111
    Ed25519SigVerify111111111111111111111111111 Feature111111111111111111111111111111111111
    LoaderV411111111111111111111111111111111111 NativeLoader1111111111111111111111111111111
    KeccakSecp256k11111111111111111111111111111 Secp256r1SigVerify1111111111111111111111111
    Stake11111111111111111111111111111111111111 StakeConfig11111111111111111111111111111111
    {parsed.SYSTEM} Vote111111111111111111111111111111111111111
    ZkE1Gama1Proof11111111111111111111111111111 ZkTokenProof1111111111111111111111111111111
    Sysvar1111111111111111111111111111111111111 SysvarC1ock11111111111111111111111111111111
    SysvarEpochRewards1111111111111111111111111 SysvarEpochSchedu1e111111111111111111111111
    SysvarFees111111111111111111111111111111111 Sysvar1nstructions1111111111111111111111111
    SysvarLastRestartS1ot1111111111111111111111 SysvarRecentB1ockHashes11111111111111111111
    SysvarRent111111111111111111111111111111111 SysvarRewards111111111111111111111111111111
    SysvarS1otHashes111111111111111111111111111 SysvarS1otHistory11111111111111111111111111
    SysvarStakeHistory1111111111111111111111111
    """.split()
)


PACKET_DATA_SIZE = 1232  # a transaction's largest wire size (IPv6 MTU less headers)


class TransactionMethods:
    node: Node

    def _context(self, value: Any, slot: int | None = None) -> dict[str, Any]:
        raise NotImplementedError

    # -- transactions -------------------------------------------------------------------
    def _decode_tx(self, params: list[Any]) -> tuple[VersionedTransaction, dict[str, Any]]:
        config = param(params, 1, "config", {})
        encoding = config.get("encoding", "base58")
        try:
            raw = (base64.b64decode if encoding == "base64" else base58.b58decode)(
                param(params, 0, "transaction")
            )
        except (ValueError, TypeError) as e:
            raise RpcError(INVALID_PARAMS, f"invalid transaction: {e}") from e
        if len(raw) > PACKET_DATA_SIZE:  # the RPC refuses what would not fit in a packet
            raise RpcError(
                INVALID_PARAMS,
                "decoded solana_transaction::versioned::VersionedTransaction too large: "
                f"{len(raw)} bytes (max: {PACKET_DATA_SIZE} bytes)",
            )
        try:
            return VersionedTransaction.from_bytes(raw), config
        except (ValueError, TypeError) as e:
            raise RpcError(INVALID_PARAMS, f"invalid transaction: {e}") from e

    def rpc_simulateTransaction(self, params: list[Any]) -> dict[str, Any]:
        """Runs the transaction against the bank of `commitment` (default finalized).
        Signatures are checked only with `sigVerify` (default false), before it runs: one
        that fails is the result `err: "SignatureFailure"` with no logs and no units, as
        agave 4.2 answers. Without it, a partly signed transaction (a fee payer's slot still
        empty) simulates."""
        tx, config = self._decode_tx(params)
        level = commitment(config)
        self._check_min_context_slot(config, self.node.slot_at(level))
        verify = config.get("sigVerify", False) is True
        replacement: dict[str, Any] | None = None
        if config.get("replaceRecentBlockhash", False) is True:
            if verify:
                raise RpcError(
                    INVALID_PARAMS, "sigVerify may not be used with replaceRecentBlockhash"
                )
            blockhash, slot = self.node.blockhash_at(level)
            tx = _with_blockhash(tx, Hash.from_string(blockhash))
            replacement = {
                "blockhash": blockhash,
                "lastValidBlockHeight": slot + RECENT_BLOCKHASHES,
            }
        err: Any
        logs: list[str]
        if verify and not _signatures_verify(tx):
            err, logs, units = SIGNATURE_FAILURE, [], 0
        else:
            err, logs, units = self.node.simulate(tx, level)
        value = {
            "err": err,
            "logs": logs,
            "unitsConsumed": units,
            "accounts": None,
            "returnData": None,
            "replacementBlockhash": replacement,
        }
        return self._context(value, self.node.slot_at(level))

    def rpc_sendTransaction(self, params: list[Any]) -> str:
        """Preflight (unless `skipPreflight`) simulates against the bank of
        `preflightCommitment`, default finalized: a transaction that pays from an account
        created since, or names a newer blockhash, is refused there, as by agave."""
        tx, config = self._decode_tx(params)
        if not config.get("skipPreflight", False):
            level = commitment(config, "preflightCommitment")
            self._check_min_context_slot(config, self.node.slot_at(level))
            err: Any
            logs: list[str]
            if _signatures_verify(tx):
                err, logs, units = self.node.simulate(tx, level)
            else:  # agave 4.2: a simulation failure, -32002, that never ran
                err, logs, units = SIGNATURE_FAILURE, [], 0
            if err is not None:
                raise RpcError(
                    SIMULATION_FAILED,
                    f"Transaction simulation failed: {describe(err)}",
                    {
                        "err": err,
                        "logs": logs,
                        "unitsConsumed": units,
                        "accounts": None,
                        "returnData": None,
                    },
                )
        try:
            return self.node.process(tx).signature
        except BlockhashNotFound as e:
            # A cluster would drop it silently; saying so is kinder and as correct.
            raise RpcError(
                SIMULATION_FAILED,
                f"Transaction simulation failed: {describe('BlockhashNotFound')}",
                {
                    "err": "BlockhashNotFound",
                    "logs": [],
                    "unitsConsumed": 0,
                    "accounts": None,
                    "returnData": None,
                },
            ) from e

    def rpc_getSignatureStatuses(self, params: list[Any]) -> dict[str, Any]:
        """Each landed transaction as a cluster reports it: `confirmed` with the slots built
        on it as `confirmations`, then `finalized` with `confirmations` null."""
        statuses: list[dict[str, Any] | None] = []
        for sig in param(params, 0, "signatures"):
            rec = self.node.record(str(sig))
            if rec is None:
                statuses.append(None)
                continue
            final = self.node.is_finalized(rec)
            statuses.append(
                {
                    "slot": rec.slot,
                    "confirmations": None if final else self.node.slot - rec.slot,
                    "err": rec.err,
                    "status": {"Ok": None} if rec.err is None else {"Err": rec.err},
                    "confirmationStatus": FINALIZED if final else CONFIRMED,
                }
            )
        return self._context(statuses)

    def rpc_getTransaction(self, params: list[Any]) -> dict[str, Any] | None:
        sig = str(signature(param(params, 0, "signature")))
        config = param(params, 1, "config", {})
        if isinstance(config, str):  # legacy form: the encoding alone
            config = {"encoding": config}
        if not isinstance(config, dict):
            raise RpcError(INVALID_PARAMS, "Invalid params: config must be an object")
        level = check_commitment(config)
        encoding = config.get("encoding") or "json"
        if encoding not in _ENCODINGS:
            raise RpcError(
                INVALID_PARAMS,
                f"Invalid params: unknown variant `{encoding}`, expected one of "
                "`binary`, `base64`, `base58`, `json`, `jsonParsed`.",
            )
        max_version = config.get("maxSupportedTransactionVersion")
        if max_version is not None and (
            not isinstance(max_version, int) or isinstance(max_version, bool) or max_version < 0
        ):
            raise RpcError(INVALID_PARAMS, "Invalid params: maxSupportedTransactionVersion")
        rec = self.node.record(sig)
        if rec is None or not self.node.visible(rec, level):
            return None  # at finalized, a confirmed transaction is not there yet
        tx = VersionedTransaction.from_bytes(rec.raw)
        v0 = isinstance(tx.message, MessageV0)
        if v0 and max_version is None:
            raise RpcError(
                UNSUPPORTED_TRANSACTION_VERSION,
                "Transaction version (0) is not supported by the requesting client. "
                "Please try the request again with the following configuration parameter: "
                '"maxSupportedTransactionVersion": 0',
            )
        if encoding == "base64":
            transaction: Any = [base64.b64encode(rec.raw).decode(), "base64"]
        elif encoding == "base58":
            transaction = [base58.b58encode(rec.raw).decode(), "base58"]
        elif encoding == "binary":
            transaction = base58.b58encode(rec.raw).decode()
        else:
            transaction = _tx_json(tx, rec, encoding == "jsonParsed")
        out: dict[str, Any] = {
            "slot": rec.slot,
            "transaction": transaction,
            "meta": _meta(rec, encoding == "jsonParsed"),
        }
        if max_version is not None:  # older clients cannot take the field
            out["version"] = 0 if v0 else "legacy"
        out["blockTime"] = rec.block_time
        out["transactionIndex"] = rec.index
        return out

    def rpc_getSignaturesForAddress(self, params: list[Any]) -> list[dict[str, Any]]:
        """Signatures of the landed transactions naming `address` (failed ones too), newest
        first: at most `limit` (1..1000, default 1000), older than `before`, newer than
        `until`. A `before` or `until` the ledger does not hold is -32020, as from an agave
        node without long-term storage. At finalized (the default) only finalized
        transactions are listed, and a `before` or `until` not yet finalized is unknown; each
        carries its own confirmationStatus and its transactionIndex in its block."""
        address = str(pubkey(param(params, 0, "address")))
        config = param(params, 1, "config", {})
        if not isinstance(config, dict):
            raise RpcError(INVALID_PARAMS, "Invalid params: config must be an object")
        level = check_commitment(config)
        limit = config.get("limit")
        limit = MAX_SIGNATURES if limit is None else limit  # null is the default too
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 0:
            raise RpcError(INVALID_PARAMS, "Invalid params: limit must be an unsigned integer")
        if limit == 0 or limit > MAX_SIGNATURES:
            raise RpcError(INVALID_PARAMS, f"Invalid limit; max {MAX_SIGNATURES}")
        before = config.get("before")
        until = config.get("until")
        before = str(signature(before)) if before is not None else None
        until = str(signature(until)) if until is not None else None
        self._check_min_context_slot(config, self.node.slot_at(level))
        node, history = self.node, self.node.history
        newest, oldest = len(history) + 1, 0  # exclusive bounds on TxRecord.order
        for bound in (before, until):
            if bound is not None and (
                bound not in history or not node.visible(history[bound], level)
            ):
                raise RpcError(FILTER_TRANSACTION_NOT_FOUND, f"Transaction {bound} not found")
        if before is not None:
            newest = history[before].order
        if until is not None:
            oldest = history[until].order
        out: list[dict[str, Any]] = []
        for sig in reversed(node.by_address.get(address, [])):
            rec = history[sig]
            if rec.order >= newest or not node.visible(rec, level):
                continue
            if rec.order <= oldest or len(out) == limit:
                break
            status = FINALIZED if node.is_finalized(rec) else CONFIRMED
            out.append(
                {"signature": sig, "slot": rec.slot, "err": rec.err, "memo": rec.memo,
                 "blockTime": rec.block_time, "confirmationStatus": status,
                 "transactionIndex": rec.index}
            )  # fmt: skip
        return out

    def _check_min_context_slot(self, config: dict[str, Any], slot: int) -> None:
        """-32016 unless the slot read (that of the commitment level) is at least the
        config's minContextSlot."""
        wanted = config.get("minContextSlot")
        if wanted is not None and (not isinstance(wanted, int) or isinstance(wanted, bool)):
            raise RpcError(INVALID_PARAMS, "Invalid params: minContextSlot must be a slot")
        if wanted is not None and slot < wanted:
            raise RpcError(
                MIN_CONTEXT_SLOT_NOT_REACHED,
                "Minimum context slot has not been reached",
                {"contextSlot": slot},
            )


SIGNATURE_FAILURE = "SignatureFailure"  # TransactionError::SignatureFailure, as JSON


def _signatures_verify(tx: VersionedTransaction) -> bool:
    """Whether every signature verifies (agave's check before a simulation)."""
    return all(tx.verify_with_results())


def _status(err: Any) -> dict[str, Any]:
    return {"Ok": None} if err is None else {"Err": err}


def _compiled(ix: Any, stack_height: int | None) -> dict[str, Any]:
    return {
        "programIdIndex": ix.program_id_index,
        "accounts": list(bytes(ix.accounts)),
        "data": base58.b58encode(bytes(ix.data)).decode(),
        "stackHeight": stack_height,
    }


def _meta(rec: TxRecord, json_parsed: bool) -> dict[str, Any]:
    """UiTransactionStatusMeta: jsonParsed parses inner instructions and leaves out
    loadedAddresses; returnData only when the transaction set some."""
    keys = rec.account_keys
    inner = []
    for index, instructions in rec.inner_instructions:
        if json_parsed:
            shown = [
                parsed.instruction(keys[program], [keys[a] for a in accounts], data, height)
                for program, accounts, data, height in instructions
            ]
        else:
            shown = [
                {
                    "programIdIndex": program,
                    "accounts": accounts,
                    "data": base58.b58encode(data).decode(),
                    "stackHeight": height,
                }
                for program, accounts, data, height in instructions
            ]
        inner.append({"index": index, "instructions": shown})
    meta: dict[str, Any] = {
        "err": rec.err,
        "status": _status(rec.err),
        "fee": rec.fee,
        "preBalances": rec.pre_balances,
        "postBalances": rec.post_balances,
        "innerInstructions": inner,
        "logMessages": rec.logs,
        "preTokenBalances": rec.pre_token_balances,
        "postTokenBalances": rec.post_token_balances,
        "rewards": [],
    }
    if not json_parsed:
        meta["loadedAddresses"] = {"writable": [], "readonly": []}
    if rec.return_data is not None:
        program_id, data = rec.return_data
        meta["returnData"] = {
            "programId": program_id,
            "data": [base64.b64encode(data).decode(), "base64"],
        }
    meta["computeUnitsConsumed"] = rec.compute_units
    return meta


def _tx_json(tx: VersionedTransaction, rec: TxRecord, json_parsed: bool) -> dict[str, Any]:
    """The transaction as a UiTransaction: a raw message (json) or a parsed one (jsonParsed).
    Instructions of the message are at stack height 1."""
    msg = tx.message
    keys = [str(k) for k in msg.account_keys]
    message: dict[str, Any]
    if json_parsed:
        invoked = {ix.program_id_index for ix in msg.instructions}
        message = {
            "accountKeys": [
                {
                    "pubkey": key,
                    "writable": _is_writable(msg.header, invoked, i, keys),
                    "signer": i < msg.header.num_required_signatures,
                    "source": "transaction",
                }
                for i, key in enumerate(keys)
            ],
            "recentBlockhash": str(msg.recent_blockhash),
            "instructions": [
                parsed.instruction(
                    keys[ix.program_id_index],
                    [keys[a] for a in bytes(ix.accounts)],
                    bytes(ix.data),
                    TRANSACTION_LEVEL_STACK_HEIGHT,
                )
                for ix in msg.instructions
            ],
        }
    else:
        header = msg.header
        message = {
            "header": {
                "numRequiredSignatures": header.num_required_signatures,
                "numReadonlySignedAccounts": header.num_readonly_signed_accounts,
                "numReadonlyUnsignedAccounts": header.num_readonly_unsigned_accounts,
            },
            "accountKeys": keys,
            "recentBlockhash": str(msg.recent_blockhash),
            "instructions": [
                _compiled(ix, TRANSACTION_LEVEL_STACK_HEIGHT) for ix in msg.instructions
            ],
        }
    if isinstance(msg, MessageV0):
        message["addressTableLookups"] = [
            {
                "accountKey": str(lookup.account_key),
                "writableIndexes": list(bytes(lookup.writable_indexes)),
                "readonlyIndexes": list(bytes(lookup.readonly_indexes)),
            }
            for lookup in msg.address_table_lookups
        ]
    return {"signatures": [str(s) for s in tx.signatures], "message": message}


def _is_writable(header: MessageHeader, invoked: set[int], i: int, keys: list[str]) -> bool:
    """Writable as the runtime locks it: by the header, less reserved accounts (builtins,
    sysvars) and invoked programs (unless the upgradeable loader is in the transaction)."""
    signed = header.num_required_signatures
    if i < signed:
        writable = i < signed - header.num_readonly_signed_accounts
    else:
        writable = i - signed < len(keys) - signed - header.num_readonly_unsigned_accounts
    if not writable or keys[i] in RESERVED_ACCOUNT_KEYS:
        return False
    return i not in invoked or UPGRADEABLE_LOADER in keys


def _with_blockhash(tx: VersionedTransaction, blockhash: Hash) -> VersionedTransaction:
    """`tx` under `blockhash` (simulateTransaction's replaceRecentBlockhash), its signatures
    kept as they were (they no longer match: simulation does not check them)."""
    msg = tx.message
    replaced: Message | MessageV0
    if isinstance(msg, MessageV0):
        replaced = MessageV0(
            msg.header, msg.account_keys, blockhash, msg.instructions, msg.address_table_lookups
        )
    else:
        replaced = Message.new_with_compiled_instructions(
            msg.header.num_required_signatures,
            msg.header.num_readonly_signed_accounts,
            msg.header.num_readonly_unsigned_accounts,
            msg.account_keys,
            blockhash,
            msg.instructions,
        )
    return VersionedTransaction.populate(replaced, tx.signatures)
