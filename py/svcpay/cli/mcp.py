"""`svcpay mcp`: an MCP server over stdio for agents that speak only MCP (docs/adr/0039). Its
tools: `fetch` (an HTTP request to a URL, paid on 402 by `PaymentAuth` with svcpay, x402 or
MPP within the limits the flags set), `balance` (what the wallet holds, what was spent in
the last 24 hours) and `pay_status` (the limits and the payments made). `--dry-run` quotes
a 402's terms without paying. Every payment is logged to stderr (stdout is the MCP channel).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

import httpx
from solana.rpc.async_api import AsyncClient
from solana.rpc.models import TokenAccountOpts

from svcpay._extras import require
from svcpay.cli._common import (
    Subparsers,
    amount_arg,
    command,
    load_signer,
    run,
    seconds_arg,
)
from svcpay.client import PROTOCOLS, PaymentAuth, PaymentError, SpendingPolicy
from svcpay.protocol import mpp
from svcpay.protocol.models import PaymentRequired, ProtocolError
from svcpay.protocol.programs import TOKEN_2022_PROGRAM, TOKEN_PROGRAM
from svcpay.rpc import connect
from svcpay.schemes.x402_exact import client as x402

NAME = "mcp"
MAX_BODY_CHARS = 100_000  # what `fetch` returns of a body
KEPT_PAYMENTS = 100  # what `pay_status` lists


def serve(args: argparse.Namespace) -> int:
    return run(_serve(args))


async def _serve(args: argparse.Namespace) -> int:
    require("svcpay mcp", ["mcp"], ["mcp"])
    from mcp.server.mcpserver import MCPServer

    owner = load_signer(args)
    decimals = args.decimals
    limit = args.max_per_request.to_base(decimals)
    budget = args.budget.to_base(decimals) if args.budget is not None else None
    origins = frozenset(args.origin) if args.origin else None
    rpc = connect(args.url)
    facilitator = (
        httpx.AsyncClient(base_url=args.facilitator, timeout=args.timeout)
        if args.facilitator
        else None
    )
    auth = PaymentAuth(
        owner,
        rpc=rpc,
        max_per_request=limit,
        facilitator=facilitator,
        protocols=tuple(args.protocol or PROTOCOLS),
        policy=SpendingPolicy(origins=origins, daily_budget=budget),
    )
    wallet = Wallet(args, auth, rpc, limit, budget, origins)
    server = MCPServer(
        "svcpay",
        instructions="Tools that pay for HTTP APIs answering 402 (svcpay, x402, MPP) "
        "within the limits the user set; `pay_status` tells them.",
    )
    server.tool(description=wallet.fetch.__doc__)(wallet.fetch)
    server.tool(description=wallet.balance.__doc__)(wallet.balance)
    server.tool(description=wallet.pay_status.__doc__)(wallet.pay_status)
    _log(
        f"serving MCP on stdio for {owner.pubkey()} (at most {limit} base units a payment"
        + (f", {budget} a day" if budget is not None else "")
        + (", dry run" if args.dry_run else "")
        + ")"
    )
    try:
        await server.run_stdio_async()
    finally:
        if facilitator is not None:
            await facilitator.aclose()
        await auth.aclose()
        await rpc.close()
    return 0


class Wallet:
    """The tools' state: the paying auth, the limits, the payments made."""

    def __init__(
        self,
        args: argparse.Namespace,
        auth: PaymentAuth,
        rpc: AsyncClient,
        limit: int,
        budget: int | None,
        origins: frozenset[str] | None,
    ) -> None:
        self.args, self.auth, self.rpc = args, auth, rpc
        self.limit, self.budget, self.origins = limit, budget, origins
        self.payments: list[dict[str, Any]] = []

    async def fetch(
        self,
        url: str,
        method: str = "GET",
        body: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        """Requests an http(s) URL; when it answers 402 (payment required), pays with
        svcpay, x402 or MPP within the user's limits and requests it again. Returns the
        status, the body and what was paid (in a dry run: the quoted terms, unpaid)."""
        from mcp.server.mcpserver.exceptions import ToolError

        target = httpx.URL(url)
        if target.scheme not in ("http", "https") or not target.host:
            raise ToolError(f"not an http(s) URL: {url!r}")
        method = method.upper()
        content = body.encode() if body is not None else None
        async with httpx.AsyncClient(timeout=self.args.timeout) as http:
            try:
                if self.args.dry_run:
                    response = await http.request(method, url, content=content, headers=headers)
                    return self._quote(method, url, response)
                before = self.auth.spent_today()
                response = await http.request(
                    method, url, content=content, headers=headers, auth=self.auth
                )
            except PaymentError as e:
                _log(f"declined {method} {url}: {type(e).__name__}: {e}")
                raise ToolError(f"{type(e).__name__}: {e} (nothing was paid)") from None
            except httpx.TransportError as e:
                raise ToolError(f"{url} could not be reached: {e}") from None
        payment = self._paid(method, url, response, self.auth.spent_today() - before)
        return {**_answer(response), "payment": payment}

    async def balance(self) -> dict[str, Any]:
        """What the paying wallet holds (SOL and token accounts) and what it paid in the
        last 24 hours, against the daily budget."""
        owner = self.auth.owner.pubkey()
        lamports = (await self.rpc.get_balance(owner)).value
        tokens: list[dict[str, Any]] = []
        for program in (TOKEN_PROGRAM, TOKEN_2022_PROGRAM):
            try:
                found = await self.rpc.get_token_accounts_by_owner_json_parsed(
                    owner, TokenAccountOpts(program_id=program)
                )
            except Exception as e:  # an RPC without jsonParsed: say so, keep the rest
                tokens.append({"program": str(program), "error": str(e)})
                continue
            for item in found.value:
                info: Any = item.account.data.parsed["info"]
                amount: Any = info["tokenAmount"]
                tokens.append(
                    {
                        "account": str(item.pubkey),
                        "mint": info["mint"],
                        "amount": int(amount["amount"]),
                        "decimals": amount["decimals"],
                    }
                )
        return {"wallet": str(owner), "lamports": lamports, "tokens": tokens, **self._today()}

    async def pay_status(self) -> dict[str, Any]:
        """The limits payments are made within, what was paid in the last 24 hours, and
        the payments made since this server started (latest last)."""
        return {
            "wallet": str(self.auth.owner.pubkey()),
            "dryRun": bool(self.args.dry_run),
            "maxPerRequest": self.limit,
            "origins": sorted(self.origins) if self.origins is not None else None,
            **self._today(),
            "payments": self.payments[-KEPT_PAYMENTS:],
        }

    def _today(self) -> dict[str, Any]:
        spent = self.auth.spent_today()
        left = None if self.budget is None else max(self.budget - spent, 0)
        return {"spentToday": spent, "dailyBudget": self.budget, "leftToday": left}

    def _paid(
        self, method: str, url: str, response: httpx.Response, amount: int
    ) -> dict[str, Any] | None:
        sent = response.request.headers
        protocol = (
            "svcpay"
            if "x-payment" in sent
            else "subscription"
            if "x-svc-sub" in sent
            else "x402"
            if "payment-signature" in sent
            else "mpp"
            if (sent.get("authorization") or "").startswith("Payment ")
            else None
        )
        if protocol is None:
            return None
        reference = _reference(response)
        payment = {
            "at": int(time.time()),
            "method": method,
            "url": url,
            "protocol": protocol,
            "amount": amount,
            "status": response.status_code,
            "reference": reference,
        }
        self.payments.append(payment)
        del self.payments[:-KEPT_PAYMENTS]
        _log(
            f"paid {amount} base units with {protocol} for {method} {url} -> "
            f"{response.status_code}" + (f" ({reference})" if reference else "")
        )
        return payment

    def _quote(self, method: str, url: str, response: httpx.Response) -> dict[str, Any]:
        if response.status_code != 402:
            return {**_answer(response), "payment": None}
        quote = _terms(response)
        cheapest = min((o["amount"] for o in quote), default=None)
        _log(f"dry run: {method} {url} asks for {cheapest} base units; not paid")
        over = cheapest is not None and cheapest > self.limit
        return {
            "status": 402,
            "dryRun": True,
            "quote": quote,
            "withinLimit": not over,
            "maxPerRequest": self.limit,
        }


def _answer(response: httpx.Response) -> dict[str, Any]:
    text = response.text
    return {
        "status": response.status_code,
        "contentType": response.headers.get("content-type"),
        "body": text[:MAX_BODY_CHARS],
        "truncated": len(text) > MAX_BODY_CHARS,
    }


def _terms(response: httpx.Response) -> list[dict[str, Any]]:
    """Every way a 402 offers to pay: protocol, amount (base units), token, and more."""
    found: list[dict[str, Any]] = []
    try:
        terms = PaymentRequired.parse(response.content)
        for o in terms.accepts:
            kind = "subscription" if o.is_subscription else "svcpay"
            found.append({"protocol": kind, "amount": o.amount_units, "token": o.token})
    except ProtocolError:
        pass
    try:
        required = x402.payment_required(response)
    except ProtocolError:
        required = None
    if required is not None:
        for r in required.accepts:
            found.append(
                {
                    "protocol": "x402",
                    "amount": x402.amount_of(r),
                    "token": r.asset,
                    "network": r.network,
                }
            )
    for c in mpp.parse_challenges(response.headers.get_list("www-authenticate")):
        request = c.request_json if isinstance(c.request_json, dict) else {}
        found.append(
            {
                "protocol": f"mpp {c.intent}",
                "amount": int(request.get("amount", 0)),
                "token": request.get("currency"),
            }
        )
    return found


def _reference(response: httpx.Response) -> str | None:
    try:
        settled = x402.settlement(response)
    except ProtocolError:
        settled = None
    if settled is not None:
        return settled.transaction
    receipt = response.headers.get("payment-receipt")
    if receipt:
        try:
            return mpp.Receipt.parse(receipt).reference
        except ValueError:
            return None
    return None


def _log(line: str) -> None:
    print(f"svcpay mcp: {line}", file=sys.stderr, flush=True)


def register(subparsers: Subparsers) -> None:
    p = command(
        subparsers,
        NAME,
        serve,
        help="an MCP server (stdio) whose tools pay for HTTP APIs",
        description="Serves the Model Context Protocol on stdin/stdout for agents that speak "
        "only MCP. Tools: fetch (an HTTP request, paid on 402 with svcpay, x402 or MPP from "
        "--keypair's token accounts, within --max-per-request, --budget and --origin), "
        "balance and pay_status. Every payment is logged to stderr.",
        epilog="an MCP host's configuration:\n"
        '  {"mcpServers": {"svcpay": {"command": "svcpay", "args": ["mcp",\n'
        '   "--max-per-request", "0.50", "--budget", "5"]}}}',
    )
    p.add_argument(
        "--max-per-request",
        type=amount_arg,
        default=amount_arg("1"),
        metavar="AMOUNT",
        help="most one payment may cost, in token units (0.50, with --decimals) or base units "
        "(500000u) (default: 1)",
    )
    p.add_argument(
        "--budget",
        type=amount_arg,
        metavar="AMOUNT",
        help="most paid in the last 24 hours, every origin together (default: no budget)",
    )
    p.add_argument(
        "--origin",
        action="append",
        metavar="ORIGIN",
        help="an origin (https://api.example.com) it may pay; repeatable (default: any)",
    )
    p.add_argument(
        "--protocol",
        action="append",
        choices=list(PROTOCOLS),
        help="a protocol to pay one-time prices with, in order of preference; repeatable "
        "(default: svcpay, x402, mpp)",
    )
    p.add_argument(
        "--facilitator",
        metavar="URL",
        default=os.environ.get("SVCPAY_FACILITATOR_URL"),
        help="facilitator for one-time svcpay payments (default: $SVCPAY_FACILITATOR_URL, "
        "else the one the 402 terms name)",
    )
    p.add_argument(
        "--decimals",
        type=int,
        default=6,
        help="the decimals token-unit amounts are scaled by (default: 6, as USDC)",
    )
    p.add_argument("--dry-run", action="store_true", help="quote 402 terms; pay nothing")
    p.add_argument(
        "--timeout",
        type=seconds_arg,
        default=60.0,
        metavar="SECS",
        help="HTTP timeout (default: 60)",
    )
