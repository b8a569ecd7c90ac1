"""The x402 SDK's paying MCP client (`x402.mcp.x402MCPClient`, mcp 1.x underneath), as an
agent uses it, calling one tool of a server reached over MCP's streamable HTTP transport.

    sdk_mcp_client.py URL TOOL --arguments JSON --keypair FILE --rpc URL --network CAIP2
                      --mint MINT [--replay]

Calls TOOL at URL (the MCP endpoint, e.g. http://host:port/mcp) through `x402MCPClient`,
which pays a payment-required tool result with the exact SVM scheme, and prints one JSON
object: `status` ("paid", "free" or "error"), `paymentMade`, `paymentResponse` (what the SDK
read from the answer's `_meta`, null if none), `result` (the answer as it came: isError,
text, structuredContent, `_meta`), `asked` (the first, unpaid answer) and `payment` (the
`x402/payment` the SDK sent). With `--replay`, the same `_meta` is then sent again,
unchanged, without the SDK, and `replay` holds that answer. A payment the SDK refuses to
make exits 1 with `{"error": ...}`.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from typing import Any

from common import payer_arguments, paying_client, print_report
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from x402.mcp import PaymentRequiredError, x402MCPClient


@dataclass
class Answer:
    """A tool result as `x402.mcp.utils.convert_mcp_result` reads one: by the attribute
    names `content`, `isError`, `_meta` and `structuredContent`. (mcp's CallToolResult
    keeps `_meta` as `.meta`, which that function does not read, so the SDK would never
    see a payment response on it.)"""

    content: list[dict[str, Any]]
    isError: bool  # noqa: N815 (the SDK reads this name)
    structuredContent: dict[str, Any] | None  # noqa: N815
    meta: dict[str, Any] = field(default_factory=dict)

    def __getattr__(self, name: str) -> Any:
        if name == "_meta":
            return self.meta
        raise AttributeError(name)

    def report(self) -> dict[str, Any]:
        text = "".join(str(c.get("text", "")) for c in self.content)
        return {
            "isError": self.isError,
            "text": text,
            "structuredContent": self.structuredContent,
            "_meta": self.meta,
        }


class Adapter:
    """The MCP client `x402MCPClient` expects (`call_tool(params, **options)`, as the SDK's
    examples write one) over mcp's ClientSession; it keeps what it sent and received."""

    def __init__(self, session: ClientSession) -> None:
        self.session = session
        self.sent: list[dict[str, Any]] = []
        self.answers: list[Answer] = []

    async def call_tool(self, params: dict[str, Any], **options: Any) -> Answer:
        self.sent.append(params)
        result = await self.session.call_tool(
            params["name"],
            params.get("arguments") or {},
            options.get("read_timeout_seconds"),
            meta=params.get("_meta"),
        )
        answer = Answer(
            [c.model_dump(mode="json", exclude_none=True) for c in result.content],
            bool(result.isError),
            result.structuredContent,
            dict(result.meta or {}),
        )
        self.answers.append(answer)
        return answer


async def run(args: argparse.Namespace) -> dict[str, Any]:
    client = paying_client(args.keypair, args.rpc, args.network, args.mint)
    arguments = json.loads(args.arguments)
    async with (
        streamable_http_client(args.url) as (read, write, _),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        adapter = Adapter(session)
        paying = x402MCPClient(adapter, client, auto_payment=True)
        called = await paying.call_tool(args.tool, arguments)
        settled = called.payment_response
        report: dict[str, Any] = {
            "status": "error" if called.is_error else "paid" if called.payment_made else "free",
            "paymentMade": called.payment_made,
            "paymentResponse": (
                settled.model_dump(by_alias=True, exclude_none=True) if settled else None
            ),
            "result": adapter.answers[-1].report(),
            "asked": adapter.answers[0].report() if called.payment_made else None,
            "payment": (adapter.sent[-1].get("_meta") or {}).get("x402/payment"),
        }
        if args.replay:
            again = await adapter.call_tool(adapter.sent[-1])
            report["replay"] = again.report()
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("url", help="the MCP endpoint (streamable HTTP)")
    parser.add_argument("tool")
    parser.add_argument("--arguments", default="{}", help="the tool's arguments, JSON")
    return print_report(run, payer_arguments(parser).parse_args(), PaymentRequiredError)


if __name__ == "__main__":
    sys.exit(main())
