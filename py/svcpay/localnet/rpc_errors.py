"""JSON-RPC error codes and parameter helpers shared by the drop-in's method modules."""

from __future__ import annotations

from typing import Any

import base58
from solders.pubkey import Pubkey
from solders.signature import Signature

from svcpay.localnet.node import COMMITMENTS, FINALIZED, PROCESSED

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


def commitment(config: dict[str, Any]) -> str:
    """The `commitment` of a method's config object, as Agave reads it: `finalized` when
    absent or null. The levels deprecated in 1.5 (recent, single, singleGossip, root, max)
    left the RPC with Agave 2.0, which refuses them like any unknown string."""
    level = config.get("commitment")
    if level is None:
        return FINALIZED
    if isinstance(level, str) and level in COMMITMENTS:
        return level
    got = (
        f"unknown variant `{level}`" if isinstance(level, str) else f"invalid type: {_kind(level)}"
    )
    raise RpcError(
        INVALID_PARAMS,
        f"Invalid params: {got}, expected one of `processed`, `confirmed`, `finalized`.",
    )


def check_commitment(config: dict[str, Any]) -> str:
    """History methods answer only at `confirmed` or `finalized` (the default): the level."""
    level = commitment(config)
    if level == PROCESSED:
        raise RpcError(INVALID_PARAMS, "Method does not support commitment below `confirmed`")
    return level


def _kind(value: Any) -> str:
    """A JSON value as serde names it in an "invalid type" error."""
    if isinstance(value, bool):
        return f"boolean `{str(value).lower()}`"
    if isinstance(value, int):
        return f"integer `{value}`"
    if isinstance(value, float):
        return f"floating point `{value}`"
    return "map" if isinstance(value, dict) else "sequence"
