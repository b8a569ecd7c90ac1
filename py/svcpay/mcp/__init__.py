"""Payments over the Model Context Protocol (docs/adr/0039), on the official Python SDK
(`mcp`, the 'mcp' extra):

- `server`: `PaidTools`, paid tools on an `MCPServer`, decided by the gate's core
  (`svcpay.gate.core`) and its schemes: x402's and MPP's MCP transports and svcpay's proofs
  and subscriptions in `_meta`.
- `client`: `PayingSession`, an MCP `ClientSession` whose `call_tool` pays through
  `svcpay.client.PaymentAuth`.
- `wire`: the `_meta` keys and the mapping between MCP messages and the gate's HTTP
  answers, shared by both (no MCP SDK in it).

This package may import `svcpay.gate`, `svcpay.client`, `svcpay.schemes` and
`svcpay.protocol`; nothing below it imports it. `svcpay.cli.mcp` (`svcpay mcp`) uses it.
Names load on first use, so `import svcpay.mcp` needs no MCP SDK.

Layer 4 (docs/adr/0041), beside `svcpay.examples`: neither imports the other.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from svcpay.mcp.client import Paid, PayingSession, PaymentRequiredError
    from svcpay.mcp.server import PaidTools, tool_path

_WHERE = {
    "PaidTools": "svcpay.mcp.server",
    "tool_path": "svcpay.mcp.server",
    "Paid": "svcpay.mcp.client",
    "PayingSession": "svcpay.mcp.client",
    "PaymentRequiredError": "svcpay.mcp.client",
}
__all__ = ["Paid", "PaidTools", "PayingSession", "PaymentRequiredError", "tool_path"]


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'svcpay.mcp' has no attribute {name!r}")
