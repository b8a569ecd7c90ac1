"""Paid tools on the official MCP SDK's server (`mcp.server.mcpserver.MCPServer`, FastMCP's
name since mcp 2): `PaidTools` prices tools with the gate's pricing entries and decides
every call through the gate's core (`svcpay.gate.core.GateCore`, its registered schemes)
as the ASGI shell does for HTTP (docs/adr/0039):

    mcp = MCPServer("weather")
    paid = PaidTools(mcp, terms=terms, memos=memos, trusted_facilitators={KEY}, replay=replay)

    @paid.tool(OneTime(10_000))
    async def forecast(city: str) -> str: ...

A call of a priced tool becomes a `Request` (method "MCP", path "/tools/call/<tool>", the
payment in `_meta` as the headers the schemes read); a `Reply` becomes a tool result with
`isError: true` carrying x402's PaymentRequired (and MPP's challenges and svcpay's body in
`_meta`), or MPP's JSON-RPC error -32042 (-32043 for a refused credential) when the client
pays with MPP or declared MPP's capability; an `Admit` runs the tool, then settles it as the
HTTP shell does (`start`, `end`): only when the tool succeeded, the receipt in the result's
`_meta`. A gate that cannot decide (the facilitator, the database or the RPC node away)
answers a problem result, never an exception.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from typing import Any, Literal, TypeVar

from pydantic import BaseModel

from svcpay._extras import require
from svcpay.gate.core import GateCore
from svcpay.gate.paywall import Paywall
from svcpay.mcp import wire
from svcpay.protocol.memo import Memos
from svcpay.protocol.mints import MintReader
from svcpay.protocol.pricing import OneTime, PricingEntry, Session, Subscription, Terms
from svcpay.protocol.replay import ReplayStore
from svcpay.protocol.verify import RemoteVerifier
from svcpay.schemes.decision import Admit, RawHeaders, Reply, Request
from svcpay.schemes.mpp_charge.facilitator_client import ChargeSettler
from svcpay.schemes.session.server import SessionScheme
from svcpay.schemes.subscription.server import Meter, Subscriptions
from svcpay.schemes.x402_exact.facilitator_client import X402Facilitator
from svcpay.schemes.x402_exact.idempotency import PaymentIdStore
from svcpay.schemes.x402_exact.server import X402Options

require("svcpay.mcp.server", ["mcp"], ["mcp"])

__all__ = ["PaidTools", "tool_path"]

log = logging.getLogger("svcpay.mcp")
F = TypeVar("F", bound=Callable[..., Any])
Answer = Literal["auto", "x402", "mpp"]
CallNext = Callable[[Any], Awaitable[Any]]
PriceOf = Callable[[Mapping[str, Any]], "PricingEntry | Sequence[PricingEntry] | None"]
"""A tool's price from its arguments: entries, or None (or nothing) for a free call."""


def tool_path(name: str) -> str:
    """The synthetic path of a tool's calls: memos and proofs are bound to "MCP <path>"."""
    return f"/tools/call/{name}"


