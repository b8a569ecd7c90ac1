"""Telling "the RPC node cannot be reached" from every other failure, for the parts that
degrade while it is away (the facilitator's loops, the gate's subscription reads). A 429 or
a 5xx that outlasted svcpay.rpc's retries counts as unreachable too: the same request
succeeds later (a 503 with Retry-After), it is neither a bug nor the node's answer."""

from __future__ import annotations

import httpx
from solana.exceptions import SolanaRpcException

# solana-py's transport (httpx2 since 0.41) raises its own classes with httpx's names.
TRANSPORT_ERRORS = frozenset(
    {"ConnectError", "ConnectTimeout", "ReadTimeout", "ReadError", "WriteError", "PoolTimeout",
     "RemoteProtocolError", "NetworkError", "TimeoutException", "TransportError"}
)  # fmt: skip


def rpc_unreachable(e: BaseException) -> str | None:
    """Why the RPC node could not be reached ("ConnectError: ..."), or None when `e` is
    something else (a bug, or an answer the node gave)."""
    cause = (e.__cause__ or e.__context__) if isinstance(e, SolanaRpcException) else e
    if isinstance(cause, httpx.TransportError | OSError | TimeoutError) or (
        cause is not None and type(cause).__name__ in TRANSPORT_ERRORS
    ):
        return f"{type(cause).__name__}: {cause}" if str(cause) else type(cause).__name__
    status = getattr(getattr(cause, "response", None), "status_code", None)
    if type(cause).__name__ == "HTTPStatusError" and isinstance(status, int):
        if status == 429:
            return "the RPC provider is rate-limiting (HTTP 429)"
        if status >= 500:
            return f"the RPC provider failed (HTTP {status})"
    return None
