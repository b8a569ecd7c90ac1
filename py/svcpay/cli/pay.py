"""`svcpay pay URL`: fetch a gated URL, paying (or using a subscription) as the 402 asks.

The request is sent once unpaid; on a 402 with svcpay terms the command looks up what it
needs (held subscriptions, the token's decimals, the facilitator) and sends it again with
`PaymentAuth`, which pays within --max-amount: with an ACTIVE subscription you hold to an
offered plan, by subscribing with --subscribe, or once through the facilitator.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

import httpx
from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Confirmed
from solders.keypair import Keypair
from solders.pubkey import Pubkey

from svcpay.cli._common import (
    CliError,
    PaymentDeclined,
    Subparsers,
    UsageError,
    amount_arg,
    command,
    emit,
    format_units,
    load_signer,
    mint_decimals,
    run,
    stderr,
)
from svcpay.cli._errors import program_error_line
from svcpay.client import (
    InsufficientFunds,
    PaymentAuth,
    PaymentError,
    SpendingLimitExceeded,
)
from svcpay.program import pda
from svcpay.program.client import BillingClient
from svcpay.program.errors import ProgramError
from svcpay.protocol.headers import X_PAYMENT, X_SVC_SUB
from svcpay.protocol.models import PaymentRequired, ProtocolError
from svcpay.protocol.proof import parse_payment_proof

DEFAULT_MAX = "1"


def header_arg(text: str) -> tuple[str, str]:
    name, sep, value = text.partition(":")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"not a header: {text!r} (write 'Name: value')")
    return name.strip(), value.strip()


def _body(data: str | None) -> bytes | None:
    if data is None:
        return None
    if data == "@-":
        return sys.stdin.buffer.read()
    if data.startswith("@"):
        try:
            with open(os.path.expanduser(data[1:]), "rb") as fh:
                return fh.read()
        except OSError as e:
            raise UsageError(f"cannot read --data file {data[1:]}: {e.strerror}") from None
    return data.encode()


def _headers(pairs: list[tuple[str, str]], content: bytes | None) -> dict[str, str]:
    headers = dict(pairs)
    if content is not None and not any(k.lower() == "content-type" for k in headers):
        try:
            json.loads(content)
            headers["Content-Type"] = "application/json"
        except ValueError:
            headers["Content-Type"] = "text/plain; charset=utf-8"
    return headers


def _unreachable(e: httpx.TransportError, what: str) -> CliError:
    try:
        where = f"{e.request.url.scheme}://{e.request.url.netloc.decode()}"
    except RuntimeError:
        where = "the server"
    reason = str(e) or type(e).__name__
    return CliError(f"cannot reach {what} at {where} ({reason}): check the URL and that it runs")


def pay(args: argparse.Namespace) -> int:
    return run(_pay(args))


async def _pay(args: argparse.Namespace) -> int:
    content = _body(args.data)
    method = (args.method or ("POST" if content is not None else "GET")).upper()
    headers = _headers(args.header, content)
    async with httpx.AsyncClient(timeout=args.timeout) as http:
        try:
            first = await http.request(method, args.target, content=content, headers=headers)
        except httpx.TransportError as e:
            raise _unreachable(e, args.target) from None
        except httpx.InvalidURL as e:
            raise UsageError(f"not a URL: {args.target!r} ({e})") from None
        if first.status_code != 402:
            return _report(args, method, first, None)
        try:
            terms = PaymentRequired.parse(first.content)
        except ProtocolError as e:
            raise PaymentDeclined(
                f"{args.target} answered 402 without usable svcpay terms ({e.reason})"
            ) from None
        owner = load_signer(args)
        rpc = AsyncClient(args.url, commitment=Confirmed)
        try:
            return await _pay_with(args, method, content, headers, http, rpc, owner, terms)
        finally:
            await rpc.close()


async def _pay_with(
    args: argparse.Namespace,
    method: str,
    content: bytes | None,
    headers: dict[str, str],
    http: httpx.AsyncClient,
    rpc: AsyncClient,
    owner: Keypair,
    terms: PaymentRequired,
) -> int:
    billing = BillingClient(rpc)
    held: dict[str, str] = {}
    for option in terms.accepts:
        if option.is_subscription and option.svc and option.svc.plan_id:
            sub = pda.subscription_address(Pubkey.from_string(option.svc.plan_id), owner.pubkey())
            if await billing.is_active(sub):
                held[option.svc.plan_id] = str(sub)
    subscribable = [o for o in terms.accepts if o.is_subscription]
    one_time = [o for o in terms.accepts if not o.is_subscription]
    facilitator = args.facilitator or next(
        (o.svc.facilitator for o in terms.accepts if o.svc and o.svc.facilitator), None
    )
    if not held and not (args.subscribe and subscribable):
        if not one_time:
            plans = ", ".join(str(o.svc.plan_id) for o in subscribable if o.svc)
            raise PaymentDeclined(
                f"{args.target} is for subscribers of plan {plans} only: pass --subscribe "
                f"(the first period is charged now) or run `svcpay subscribe PLAN`"
            )
        if facilitator is None:
            raise UsageError(
                f"{args.target} asks for a one-time payment but names no facilitator: "
                f"pass --facilitator URL (or set SVCPAY_FACILITATOR_URL)"
            )
    decimals = {
        o.token: await mint_decimals(rpc, Pubkey.from_string(o.token)) for o in terms.accepts
    }
    limit = args.max_amount.to_base(decimals[terms.accepts[0].token])
    async with httpx.AsyncClient(
        base_url=facilitator or "http://facilitator.invalid", timeout=args.timeout
    ) as fac:
        auth = PaymentAuth(
            owner,
            rpc=rpc,
            facilitator=fac,
            max_per_request=limit,
            subscriptions=held,
            billing=billing if args.subscribe else None,
        )
        try:
            response = await http.request(
                method, args.target, content=content, headers=headers, auth=auth
            )
        except SpendingLimitExceeded as e:
            raise PaymentDeclined(
                f"SpendingLimitExceeded: {e}; nothing was paid: raise --max-amount "
                f"(now {format_units(limit, decimals[terms.accepts[0].token])}) to allow it"
            ) from None
        except InsufficientFunds as e:
            raise PaymentDeclined(
                f"InsufficientFunds: {e}: top up the token balance of {owner.pubkey()}"
            ) from None
        except PaymentError as e:
            raise PaymentDeclined(f"{type(e).__name__}: {e}") from None
        except ProgramError as e:
            raise PaymentDeclined(program_error_line(e)) from None
        except httpx.TransportError as e:
            target = e.request.url if _has_request(e) else None
            what = "the facilitator" if target and target.host == fac.base_url.host else args.target
            raise _unreachable(e, what) from None
    return _report(args, method, response, _payment(response, held, decimals))


def _has_request(e: httpx.TransportError) -> bool:
    try:
        e.request  # noqa: B018
    except RuntimeError:
        return False
    return True


def _payment(
    response: httpx.Response, held: dict[str, str], decimals: dict[str, int]
) -> dict[str, Any] | None:
    """What was paid for the request that got `response`."""
    request = response.request
    if X_PAYMENT in request.headers:
        proof = parse_payment_proof(request.headers[X_PAYMENT])
        return {
            "kind": "one-time",
            "amount": int(proof.amount),
            "amountDecimal": format_units(int(proof.amount), decimals.get(proof.token, 0)),
            "token": proof.token,
            "payTo": proof.pay_to,
            "transaction": proof.transaction,
            "facilitator": proof.facilitator,
        }
    if X_SVC_SUB in request.headers:
        sub = request.headers[X_SVC_SUB]
        return {"kind": "subscription", "subscription": sub, "new": sub not in held.values()}
    return None


def _payment_line(payment: dict[str, Any] | None) -> str:
    if payment is None:
        return "no payment"
    if payment["kind"] == "one-time":
        return (
            f"paid {payment['amountDecimal']} once ({payment['amount']} base units of "
            f"{payment['token']} to {payment['payTo']}), transaction {payment['transaction']}"
        )
    how = "subscribed: new subscription" if payment["new"] else "used subscription"
    return f"{how} {payment['subscription']} (X-Svc-Sub)"


def _report(
    args: argparse.Namespace,
    method: str,
    response: httpx.Response,
    payment: dict[str, Any] | None,
) -> int:
    try:
        body: Any = response.json()
        text = json.dumps(body, indent=2)
    except ValueError:
        body = text = response.text
    data = {
        "url": args.target,
        "method": method,
        "status": response.status_code,
        "payment": payment,
        "body": body,
    }
    status = f"HTTP {response.status_code} {response.reason_phrase}".rstrip()
    emit(args, data, [status, _payment_line(payment), "", text])
    if response.status_code == 402:
        why = ""
        if isinstance(body, dict) and body.get("error"):
            why = f": {body['error']}: {body.get('message') or ''}".rstrip(": ")
        stderr(f"svcpay pay: payment still required{why}")
        return 4
    if response.status_code >= 400:
        stderr(f"svcpay pay: {args.target} answered {status}")
        return 1
    return 0


def register(subparsers: Subparsers) -> None:
    p = command(
        subparsers,
        "pay",
        pay,
        help="fetch a gated URL, paying on 402",
        description="Requests URL; when it answers 402 with svcpay terms, pays within "
        "--max-amount and requests it again, then prints the status, the payment made and "
        "the body. An ACTIVE subscription of --keypair to an offered plan is used first; "
        "--subscribe allows subscribing; otherwise it pays once through the facilitator "
        "(--facilitator, or the one the terms name) from --keypair's associated token "
        "account. Exit 4 if the payment is declined or still required.",
        epilog="example:\n  svcpay pay http://localhost:8000/v1/data --max-amount 0.50 \\\n"
        "      --facilitator http://localhost:8001",
    )
    p.add_argument("target", metavar="URL", help="the gated resource")
    p.add_argument(
        "--method",
        "-X",
        type=str.upper,
        choices=["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD"],
        help="HTTP method (default: GET, or POST with --data)",
    )
    p.add_argument("--data", "-d", metavar="DATA", help="request body: text, @FILE or @- (stdin)")
    p.add_argument(
        "--header",
        "-H",
        type=header_arg,
        action="append",
        default=[],
        metavar="'NAME: VALUE'",
        help="an extra request header (repeatable)",
    )
    p.add_argument(
        "--max-amount",
        type=amount_arg,
        default=amount_arg(DEFAULT_MAX),
        metavar="AMOUNT",
        help=f"most to pay for this request, in token units (0.50) or base units (500000u) "
        f"(default: {DEFAULT_MAX})",
    )
    p.add_argument(
        "--facilitator",
        metavar="URL",
        default=os.environ.get("SVCPAY_FACILITATOR_URL"),
        help="facilitator for one-time payments (default: $SVCPAY_FACILITATOR_URL, else the "
        "one the 402 terms name)",
    )
    p.add_argument(
        "--subscribe",
        action="store_true",
        help="subscribe to an offered plan if you hold no subscription (charges a period)",
    )
    p.add_argument(
        "--timeout", type=float, default=60.0, metavar="SECS", help="HTTP timeout (default: 60)"
    )
