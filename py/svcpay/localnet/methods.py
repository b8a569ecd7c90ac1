"""JSON-RPC methods of the drop-in validator, with the Solana RPC's shapes and error codes.

Each method takes the request's `params` list and returns the `result` value, or raises
RpcError; how many parameters it takes is checked first, with agave's errors (ARITY). Only
what solana-py, svcpay and the payment SDKs use is implemented (token accounts in
`jsonParsed` included: token_json.py); any other method gets JSON-RPC's "method not found".

Reads honour `commitment` (see node.py): `processed` and `confirmed` see the tip, `finalized`
(the default, as on a cluster) sees the state FINALITY_SLOTS behind it, and `context.slot` is
the slot of the level read.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any

import base58
from solders.account import Account
from solders.pubkey import Pubkey

from svcpay.localnet.fees import MAX_ACCOUNTS
from svcpay.localnet.methods_tx import TransactionMethods
from svcpay.localnet.node import RECENT_BLOCKHASHES, Node
from svcpay.localnet.parsed import TOKEN
from svcpay.localnet.records import TimeTravelError
from svcpay.localnet.rpc_errors import (
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    RpcError,
    commitment,
    param,
    pubkey,
)
from svcpay.localnet.token_json import (
    NATIVE_MINT,
    PROGRAM_NAMES,
    MintInfo,
    mint_info,
    parse_token,
    token_account_fields,
    ui_amount,
    unpacks_as_account,
)

VERSION = {"solana-core": "3.0.0-svcpay-localnet", "feature-set": 0}
# (required, total) positional parameters of each method, as agave declares them
ARITY = {
    **dict.fromkeys(("getHealth", "getVersion", "getGenesisHash"), (0, 0)),
    **dict.fromkeys(("getSlot", "getBlockHeight", "getEpochInfo", "getLatestBlockhash"), (0, 1)),
    "requestAirdrop": (2, 3),
    "surfnet_timeTravel": (1, 1),
    "getTokenAccountsByOwner": (2, 3),
}

__all__ = ["Methods", "RpcError"]


class Methods(TransactionMethods):
    def __init__(self, node: Node) -> None:
        self.node = node
        self.table: dict[str, Callable[[list[Any]], Any]] = {
            name.removeprefix("rpc_"): getattr(self, name)
            for name in dir(self)
            if name.startswith("rpc_")
        }

    def call(self, method: str, params: list[Any] | dict[str, Any] | None) -> Any:
        """Runs `method` with the request's `params` (None: absent or null)."""
        fn = self.table.get(method)
        if fn is None:
            raise RpcError(METHOD_NOT_FOUND, "Method not found")
        args = _positional(params, *ARITY.get(method, (1, 2)))
        with self.node.lock:
            self.node.tick()  # slots follow the wall clock, read or write
            return fn(args)

    def _context(self, value: Any, slot: int | None = None) -> dict[str, Any]:
        """An RpcResponse: `value` read at `slot` (default: the tip)."""
        return {
            "context": {
                "apiVersion": VERSION["solana-core"],
                "slot": self.node.slot if slot is None else slot,
            },
            "value": value,
        }

    def _level(self, params: list[Any], i: int) -> tuple[dict[str, Any], str]:
        """The config object at params[i] (optional) and the commitment it reads at, after
        checking its minContextSlot against that level's slot."""
        config = param(params, i, "config", {})
        if not isinstance(config, dict):
            raise RpcError(INVALID_PARAMS, "Invalid params: config must be an object")
        level = commitment(config)
        self._check_min_context_slot(config, self.node.slot_at(level))
        return config, level

    # -- node ---------------------------------------------------------------------------
    def rpc_getHealth(self, params: list[Any]) -> str:
        return "ok"

    def rpc_getVersion(self, params: list[Any]) -> dict[str, Any]:
        return VERSION

    def rpc_getSlot(self, params: list[Any]) -> int:
        _, level = self._level(params, 0)
        return self.node.slot_at(level)

    def rpc_getBlockHeight(self, params: list[Any]) -> int:
        return self.rpc_getSlot(params)

    def rpc_getEpochInfo(self, params: list[Any]) -> dict[str, int]:
        _, level = self._level(params, 0)
        return self.node.epoch_info(level)

    def rpc_getGenesisHash(self, params: list[Any]) -> str:
        return str(Pubkey.default())

    def rpc_getLatestBlockhash(self, params: list[Any]) -> dict[str, Any]:
        _, level = self._level(params, 0)
        blockhash, slot = self.node.blockhash_at(level)
        value = {"blockhash": blockhash, "lastValidBlockHeight": slot + RECENT_BLOCKHASHES}
        return self._context(value, self.node.slot_at(level))

    def rpc_isBlockhashValid(self, params: list[Any]) -> dict[str, Any]:
        blockhash = str(param(params, 0, "blockhash"))
        _, level = self._level(params, 1)
        valid = self.node.blockhash_is_valid(blockhash, level)
        return self._context(valid, self.node.slot_at(level))

    def rpc_getMinimumBalanceForRentExemption(self, params: list[Any]) -> int:
        size = param(params, 0, "dataLength")
        if not isinstance(size, int) or size < 0:
            raise RpcError(
                INVALID_PARAMS, "Invalid param: dataLength must be a non-negative integer"
            )
        return int(self.node.svm.minimum_balance_for_rent_exemption(size))

    def rpc_getFeeForMessage(self, params: list[Any]) -> dict[str, Any]:
        _, level = self._level(params, 1)
        return self._context(5000, self.node.slot_at(level))

    def rpc_getRecentPrioritizationFees(self, params: list[Any]) -> list[dict[str, int]]:
        """Per slot of the last 150 with transactions, the least compute-unit price paid,
        raised to the least paid while write-locking each given account (localnet.fees)."""
        accounts = param(params, 0, "lockedWritableAccounts", [])
        if not isinstance(accounts, list):
            raise RpcError(INVALID_PARAMS, "Invalid params: expected an array of addresses")
        if len(accounts) > MAX_ACCOUNTS:
            raise RpcError(INVALID_PARAMS, f"Too many inputs provided; max {MAX_ACCOUNTS}")
        keys = [str(pubkey(a)) for a in accounts]
        return self.node.fees.recent(keys, self.node.slot_at("processed"))

    # -- time travel (surfpool's cheatcode) -----------------------------------------------
    def rpc_surfnet_timeTravel(self, params: list[Any]) -> dict[str, int]:
        config = param(params, 0, "config")
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
    def _account_json(
        self, acct: Account | None, config: dict[str, Any], level: str
    ) -> dict[str, Any] | None:
        if acct is None or (acct.lamports == 0 and not acct.data):
            return None
        encoding = config.get("encoding", "base64")
        data = bytes(acct.data)
        if encoding == "jsonParsed" and str(acct.owner) in PROGRAM_NAMES:
            # agave parses a token program's account or answers all of it in base64: it
            # ignores dataSlice either way
            parsed = parse_token(str(acct.owner), data, lambda mint: self._mint_info(mint, level))
            encoded: Any = parsed or [base64.b64encode(data).decode(), "base64"]
        else:
            if (s := config.get("dataSlice")) is not None:
                offset, length = (
                    (s.get("offset"), s.get("length")) if isinstance(s, dict) else (None, None)
                )
                if not (
                    isinstance(offset, int)
                    and isinstance(length, int)
                    and offset >= 0
                    and length >= 0
                ):
                    raise RpcError(
                        INVALID_PARAMS, "Invalid param: dataSlice needs offset and length >= 0"
                    )
                data = data[offset : offset + length]
            if encoding in ("base64", "jsonParsed"):
                encoded = [base64.b64encode(data).decode(), "base64"]
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

    def _mint_info(self, mint: bytes, level: str) -> MintInfo | None:
        """What agave's token parsing reads of a mint: its decimals and UI-amount configs at
        the cluster's unix time (None: no such mint, or not one)."""
        address = Pubkey.from_bytes(mint)
        if str(address) == NATIVE_MINT:
            return MintInfo(9)
        acct = self.node.get_account(address, level)
        return None if acct is None else mint_info(bytes(acct.data), self._unix_timestamp())

    def _unix_timestamp(self) -> int:
        return int(self.node.svm.get_clock().unix_timestamp)

    def rpc_getAccountInfo(self, params: list[Any]) -> dict[str, Any]:
        address = pubkey(param(params, 0, "pubkey"))
        config, level = self._level(params, 1)
        value = self._account_json(self.node.get_account(address, level), config, level)
        return self._context(value, self.node.slot_at(level))

    def rpc_getMultipleAccounts(self, params: list[Any]) -> dict[str, Any]:
        addresses = [pubkey(a) for a in param(params, 0, "pubkeys")]
        config, level = self._level(params, 1)
        value = [
            self._account_json(self.node.get_account(a, level), config, level) for a in addresses
        ]
        return self._context(value, self.node.slot_at(level))

    def rpc_getBalance(self, params: list[Any]) -> dict[str, Any]:
        address = pubkey(param(params, 0, "pubkey"))
        _, level = self._level(params, 1)
        acct = self.node.get_account(address, level)
        return self._context(acct.lamports if acct is not None else 0, self.node.slot_at(level))

    def rpc_getProgramAccounts(self, params: list[Any]) -> Any:
        program = pubkey(param(params, 0, "programId"))
        config, level = self._level(params, 1)
        filters = config.get("filters", [])
        out = []
        for address, acct in self.node.program_accounts(program, level):
            data = bytes(acct.data)
            if all(_matches(f, data) for f in filters):
                account = self._account_json(acct, config, level)
                out.append({"pubkey": str(address), "account": account})
        if str(program) in PROGRAM_NAMES:
            out = _parsed_only(out, config)
        return self._context(out, self.node.slot_at(level)) if config.get("withContext") else out

    def rpc_getTokenAccountBalance(self, params: list[Any]) -> dict[str, Any]:
        address = pubkey(param(params, 0, "pubkey"))
        config = param(params, 1, "config", {})
        if not isinstance(config, dict):
            raise RpcError(INVALID_PARAMS, "Invalid params: config must be an object")
        level = commitment(config)  # its only option: no minContextSlot here
        acct = self.node.get_account(address, level)
        if acct is None:
            raise RpcError(INVALID_PARAMS, "Invalid param: could not find account")
        data = bytes(acct.data)  # agave unpacks it whole (COption tags, the account type)
        fields = token_account_fields(str(acct.owner), data)
        if fields is None or not unpacks_as_account(data):
            raise RpcError(INVALID_PARAMS, "Invalid param: not a Token account")
        mint, _, amount = fields
        _, info = self._mint(Pubkey.from_bytes(mint), level)
        return self._context(ui_amount(amount, info), self.node.slot_at(level))

    def _mint(self, mint: Pubkey, level: str) -> tuple[str, MintInfo]:
        """(token program, MintInfo) of `mint`, refused as agave refuses a bad one."""
        if str(mint) == NATIVE_MINT:
            return TOKEN, MintInfo(9)
        acct = self.node.get_account(mint, level)
        if acct is None:
            raise RpcError(INVALID_PARAMS, "Invalid param: could not find mint")
        info = mint_info(bytes(acct.data), self._unix_timestamp())
        if info is None:
            raise RpcError(INVALID_PARAMS, "Invalid param: Token mint could not be unpacked")
        return str(acct.owner), info

    def rpc_getTokenAccountsByOwner(self, params: list[Any]) -> dict[str, Any]:
        owner = pubkey(param(params, 0, "pubkey"))
        which = param(params, 1, "filter")
        if not isinstance(which, dict) or len(which) != 1 or not {"mint", "programId"} & set(which):
            raise RpcError(INVALID_PARAMS, "Invalid params: expected {mint} or {programId}")
        config, level = self._level(params, 2)
        if "mint" in which:
            mint: Pubkey | None = pubkey(which["mint"])
            assert mint is not None
            program, _ = self._mint(mint, level)
            if program not in PROGRAM_NAMES:
                raise RpcError(INVALID_PARAMS, "Invalid param: not a Token mint")
        else:
            mint, program = None, str(pubkey(which["programId"]))
            if program not in PROGRAM_NAMES:
                raise RpcError(INVALID_PARAMS, "Invalid param: unrecognized Token program id")
        found = []
        for address, acct in self.node.program_accounts(Pubkey.from_string(program), level):
            fields = token_account_fields(program, bytes(acct.data))
            if fields is None or fields[1] != bytes(owner):
                continue
            if mint is None or fields[0] == bytes(mint):
                found.append((bytes(address), address, acct))
        found.sort(key=lambda row: row[0])
        value = [
            {"pubkey": str(address), "account": self._account_json(acct, config, level)}
            for _, address, acct in found
        ]
        return self._context(_parsed_only(value, config), self.node.slot_at(level))

    def rpc_requestAirdrop(self, params: list[Any]) -> str:
        address = pubkey(param(params, 0, "pubkey"))
        lamports = param(params, 1, "lamports")
        if not isinstance(lamports, int) or lamports <= 0:
            raise RpcError(INVALID_PARAMS, "Invalid param: lamports must be a positive integer")
        return self.node.airdrop(address, lamports)


