"""Transaction methods of the drop-in validator: send, simulate, statuses, history."""

from __future__ import annotations

import base64
from typing import Any

import base58
from solders.transaction import VersionedTransaction

from svcpay.localnet.node import BlockhashNotFound, Node, TxRecord
from svcpay.localnet.rpc_errors import INVALID_PARAMS, SIMULATION_FAILED, RpcError, param, pubkey


class TransactionMethods:
    node: Node

    def _context(self, value: Any) -> dict[str, Any]:
        raise NotImplementedError

    # -- transactions -------------------------------------------------------------------
    def _decode_tx(self, params: list[Any]) -> tuple[VersionedTransaction, dict[str, Any]]:
        config = param(params, 1, "config", {})
        encoding = config.get("encoding", "base58")
        try:
            raw = (base64.b64decode if encoding == "base64" else base58.b58decode)(
                param(params, 0, "transaction")
            )
            return VersionedTransaction.from_bytes(raw), config
        except (ValueError, TypeError) as e:
            raise RpcError(INVALID_PARAMS, f"invalid transaction: {e}") from e

    def rpc_simulateTransaction(self, params: list[Any]) -> dict[str, Any]:
        tx, _ = self._decode_tx(params)
        err, logs, units = self.node.simulate(tx)
        value = {
            "err": err,
            "logs": logs,
            "unitsConsumed": units,
            "accounts": None,
            "returnData": None,
        }
        return self._context(value)

    def rpc_sendTransaction(self, params: list[Any]) -> str:
        tx, config = self._decode_tx(params)
        if not config.get("skipPreflight", False):
            err, logs, units = self.node.simulate(tx)
            if err is not None:
                raise RpcError(
                    SIMULATION_FAILED,
                    f"Transaction simulation failed: {_describe(err)}",
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
                "Transaction simulation failed: Blockhash not found",
                {
                    "err": "BlockhashNotFound",
                    "logs": [],
                    "unitsConsumed": 0,
                    "accounts": None,
                    "returnData": None,
                },
            ) from e

    def rpc_getSignatureStatuses(self, params: list[Any]) -> dict[str, Any]:
        statuses = []
        for sig in param(params, 0, "signatures"):
            rec = self.node.record(str(sig))
            statuses.append(
                None
                if rec is None
                else {
                    "slot": rec.slot,
                    "confirmations": None,
                    "err": rec.err,
                    "status": {"Ok": None} if rec.err is None else {"Err": rec.err},
                    "confirmationStatus": "finalized",
                }
            )
        return self._context(statuses)

    def rpc_getTransaction(self, params: list[Any]) -> dict[str, Any] | None:
        rec = self.node.record(str(param(params, 0, "signature")))
        if rec is None:
            return None
        config = param(params, 1, "config", {})
        if isinstance(config, str):  # legacy form: the encoding alone
            config = {"encoding": config}
        encoding = config.get("encoding", "json")
        if encoding == "base64":
            transaction: Any = [base64.b64encode(rec.raw).decode(), "base64"]
        elif encoding in ("json", "jsonParsed"):
            transaction = _tx_json(rec)
        else:
            raise RpcError(INVALID_PARAMS, f"Invalid param: unsupported encoding {encoding!r}")
        return {
            "slot": rec.slot,
            "blockTime": rec.block_time,
            "version": 0 if rec.raw and rec.raw[_message_start(rec.raw)] & 0x80 else "legacy",
            "transaction": transaction,
            "meta": _meta(rec),
        }

    def rpc_getSignaturesForAddress(self, params: list[Any]) -> list[dict[str, Any]]:
        address = str(pubkey(param(params, 0, "address")))
        config = param(params, 1, "config", {})
        limit = min(int(config.get("limit", 1000)), 1000)
        sigs = list(reversed(self.node.by_address.get(address, [])))
        if before := config.get("before"):
            sigs = sigs[sigs.index(before) + 1 :] if before in sigs else []
        if until := config.get("until"):
            sigs = sigs[: sigs.index(until)] if until in sigs else sigs
        out = []
        for sig in sigs[:limit]:
            rec = self.node.history[sig]
            out.append(
                {"signature": sig, "slot": rec.slot, "err": rec.err, "memo": None,
                 "blockTime": rec.block_time, "confirmationStatus": "finalized"}
            )  # fmt: skip
        return out


def _describe(err: Any) -> str:
    if isinstance(err, dict) and "InstructionError" in err:
        index, inner = err["InstructionError"]
        if isinstance(inner, dict) and "Custom" in inner:
            return (
                f"Error processing Instruction {index}: custom program error: {inner['Custom']:#x}"
            )
        return f"Error processing Instruction {index}: {inner}"
    return str(err)


def _message_start(raw: bytes) -> int:
    """Offset of the message in a wire transaction (after the compact-u16 signature count)."""
    n, i, shift = 0, 0, 0
    while True:
        b = raw[i]
        n |= (b & 0x7F) << shift
        i += 1
        if not b & 0x80:
            return i + 64 * n
        shift += 7


def _meta(rec: TxRecord) -> dict[str, Any]:
    return {
        "err": rec.err,
        "status": {"Ok": None} if rec.err is None else {"Err": rec.err},
        "fee": rec.fee,
        "preBalances": rec.pre_balances,
        "postBalances": rec.post_balances,
        "innerInstructions": [],
        "logMessages": rec.logs,
        "preTokenBalances": [],
        "postTokenBalances": [],
        "rewards": [],
        "loadedAddresses": {"writable": [], "readonly": []},
        "computeUnitsConsumed": rec.compute_units,
    }


def _tx_json(rec: TxRecord) -> dict[str, Any]:
    tx = VersionedTransaction.from_bytes(rec.raw)
    msg = tx.message
    header = msg.header
    return {
        "signatures": [str(s) for s in tx.signatures],
        "message": {
            "accountKeys": [str(k) for k in msg.account_keys],
            "header": {
                "numRequiredSignatures": header.num_required_signatures,
                "numReadonlySignedAccounts": header.num_readonly_signed_accounts,
                "numReadonlyUnsignedAccounts": header.num_readonly_unsigned_accounts,
            },
            "recentBlockhash": str(msg.recent_blockhash),
            "instructions": [
                {
                    "programIdIndex": ix.program_id_index,
                    "accounts": list(bytes(ix.accounts)),
                    "data": base58.b58encode(bytes(ix.data)).decode(),
                    "stackHeight": None,
                }
                for ix in msg.instructions
            ],
        },
    }
