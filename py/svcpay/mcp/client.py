"""An MCP client that pays: `PayingSession` wraps an `mcp` `ClientSession` so `call_tool`
answers a payment-required answer (x402's tool result, MPP's -32042 error or tool-result
challenges, svcpay's terms) by paying through `svcpay.client.PaymentAuth`: its choice among
protocols, its limits and `SpendingPolicy`, sessions and subscriptions it keeps across
calls. Each answer is shown to `PaymentAuth` as the HTTP response it stands for (a 402 with
the same terms in the same headers), and the request it sends back is turned into the
call's `_meta` (`svcpay.mcp.wire`), so no payment logic lives here (docs/adr/0039).

    async with PayingSession(session, auth) as paying:
        paid = await paying.call_tool("forecast", {"city": "Lisbon"})
        paid.result, paid.receipt
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from typing import Any

import httpx

from svcpay._extras import require
from svcpay.client import PaymentAuth
from svcpay.mcp import wire

require("svcpay.mcp.client", ["mcp"], ["mcp"])

__all__ = ["Paid", "PayingSession", "PaymentRequiredError"]


class PaymentRequiredError(Exception):
    """The server asks for a payment this client did not make (no protocol it pays, or
    the answer after paying still asks): `data` is the MCP error's or result's terms."""

    def __init__(self, message: str, data: dict[str, Any]) -> None:
        super().__init__(message)
        self.data = data


@dataclass
class Paid:
    """A tool's result, and what was paid for it (`protocol` None: nothing). `receipt`:
    x402's SettleResponse, MPP's receipt, or svcpay's proof (decoded), as the server and
    the payment gave it; `amount`: base units this call counted against `PaymentAuth`'s
    limits (what was signed, kept there until it is proven unpaid); `pending`: the server
    got no answer settling it (it settles later); `settled`: what is known paid."""

    result: Any
    protocol: str | None = None
    receipt: dict[str, Any] = field(default_factory=dict)
    amount: int = 0
    pending: bool = False

    @property
    def settled(self) -> int:
        """Base units known paid for this call: `amount` once the server settled it; 0
        while its settlement is pending, for a tool that failed (nothing is charged), and
        for a call paid by a subscription or not paid at all."""
        return 0 if self.pending or self.protocol is None else self.amount

    @property
    def is_error(self) -> bool:
        return bool(getattr(self.result, "is_error", False))


class PayingSession:
    """Pays tool calls on `session` (an initialized `mcp.ClientSession`, or anything with
    its `call_tool(name, arguments, read_timeout_seconds, meta=...)`) with `auth`. `server`
    names the server in the origin `auth`'s policy sees (`mcp://<server>`)."""

    def __init__(self, session: Any, auth: PaymentAuth, server: str = "mcp") -> None:
        self.session, self.auth, self.server = session, auth, server

    async def __aenter__(self) -> PayingSession:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.auth.aclose()  # asks to close sessions it opened

    async def call_tool(
        self,
        name: str,
        arguments: dict[str, Any] | None = None,
        *,
        meta: dict[str, Any] | None = None,
        read_timeout_seconds: float | None = None,
    ) -> Paid:
        """Calls `name`, pays when asked (within the auth's limits: SpendingLimitExceeded,
        OriginNotAllowed, NoAcceptableOption and PaymentError before anything is signed),
        and calls it again with the payment. PaymentRequiredError when it stays unpaid."""
        from mcp.shared.exceptions import MCPError

        request = httpx.Request("POST", f"mcp://{self.server}{_path(name)}")
        spent_before = self.auth.spent_today()
        flow = self.auth.async_auth_flow(request)
        answer: Any = None
        error: MCPError | None = None
        try:
            outgoing = await flow.__anext__()
            while True:
                extra = wire.payment_meta(outgoing)
                call_meta = {**(meta or {}), **extra} or None
                try:
                    answer = await self.session.call_tool(
                        name, arguments or {}, read_timeout_seconds, meta=call_meta
                    )
                    error = None
                    response = wire.http_response(outgoing, _plain(answer))
                except MCPError as e:
                    if e.error.code not in (
                        wire.PAYMENT_REQUIRED_CODE,
                        wire.VERIFICATION_FAILED_CODE,
                    ):
                        raise
                    answer, error = None, e
                    data = e.error.data if isinstance(e.error.data, dict) else {}
                    response = wire.http_response(outgoing, None, (e.error.code, data))
                try:
                    outgoing = await flow.asend(response)
                except StopAsyncIteration:
                    break
        finally:
            await flow.aclose()
        if error is not None:
            data = error.error.data if isinstance(error.error.data, dict) else {}
            raise PaymentRequiredError(f"{name}: {error.error.message}", data)
        plain = _plain(answer)
        if response.status_code == 402:
            raise PaymentRequiredError(f"{name}: the server still asks for payment", plain)
        return _paid(answer, plain, outgoing, self.auth.spent_today() - spent_before)


def _path(name: str) -> str:
    return f"/tools/call/{name}"


def _plain(answer: Any) -> dict[str, Any]:
    if hasattr(answer, "model_dump"):
        dumped: dict[str, Any] = answer.model_dump(by_alias=True, exclude_none=True, mode="json")
        return dumped
    return dict(answer) if isinstance(answer, dict) else {}


def _paid(answer: Any, plain: dict[str, Any], sent: httpx.Request, amount: int) -> Paid:
    meta = plain.get("_meta") or {}
    pending = meta.get(wire.SVCPAY_SETTLEMENT) == "pending"
    headers = sent.headers
    if plain.get("isError"):  # the tool failed: the server charged nothing for it
        return Paid(answer, amount=amount)
    if isinstance(receipt := meta.get(wire.X402_PAYMENT_RESPONSE), dict):
        return Paid(answer, "x402", receipt, amount, pending)
    if isinstance(receipt := meta.get(wire.MPP_RECEIPT), dict):
        return Paid(answer, "mpp", receipt, amount, pending)
    if proof := headers.get("x-payment"):
        return Paid(answer, "svcpay", _proof(proof), amount, pending)
    if sub := headers.get("x-svc-sub"):
        return Paid(answer, "subscription", {"subscription": sub}, amount, pending)
    if headers.get("payment-signature") or headers.get("authorization"):
        return Paid(answer, "x402" if "payment-signature" in headers else "mpp", {}, amount, True)
    return Paid(answer)


def _proof(value: str) -> dict[str, Any]:
    try:
        decoded = json.loads(base64.b64decode(value))
    except ValueError:
        return {"proof": value}
    return decoded if isinstance(decoded, dict) else {"proof": value}