def _parsed_only(keyed: list[dict[str, Any]], config: dict[str, Any]) -> list[dict[str, Any]]:
    """A token program's accounts as agave lists them under jsonParsed: those it parses only
    (get_parsed_token_accounts drops the rest)."""
    if config.get("encoding") != "jsonParsed":
        return keyed
    return [k for k in keyed if isinstance(k["account"]["data"], dict)]


def _positional(params: list[Any] | dict[str, Any] | None, required: int, total: int) -> list[Any]:
    """The params as a list, refused as agave's (jsonrpc-derive's) checks refuse them."""
    if total == 0:
        if isinstance(params, dict) or params:  # absent, null or [] only
            raise RpcError(
                INVALID_PARAMS, "Invalid parameters: No parameters were expected", _debug(params)
            )
        return []
    if isinstance(params, dict):
        raise RpcError(INVALID_PARAMS, "`params` should be an array")
    args = params or []
    if len(args) < required:
        raise RpcError(INVALID_PARAMS, f"`params` should have at least {required} argument(s)")
    if len(args) > total:
        raise RpcError(
            INVALID_PARAMS,
            f"Invalid parameters: Expected from {required} to {total} parameters.",
            f'"Got: {len(args)}"',
        )
    return args


def _debug(params: list[Any] | dict[str, Any]) -> str:
    """Params as Rust's Debug prints jsonrpc-core's Params (agave's error data)."""
    if isinstance(params, list):
        return f"Array([{', '.join(_debug_value(v) for v in params)}])"
    return (
        "Map({" + ", ".join(f"{json.dumps(k)}: {_debug_value(v)}" for k, v in params.items()) + "})"
    )


def _debug_value(value: Any) -> str:
    """A JSON value as Rust's Debug prints serde_json's Value."""
    if value is None:
        return "Null"
    if isinstance(value, bool):
        return f"Bool({str(value).lower()})"
    if isinstance(value, int | float):
        return f"Number({value})"
    if isinstance(value, str):
        return f"String({json.dumps(value)})"
    if isinstance(value, list):
        return f"Array [{', '.join(_debug_value(v) for v in value)}]"
    items = ", ".join(f"{json.dumps(k)}: {_debug_value(v)}" for k, v in value.items())
    return f"Object {{{items}}}"


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
