"""JSON-RPC error codes and parameter helpers shared by the drop-in's method modules."""

from __future__ import annotations

from typing import Any

from solders.pubkey import Pubkey

INVALID_PARAMS = -32602
METHOD_NOT_FOUND = -32601
SIMULATION_FAILED = -32002


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


def pubkey(text: Any) -> Pubkey:
    try:
        return Pubkey.from_string(str(text))
    except ValueError as e:
        raise RpcError(INVALID_PARAMS, f"Invalid param: {text!r} is not a public key") from e