class PaidTools:
    """Prices tools of `server` (an `MCPServer`: this installs itself as its middleware)
    with the gate's pricing entries; the other arguments are `payment_gate`'s
    (`svcpay.gate.asgi.PaymentGate`). `answer` picks how a payment is asked for: "auto"
    (x402's tool result, MPP's error to a client that pays or declared MPP), "x402" or
    "mpp". `host` names the server in resource URLs (`mcp://<host>/tools/call/<tool>`)."""

    def __init__(
        self,
        server: Any = None,
        *,
        terms: Terms,
        memos: Memos,
        trusted_facilitators: Collection[str],
        replay: ReplayStore,
        subscriptions: Subscriptions | None = None,
        meter: Meter | None = None,
        remote: RemoteVerifier | None = None,
        x402_facilitator: X402Facilitator | None = None,
        payment_ids: PaymentIdStore | None = None,
        sessions: SessionScheme | None = None,
        x402_options: X402Options | None = None,
        schemes: Sequence[str] | None = None,
        mpp_facilitator: ChargeSettler | None = None,
        mints: MintReader | None = None,
        answer: Answer = "auto",
        host: str | None = None,
    ) -> None:
        self.server = server
        self.answer = answer
        self.host = host or str(getattr(server, "name", None) or "mcp")
        self._options: dict[str, Any] = dict(
            terms=terms,
            memos=memos,
            trusted_facilitators=trusted_facilitators,
            replay=replay,
            subscriptions=subscriptions,
            meter=meter,
            remote=remote,
            x402_facilitator=x402_facilitator,
            payment_ids=payment_ids,
            sessions=sessions,
            x402_options=x402_options,
            schemes=schemes,
            mpp_facilitator=mpp_facilitator,
            mints=mints,
            paywall=Paywall(enabled=False),
        )
        self.prices: dict[str, list[PricingEntry]] = {}
        self.priced_by: dict[str, PriceOf] = {}
        self.core = GateCore(routes={}, **self._options)
        if server is not None:
            server.middleware.append(self)

    async def check_cluster(self) -> None:
        """Raises WrongCluster (one line naming both) when the RPC node these tools read
        the chain with is not on the terms' network; call it where the server starts, as
        `payment_gate` does at its ASGI startup (svcpay.gate.cluster, docs/adr/0038)."""
        await self.core.check_cluster()

    def price(self, tool: str, *entries: PricingEntry, by: PriceOf | None = None) -> None:
        """Prices the tool named `tool` (however it was registered). ValueError when the
        gate cannot take the pricing (as `payment_gate` at start). `by` prices each call
        from its arguments instead: a payment made for one call's price pays no call that
        costs more (the amount is the price's), and `entries` are then the kinds `by` may
        answer, checked now (optional)."""
        if by is not None:
            self.core.check_pricing(entries)
            self.priced_by = {**self.priced_by, tool: by}
            return
        if not entries:
            raise ValueError(f"no pricing for the tool {tool!r}")
        prices = {**self.prices, tool: list(entries)}
        self.core = GateCore(
            routes={tool_path(n): p for n, p in prices.items()}, **self._options
        )  # checked now, not at the first call
        self.prices = prices

    def tool(
        self,
        *entries: PricingEntry,
        name: str | None = None,
        by: PriceOf | None = None,
        **tool: Any,
    ) -> Callable[[F], F]:
        """A decorator registering a function as a tool of the server (`server.tool(name,
        **tool)`) priced with `entries`, or per call by `by` (see `price`)."""
        if self.server is None:
            raise ValueError("PaidTools.tool needs the server: PaidTools(server, ...)")

        def decorator(fn: F) -> F:
            self.price(name or fn.__name__, *entries, by=by)
            registered: F = self.server.tool(name=name, **tool)(fn)
            return registered

        return decorator

    async def __call__(self, ctx: Any, call_next: CallNext) -> Any:
        """The server middleware: tools/call of a priced tool goes through the gate."""
        method = getattr(ctx, "method", None)
        if method in ("initialize", "server/discover"):
            return self._advertise(await call_next(ctx))
        params = getattr(ctx, "params", None)
        if method != "tools/call" or not isinstance(params, Mapping):
            return await call_next(ctx)
        name = params.get("name")
        if not isinstance(name, str):
            return await call_next(ctx)
        pricing = self._pricing(name, params.get("arguments"))
        if isinstance(pricing, dict):  # a problem
            return pricing
        if not pricing:  # not priced, or these arguments cost nothing
            return await call_next(ctx)
        return await self.call(name, pricing, params.get("_meta"), ctx, call_next)

    def _pricing(self, name: str, arguments: object) -> list[PricingEntry] | dict[str, Any]:
        """The entries pricing a call of `name` with `arguments` ([]: free), or a problem
        result when its price function refuses them (400) or fails (500)."""
        if (by := self.priced_by.get(name)) is None:
            return self.prices.get(name, [])
        try:
            priced = by(arguments if isinstance(arguments, Mapping) else {})
        except ValueError as e:  # arguments the tool's price refuses
            return _problem(400, "InvalidArguments", str(e))
        except Exception as e:
            log.exception("pricing a call of %s failed", name)
            return _problem(500, "PricingFailed", f"the call could not be priced: {e}")
        pricing = _entries(priced)
        try:
            self.core.check_pricing(pricing)
        except ValueError as e:  # the provider's pricing, not the caller's arguments
            log.error("a call of %s was priced with %r: %s", name, pricing, e)
            return _problem(500, "PricingFailed", f"the call could not be priced: {e}")
        return pricing

    async def call(
        self,
        name: str,
        pricing: list[PricingEntry],
        meta: object,
        ctx: Any,
        call_next: CallNext,
    ) -> Any:
        """Decides one call of the priced tool `name`, runs it when admitted."""
        mpp_form = self.answer == "mpp" or (
            self.answer == "auto"
            and ((isinstance(meta, Mapping) and wire.MPP_CREDENTIAL in meta) or _declares_mpp(ctx))
        )
        try:
            headers = wire.request_headers(meta)
        except wire.MetaError as e:
            return _malformed(str(e), mpp_form)
        headers[b"host"] = self.host.encode()
        request = Request("MCP", tool_path(name), headers, "mcp")
        try:
            decision = await self.core.decide(request, pricing)
        except Exception as e:  # the core answers outages itself; this is a last resort
            log.exception("the gate could not decide a call of %s", name)
            return _problem(503, "Unavailable", f"the payment could not be checked: {e}")
        if isinstance(decision, Reply):
            return self._reply(decision, mpp_form, credential=b"authorization" in headers)
        return await self._admitted(decision, ctx, call_next, mpp_form)

    async def _admitted(self, admit: Admit, ctx: Any, call_next: CallNext, mpp_form: bool) -> Any:
        """Runs the tool, then tells the admission how it went, as `gate.asgi` does."""
        try:
            result = _plain(await call_next(ctx))
        except BaseException:  # the tool's failure reached us: no charge
            await admit.end(None, None)
            raise
        status = 500 if result.get("isError") else 200
        added: RawHeaders = []
        replaced: Reply | None = None
        try:
            if admit.wants_start:
                extra = await admit.start(status, [])
                if isinstance(extra, Reply):
                    replaced = extra
                else:
                    added = extra
            body = json.dumps(result).encode() if admit.capture else None
            await admit.end(status, body)
        except Exception as e:
            log.exception("settling a tool call failed")
            return _problem(503, "Unavailable", f"the payment could not be settled: {e}")
        if replaced is not None:  # settling failed: the answer is the gate's
            return self._reply(replaced, mpp_form, credential=True)
        if meta := wire.result_meta(added):
            result["_meta"] = {**(result.get("_meta") or {}), **meta}
        return result

    def _reply(self, reply: Reply, mpp_form: bool, *, credential: bool) -> Any:
        if reply.status < 400:  # a stored answer (an x402 payment-identifier resent)
            try:
                stored = json.loads(reply.body)
            except ValueError:
                stored = None
            if isinstance(stored, dict):
                if meta := wire.result_meta(reply.headers):
                    stored["_meta"] = {**(stored.get("_meta") or {}), **meta}
                return stored
        refusal = wire.Refusal(reply.status, reply.headers, reply.body)
        if mpp_form and refusal.payment_required:
            code = wire.VERIFICATION_FAILED_CODE if credential else wire.PAYMENT_REQUIRED_CODE
            raise _mcp_error(code, refusal.message, refusal.mpp_data())
        return refusal.tool_result()

    def _advertise(self, result: Any) -> Any:
        """MPP's capability, `experimental.payment.methods`, in the initialize answer."""
        data = _plain(result)
        capabilities = data.get("capabilities")
        if not isinstance(capabilities, dict):
            return result
        intents = sorted(self._intents())
        if not intents:
            return result
        experimental = dict(capabilities.get("experimental") or {})
        experimental["payment"] = {"methods": {"solana": {"intents": intents}}}
        data["capabilities"] = {**capabilities, "experimental": experimental}
        return data

    def _intents(self) -> set[str]:
        entries = [e for p in self.prices.values() for e in p]
        intents: set[str] = set()
        if self.core.charge is not None and any(
            not isinstance(e, Session | Subscription) for e in entries
        ):
            intents.add("charge")
        if any(isinstance(e, Session) for e in entries):
            intents.add("session")
        if self.core.subscriptions is not None and any(
            isinstance(e, Subscription) for e in entries
        ):
            intents.add("subscription")
        return intents


