"""Step 8, an agent that speaks only MCP: its host starts `svcpay mcp` (an MCP server on
stdio, a child of this process) with a per-payment cap, a budget and the one origin it may
pay; the agent's `fetch` of GET /v1/data is paid through it, a second one past the budget is
declined with nothing paid, and `balance` says what was spent. Skipped, with a
line saying why, where the `mcp` extra is not installed."""

from __future__ import annotations

import importlib.util
import json
import sys
import tempfile
from contextlib import AsyncExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any

from svcpay.demo.output import expect, say, show_json, step, usdc
from svcpay.examples.resource_server import DATA_PRICE
from svcpay.keys import save_keypair

if TYPE_CHECKING:
    from svcpay.demo.context import Walkthrough

BUDGET = DATA_PRICE  # one call's worth: the second is declined


async def mcp_agent(w: Walkthrough) -> None:
    step("8. An agent over MCP: `svcpay mcp` pays GET /v1/data for it, within a budget")
    if importlib.util.find_spec("mcp") is None:
        say("(skipped: the MCP SDK is not installed: pip install 'svcpay[mcp]')")
        return
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    api = w.services.api_url
    with tempfile.TemporaryDirectory(prefix="svcpay-demo-mcp-") as tmp:
        key = str(Path(tmp) / "agent.json")
        save_keypair(w.world.client, key)
        log = Path(tmp) / "svcpay-mcp.log"
        limits = ["--max-per-request", usdc(DATA_PRICE).split()[0],
                  "--budget", usdc(BUDGET).split()[0], "--origin", api]  # fmt: skip
        args = ["-m", "svcpay", "mcp", "-k", key, "-u", w.chain.url, *limits]
        say("the agent's MCP host starts (as its configuration says):")
        say(f"  svcpay mcp {' '.join(limits)}")
        params = StdioServerParameters(command=sys.executable, args=args)
        before = w.balances()
        async with AsyncExitStack() as stack:
            errlog = stack.enter_context(log.open("w"))
            read, write = await stack.enter_async_context(stdio_client(params, errlog=errlog))
            session = await stack.enter_async_context(ClientSession(read, write))
            await session.initialize()
            tools = (await session.list_tools()).tools
            say(f"its tools: {', '.join(t.name for t in tools)}")
            say(f"the agent calls fetch {{url: {api}/v1/data}}:")
            fetched = await _call(session, "fetch", {"url": f"{api}/v1/data"})
            payment = fetched.get("payment") or {}
            say(f"  → {fetched.get('status')} {fetched.get('body')}")
            show_json(payment)
            expect(
                fetched.get("status") == 200 and payment.get("amount") == DATA_PRICE,
                f"svcpay mcp's fetch was not served and paid: {fetched}",
            )
            again = await _call(session, "fetch", {"url": f"{api}/v1/data"}, error=True)
            say(f"the agent fetches it again, past its budget: declined: {again}")
            balance = await _call(session, "balance", {})
            spent, left = balance.get("spentToday"), balance.get("leftToday")
            say(f"balance: spent today {usdc(spent or 0)}, left today {usdc(left or 0)}")
            expect(spent == DATA_PRICE and left == 0, f"svcpay mcp's balance: {balance}")
        for line in log.read_text().splitlines():
            if line.startswith("svcpay mcp: "):
                say(f"its log: {line.removeprefix('svcpay mcp: ')}")
    w.show_balances(before, w.balances())


async def _call(session: Any, tool: str, arguments: dict[str, Any], error: bool = False) -> Any:
    """A tool's answer: its structured content (or JSON text); with `error`, the error text
    it must answer instead."""
    result = await session.call_tool(tool, arguments)
    text = "".join(getattr(c, "text", "") for c in result.content)
    expect(
        bool(result.is_error) == error,
        f"svcpay mcp's {tool} answered {'no error' if error else 'an error'}: {text[:300]}",
    )
    if error:  # the SDK heads a tool's error with its own words
        return text.removeprefix(f"Error executing tool {tool}: ")
    structured = result.structured_content
    if isinstance(structured, dict):
        return structured.get("result", structured)
    return json.loads(text)
