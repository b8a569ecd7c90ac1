"""JSON-RPC error codes and parameter helpers shared by the drop-in's method modules."""

from __future__ import annotations

from typing import Any

import base58
from solders.pubkey import Pubkey
from solders.signature import Signature

INVALID_PARAMS = -32602
METHOD_NOT_FOUND = -32601
SIMULATION_FAILED = -32002
UNSUPPORTED_TRANSACTION_VERSION = -32015
MIN_CONTEXT_SLOT_NOT_REACHED = -32016


class RpcError(Exception):
    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code, self.message, self.data = code, message, data


def param(params: list[Any], i: int, name: str, default: Any = ...) -> Any:
    """Positional parameter `i`, or `default`; missing without a default is -32602."""
    if i < len(params) and params[i] is not None:
        return params[i]
    if default is ...:
        raise RpcError(INVALID_PARAMS, f"missing parameter {i}: {name}")
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


def check_commitment(config: dict[str, Any]) -> None:
    """History methods answer only at `confirmed` or `finalized` (the default)."""
    commitment = config.get("commitment") or "finalized"
    if commitment == "processed":
        raise RpcError(INVALID_PARAMS, "Method does not support commitment below `confirmed`")
    if commitment not in ("confirmed", "finalized"):
        raise RpcError(
            INVALID_PARAMS,
            f"Invalid params: unknown variant `{commitment}`, "
            "expected one of `processed`, `confirmed`, `finalized`",
        )
