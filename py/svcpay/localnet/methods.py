"""JSON-RPC methods of the drop-in validator, with the Solana RPC's shapes and error codes.

Each method takes the request's `params` list and returns the `result` value, or raises
RpcError. Only what solana-py, anchorpy and svcpay use is implemented; any other method gets
JSON-RPC's "method not found".
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

import base58
from solders.pubkey import Pubkey
from solders.transaction import VersionedTransaction

from svcpay.localnet.node import BlockhashNotFound, Node, TimeTravelError, TxRecord

INVALID_PARAMS = -32602
METHOD_NOT_FOUND = -32601
SIMULATION_FAILED = -32002
TOKEN_PROGRAM = "TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA"
VERSION = {"solana-core": "3.0.0-svcpay-localnet", "feature-set": 0}


class RpcError(Exception):
    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code, self.message, self.data = code, message, data


def _param(params: list[Any], i: int, name: str, default: Any = ...) -> Any:
    if i < len(params) and params[i] is not None:
        return params[i]
    if default is ...:
        raise RpcError(INVALID_PARAMS, f"missing parameter {i}: {name}")
    return default


def _pubkey(text: Any) -> Pubkey:
    try:
        return Pubkey.from_string(str(text))
    except ValueError as e:
        raise RpcError(INVALID_PARAMS, f"Invalid param: {text!r} is not a public key") from e


class Methods:
    def __init__(self, node: Node) -> None:
        self.node = node
        self.table: dict[str, Callable[[list[Any]], Any]] = {
            name.removeprefix("rpc_"): getattr(self, name)
            for name in dir(self)
            if name.startswith("rpc_")
        }

    def call(self, method: str, params: list[Any]) -> Any:
        fn = self.table.get(method)
        if fn is None:
            raise RpcError(METHOD_NOT_FOUND, "Method not found")
        with self.node.lock:
            return fn(params)

    def _context(self, value: Any) -> dict[str, Any]:
        return {
            "context": {"apiVersion": VERSION["solana-core"], "slot": self.node.slot},
            "value": value,
        }

    # -- node ---------------------------------------------------------------------------
    def rpc_getHealth(self, params: list[Any]) -> str:
        return "ok"

    def rpc_getVersion(self, params: list[Any]) -> dict[str, Any]:
        return VERSION

    def rpc_getSlot(self, params: list[Any]) -> int:
        self.node.tick()
        return self.node.slot

    def rpc_getBlockHeight(self, params: list[Any]) -> int:
        return self.rpc_getSlot(params)

    def rpc_getEpochInfo(self, params: list[Any]) -> dict[str, int]:
        self.node.tick()
        return self.node.epoch_info()

    def rpc_getGenesisHash(self, params: list[Any]) -> str:
        return str(Pubkey.default())

    def rpc_getLatestBlockhash(self, params: list[Any]) -> dict[str, Any]:
        self.node.tick()
        value = {
            "blockhash": str(self.node.blockhash()),
            "lastValidBlockHeight": self.node.slot + 150,
        }
        return self._context(value)

    def rpc_isBlockhashValid(self, params: list[Any]) -> dict[str, Any]:
        return self._context(self.node.blockhash_is_recent(str(_param(params, 0, "blockhash"))))

    def rpc_getMinimumBalanceForRentExemption(self, params: list[Any]) -> int:
        size = _param(params, 0, "dataLength")
        if not isinstance(size, int) or size < 0:
            raise RpcError(
                INVALID_PARAMS, "Invalid param: dataLength must be a non-negative integer"
            )
        return int(self.node.svm.minimum_balance_for_rent_exemption(size))

    def rpc_getFeeForMessage(self, params: list[Any]) -> dict[str, Any]:
        return self._context(5000)

    # -- time travel (surfpool's cheatcode) -----------------------------------------------
    def rpc_surfnet_timeTravel(self, params: list[Any]) -> dict[str, int]:
        config = _param(params, 0, "config")
        if not isinstance(config, dict):
            raise RpcError(
                INVALID_PARAMS,
                "Invalid param: expected {absoluteTimestamp|absoluteSlot|absoluteEpoch: n}",
            )
        try:
            self.node.time_travel(config)
        except (TimeTravelError, ValueError) as e:
            raise RpcError(INVALID_PARAMS, str(e)) from e
        return self.node.epoch_info()

    # -- accounts -----------------------------------------------------------------------
    def _account_json(self, address: Pubkey, config: dict[str, Any]) -> dict[str, Any] | None:
        acct = self.node.svm.get_account(address)
        if acct is None or (acct.lamports == 0 and not acct.data):
            return None
        encoding = config.get("encoding", "base64")
        data = bytes(acct.data)
        if (s := config.get("dataSlice")) is not None:
            offset, length = (
                (s.get("offset"), s.get("length")) if isinstance(s, dict) else (None, None)
            )
            if not (
                isinstance(offset, int) and isinstance(length, int) and offset >= 0 and length >= 0
            ):
                raise RpcError(
                    INVALID_PARAMS, "Invalid param: dataSlice needs offset and length >= 0"
                )
            data = data[offset : offset + length]
        if encoding in ("base64", "jsonParsed"):
            encoded: Any = [base64.b64encode(data).decode(), "base64"]
        elif encoding == "base58":
            encoded = [base58.b58encode(data).decode(), "base58"]
        else:
            raise RpcError(INVALID_PARAMS, f"Invalid param: unsupported encoding {encoding!r}")
        return {
            "data": encoded,
            "executable": acct.executable,
            "lamports": acct.lamports,
            "owner": str(acct.owner),
            "rentEpoch": acct.rent_epoch,
            "space": len(acct.data),
        }

    def rpc_getAccountInfo(self, params: list[Any]) -> dict[str, Any]:
        address = _pubkey(_param(params, 0, "pubkey"))
        return self._context(self._account_json(address, _param(params, 1, "config", {})))

    def rpc_getMultipleAccounts(self, params: list[Any]) -> dict[str, Any]:
        addresses = [_pubkey(a) for a in _param(params, 0, "pubkeys")]
        config = _param(params, 1, "config", {})
        return self._context([self._account_json(a, config) for a in addresses])

    def rpc_getBalance(self, params: list[Any]) -> dict[str, Any]:
        return self._context(self.node.svm.get_balance(_pubkey(_param(params, 0, "pubkey"))) or 0)

    def rpc_getProgramAccounts(self, params: list[Any]) -> Any:
        program = _pubkey(_param(params, 0, "programId"))
        config = _param(params, 1, "config", {})
        filters = config.get("filters", [])
        out = []
        for address, acct in self.node.svm.get_program_accounts(program):
            data = bytes(acct.data)
            if all(_matches(f, data) for f in filters):
                out.append({"pubkey": str(address), "account": self._account_json(address, config)})
        return self._context(out) if config.get("withContext") else out

    def rpc_getTokenAccountBalance(self, params: list[Any]) -> dict[str, Any]:
        address = _pubkey(_param(params, 0, "pubkey"))
        acct = self.node.svm.get_account(address)
        if acct is None or str(acct.owner) != TOKEN_PROGRAM or len(acct.data) != 165:
            raise RpcError(INVALID_PARAMS, "Invalid param: not a Token account")
        data = bytes(acct.data)
        mint = self.node.svm.get_account(Pubkey.from_bytes(data[:32]))
        decimals = bytes(mint.data)[44] if mint is not None else 0
        amount = int.from_bytes(data[64:72], "little")
        ui = amount / 10**decimals
        ui_string = (
            f"{amount / 10**decimals:.{decimals}f}".rstrip("0").rstrip(".")
            if decimals
            else str(amount)
        )
        return self._context(
            {
                "amount": str(amount),
                "decimals": decimals,
                "uiAmount": ui,
                "uiAmountString": ui_string,
            }
        )

    def rpc_requestAirdrop(self, params: list[Any]) -> str:
        address = _pubkey(_param(params, 0, "pubkey"))
        lamports = _param(params, 1, "lamports")
        if not isinstance(lamports, int) or lamports <= 0:
            raise RpcError(INVALID_PARAMS, "Invalid param: lamports must be a positive integer")
        return self.node.airdrop(address, lamports)

    # -- transactions -------------------------------------------------------------------
    def _decode_tx(self, params: list[Any]) -> tuple[VersionedTransaction, dict[str, Any]]:
        config = _param(params, 1, "config", {})
        encoding = config.get("encoding", "base58")
        try:
            raw = (base64.b64decode if encoding == "base64" else base58.b58decode)(
                _param(params, 0, "transaction")
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
        for sig in _param(params, 0, "signatures"):
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
        rec = self.node.record(str(_param(params, 0, "signature")))
        if rec is None:
            return None
        config = _param(params, 1, "config", {})
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
        address = str(_pubkey(_param(params, 0, "address")))
        config = _param(params, 1, "config", {})
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


def _matches(flt: dict[str, Any], data: bytes) -> bool:
    if "dataSize" in flt:
        return len(data) == int(flt["dataSize"])
    if "memcmp" in flt:
        m = flt["memcmp"]
        raw = m["bytes"]
        want = base64.b64decode(raw) if m.get("encoding") == "base64" else base58.b58decode(raw)
        off = int(m["offset"])
        return data[off : off + len(want)] == want
    raise RpcError(INVALID_PARAMS, f"Invalid param: unsupported filter {flt}")


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
