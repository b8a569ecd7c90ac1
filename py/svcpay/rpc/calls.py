"""A JSON-RPC call by name, through the same client (and so the same transport) as
solana-py's typed methods: for what those lack (`minContextSlot`, `maxRetries`, raw sends)."""

from __future__ import annotations

import itertools
import json
from typing import Any

from solana.rpc.async_api import AsyncClient

_ids = itertools.count(1)


class RpcCallError(Exception):
    """The node answered with a JSON-RPC error (an answer, not a transport failure)."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code, self.message, self.data = code, message, data


async def call(client: AsyncClient, method: str, params: list[Any]) -> Any:
    """`method(params)` on `client`'s endpoint: its `result`, RpcCallError for its `error`;
    an HTTP or transport failure raises as httpx2 raises it (svcpay.rpc_errors reads it)."""
    provider = client._provider
    body = {"jsonrpc": "2.0", "id": next(_ids), "method": method, "params": params}
    response = await provider.session.post(
        provider.endpoint_uri,
        content=json.dumps(body),
        headers={"Content-Type": "application/json"},
    )
    response.raise_for_status()
    reply = response.json()
    if not isinstance(reply, dict):
        raise RpcCallError(-32700, f"not a JSON-RPC reply: {str(reply)[:200]}")
    error = reply.get("error")
    if error is not None:
        message = str(error.get("message", "")) if isinstance(error, dict) else str(error)
        code = int(error.get("code", 0)) if isinstance(error, dict) else 0
        data = error.get("data") if isinstance(error, dict) else None
        raise RpcCallError(code, message, data)
    return reply.get("result")
