"""The x402 SDK's paying MCP clients (mcp 1.x underneath), as an agent uses them, calling
one tool of a server reached over MCP's streamable HTTP transport.

    sdk_mcp_client.py URL TOOL --arguments JSON --keypair FILE --rpc URL --network CAIP2
                      --mint MINT [--session] [--replay]

Calls TOOL at URL (the MCP endpoint, e.g. http://host:port/mcp) through `x402MCPClient`
(`create_x402_mcp_client_from_config`'s), or with `--session` through `x402MCPSession`
(`create_x402_mcp_client`'s, which sends its payment with null members), either paying a
payment-required tool result with the exact SVM scheme, and prints one JSON object:
`status` ("paid", "free" or "error"), `paymentMade`, `paymentResponse` (what the SDK read
from the answer's `_meta`, null if none), `result` (the answer as it came: isError, text,
structuredContent, `_meta`), `asked` (the first, unpaid answer) and `payment` (the
`x402/payment` the SDK sent). With `--replay`, the same `_meta` is then sent again,
unchanged, without the SDK, and `replay` holds that answer. A payment the SDK refuses to
make exits 1 with `{"error": ...}`.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from common import payer_arguments, paying_client, print_report
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult
from x402.mcp import PaymentRequiredError, x402MCPClient, x402MCPSession


class Recording:
    """mcp's ClientSession as `x402MCPSession` calls it, keeping what it sent and got."""

    def __init__(self, session: ClientSession) -> None:
        self.session = session
        self.sent: list[dict[str, Any]] = []
        self.answers: list[CallToolResult] = []

    async def call_tool(
        self,
        name: str,
        arguments: dict[str, Any] | None = None,
        read_timeout_seconds: timedelta | None = None,
        *,
        meta: dict[str, Any] | None = None,
    ) -> CallToolResult:
        self.sent.append({"name": name, "arguments": arguments, "meta": meta})
        timeout = read_timeout_seconds
        result = await self.session.call_tool(name, arguments or {}, timeout, meta=meta)
        self.answers.append(result)
        return result


@dataclass
class Answer:
    """A tool result as `x402.mcp.utils.convert_mcp_result` reads one: by the attribute
    names `content`, `isError`, `_meta` and `structuredContent`. (mcp's CallToolResult
    keeps `_meta` as `.meta`, which that function does not read, so `x402MCPClient` would
    never see a payment response on it.)"""

    content: list[dict[str, Any]]
    isError: bool  # noqa: N815 (the SDK reads this name)
    structuredContent: dict[str, Any] | None  # noqa: N815
    meta: dict[str, Any] = field(default_factory=dict)

    def __getattr__(self, name: str) -> Any:
        if name == "_meta":
            return self.meta
        raise AttributeError(name)


class Adapter:
    """The MCP client `x402MCPClient` expects (`call_tool(params, **options)`, as the SDK's
    examples write one) over mcp's ClientSession."""

    def __init__(self, session: Recording) -> None:
        self.session = session

    async def call_tool(self, params: dict[str, Any], **options: Any) -> Answer:
        result = await self.session.call_tool(
            params["name"],
            params.get("arguments"),
            options.get("read_timeout_seconds"),
            meta=params.get("_meta"),
        )
        content = [c.model_dump(mode="json", exclude_none=True) for c in result.content]
        return Answer(content, result.isError, result.structuredContent, dict(result.meta or {}))


def shown(result: CallToolResult) -> dict[str, Any]:
    return {
        "isError": result.isError,
        "text": "".join(getattr(c, "text", "") for c in result.content),
        "structuredContent": result.structuredContent,
        "_meta": dict(result.meta or {}),
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    client = paying_client(args.keypair, args.rpc, args.network, args.mint)
    arguments = json.loads(args.arguments)
    async with (
        streamable_http_client(args.url) as (read, write, _),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        recording = Recording(session)
        paying: Any = (
            x402MCPSession(recording, client)
            if args.session
            else x402MCPClient(Adapter(recording), client, auto_payment=True)
        )
        called = await paying.call_tool(args.tool, arguments)
        settled = called.payment_response
        if hasattr(settled, "model_dump"):
            settled = settled.model_dump(by_alias=True, exclude_none=True)
        report: dict[str, Any] = {
            "status": "error" if called.is_error else "paid" if called.payment_made else "free",
            "paymentMade": called.payment_made,
            "paymentResponse": settled,
            "result": shown(recording.answers[-1]),
            "asked": shown(recording.answers[0]) if called.payment_made else None,
            "payment": (recording.sent[-1]["meta"] or {}).get("x402/payment"),
        }
        if args.replay:
            report["replay"] = shown(await recording.call_tool(**recording.sent[-1]))
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("url", help="the MCP endpoint (streamable HTTP)")
    parser.add_argument("tool")
    parser.add_argument("--arguments", default="{}", help="the tool's arguments, JSON")
    parser.add_argument("--session", action="store_true", help="pay with x402MCPSession")
    return print_report(run, payer_arguments(parser).parse_args(), PaymentRequiredError)


if __name__ == "__main__":
    sys.exit(main())