def _entries(priced: PricingEntry | Sequence[PricingEntry] | None) -> list[PricingEntry]:
    if priced is None:
        return []
    if isinstance(priced, OneTime | Subscription | Session):
        return [priced]
    return list(priced)


def _declares_mpp(ctx: Any) -> bool:
    """Whether the client declared MPP's capability (`experimental.payment`)."""
    try:
        capabilities = ctx.session.client_params.capabilities
        experimental = capabilities.experimental or {}
    except AttributeError:
        return False
    return isinstance(experimental, Mapping) and "payment" in experimental


def _plain(result: Any) -> dict[str, Any]:
    if isinstance(result, BaseModel):
        dumped: dict[str, Any] = result.model_dump(by_alias=True, exclude_none=True, mode="json")
        return dumped
    if isinstance(result, dict):
        return dict(result)
    raise TypeError(f"a tool call answered {type(result).__name__}, not a result")


def _problem(status: int, error: str, message: str) -> dict[str, Any]:
    body = json.dumps({"error": error, "message": message}).encode()
    refusal = wire.Refusal(status, [(b"retry-after", b"5")] if status == 503 else [], body)
    return refusal.tool_result()


def _malformed(message: str, mpp_form: bool) -> dict[str, Any]:
    if mpp_form:
        raise _mcp_error(wire.INVALID_PARAMS_CODE, message, {"detail": message})
    return _problem(400, "InvalidPaymentHeader", message)


def _mcp_error(code: int, message: str, data: dict[str, Any]) -> Exception:
    from mcp.shared.exceptions import MCPError

    return MCPError(code=code, message=message, data=data)
