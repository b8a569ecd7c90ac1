"""`svcpay pay URL`: fetch a gated URL, paying (or using a subscription) as the 402 asks.

The request is sent once unpaid. On a 402 with svcpay terms the command looks up what it
needs (held subscriptions, the token's decimals, the facilitator the terms name) and sends
it again with `PaymentAuth`, which pays within --max-amount: with an ACTIVE subscription
you hold to an offered plan, by subscribing (after a confirmation, or with --yes or
--subscribe), or once through the facilitator. On an x402 402 (`PAYMENT-REQUIRED`, or a v1
body) the same `PaymentAuth` pays the server's `exact` price on Solana and the server
settles it; on a 402 with only MPP `solana`/`charge` challenges (`WWW-Authenticate:
Payment`), it pays the charge and the server answers with `Payment-Receipt`. When a 402
offers several, svcpay's own terms come first, then x402, then MPP; `--protocol` picks one.
A keypair and the URL are all it needs.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

import httpx
from solana.rpc.async_api import AsyncClient
from solders.keypair import Keypair
from solders.pubkey import Pubkey

from svcpay.cli._common import (
    NotFound,
    PaymentDeclined,
    Subparsers,
    UsageError,
    amount_arg,
    command,
    format_duration,
    format_units,
    load_signer,
    mint_decimals,
    run,
    seconds_arg,
)
from svcpay.cli.pay_report import payment_of, report, with_cost, x402_payment
from svcpay.cli.pay_request import Request, body_of, header_arg, headers_of, over_limit, unreachable
from svcpay.client import PaymentAuth, SpendingLimitExceeded
from svcpay.program import pda
from svcpay.program.client import BillingClient
from svcpay.protocol import mpp
from svcpay.protocol.models import PaymentOption, PaymentRequired, ProtocolError
from svcpay.rpc import connect
from svcpay.schemes.mpp_charge import client as charge_client
from svcpay.schemes.session.client import SessionOffer, Tabs, tab_key
from svcpay.schemes.x402_exact import client as x402
from svcpay.schemes.x402_exact.wire import CAIP2

DEFAULT_MAX = "1"


def pay(args: argparse.Namespace) -> int:
    return run(_pay(args))


async def _pay(args: argparse.Namespace) -> int:
    content = body_of(args.data)
    method = (args.method or ("POST" if content is not None else "GET")).upper()
    headers = headers_of(args.header, content)
    try:
        target = httpx.URL(args.target)
    except httpx.InvalidURL as e:
        raise UsageError(f"not a URL: {args.target!r} ({e})") from None
    if target.scheme not in ("http", "https") or not target.host:
        raise UsageError(
            f"not a URL: {args.target!r}: give an http:// or https:// URL, "
            "e.g. http://127.0.0.1:8000/v1/data"
        )
    async with httpx.AsyncClient(timeout=args.timeout) as http:
        try:
            first = await http.request(method, args.target, content=content, headers=headers)
        except httpx.TransportError as e:
            raise unreachable(e, args.target) from None
        except httpx.InvalidURL as e:
            raise UsageError(f"not a URL: {args.target!r} ({e})") from None
        if first.status_code != 402:
            return report(args, method, first, None)
        request = Request(args, method, content, headers, http)
        offer = _session_offer(first)
        if offer is not None and (args.session or _only_sessions(first)):
            if not args.session:
                raise PaymentDeclined(
                    f"{args.target} is paid by an MPP session (a deposit escrowed on chain, "
                    "one voucher per call): pass --session to open one (or go on with yours)"
                )
            owner = load_signer(args)
            rpc = connect(args.url)
            try:
                return await _pay_session(request, rpc, owner, offer)
            finally:
                await rpc.close()
        try:
            terms: PaymentRequired | None = PaymentRequired.parse(first.content)
        except ProtocolError as e:
            terms, why = None, e.reason
        try:
            required = x402.payment_required(first)
        except ProtocolError as e:
            required, why = None, f"x402: {e.reason}"
        charges = charge_client.offers(first.headers.get_list("www-authenticate"))
        chosen = args.protocol
        if chosen is None:  # svcpay's own, then x402, then MPP (PaymentAuth's preference)
            chosen = next(
                (n for n, o in (("svcpay", terms), ("x402", required), ("mpp", charges)) if o),
                None,
            )
        if chosen is None:
            raise PaymentDeclined(
                f"{args.target} answered 402 without usable svcpay, x402 or MPP terms ({why})"
            )
        offered = {"svcpay": terms, "x402": required, "mpp": charges}[chosen]
        if not offered:
            raise PaymentDeclined(f"{args.target} offers no {chosen} payment (--protocol)")
        owner = load_signer(args)
        rpc = connect(args.url)
        try:
            if chosen == "svcpay":
                assert terms is not None
                return await _pay_with(request, rpc, owner, terms, required)
            if chosen == "x402":
                assert required is not None
                return await _pay_x402(request, rpc, owner, required)
            return await _pay_mpp(request, rpc, owner, charges)
        finally:
            await rpc.close()


async def _pay_with(
    request: Request,
    rpc: AsyncClient,
    owner: Keypair,
    terms: PaymentRequired,
    required: x402.AnyRequired | None,
) -> int:
    """Pays svcpay's terms: a held subscription, a new one (confirmed), or once."""
    args = request.args
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
    decimals = {
        o.token: await mint_decimals(rpc, Pubkey.from_string(o.token)) for o in terms.accepts
    }
    first_token = terms.accepts[0].token
    limit = args.max_amount.to_base(decimals[first_token])
    subscribe = False
    if not held and subscribable and (args.subscribe or not one_time):
        option = subscribable[0]
        if option.amount_units > limit:
            raise PaymentDeclined(
                f"SpendingLimitExceeded: subscribing costs {option.amount_units} base units "
                f"now, above the limit {limit}; nothing was paid: raise --max-amount (now "
                f"{format_units(limit, decimals[first_token])}) to allow it"
            )
        _confirm_subscription(args, option, decimals[option.token])
        subscribe = True
    elif not held and facilitator is None:
        if required is not None:  # the gate speaks x402 too: pay that way, no facilitator
            return await _pay_x402(request, rpc, owner, required)
        raise UsageError(
            f"{args.target} asks for a one-time payment but names no facilitator: "
            f"pass --facilitator URL (or set SVCPAY_FACILITATOR_URL)"
        )
    async with httpx.AsyncClient(
        base_url=facilitator or "http://facilitator.invalid", timeout=args.timeout
    ) as fac:
        auth = PaymentAuth(
            owner,
            rpc=rpc,
            facilitator=fac,
            max_per_request=limit,
            subscriptions=held,
            billing=billing if subscribe else None,
        )
        try:
            response = await request.send(auth, fac.base_url)
        except SpendingLimitExceeded as e:
            raise over_limit(e, limit, decimals[first_token]) from None
    payment = with_cost(payment_of(response, held, decimals), auth, decimals)
    return report(args, request.method, response, payment)


def _confirm_subscription(args: argparse.Namespace, option: PaymentOption, decimals: int) -> None:
    """Subscribing charges a period now: asks on a terminal, unless --yes or --subscribe
    said so already; declines otherwise."""
    assert option.svc is not None
    plan, every = option.svc.plan_id, format_duration(option.svc.interval or 0)
    what = f"{format_units(option.amount_units, decimals)} of {option.token} every {every}"
    if args.yes or args.subscribe:
        return
    if sys.stdin is not None and sys.stdin.isatty():
        print(f"Subscribe to plan {plan} ({what}, the first period charged now)? [y/N] ",
              end="", file=sys.stderr, flush=True)  # fmt: skip
        if sys.stdin.readline().strip().lower() in ("y", "yes"):
            return
        raise PaymentDeclined("not subscribing; nothing was paid")
    raise PaymentDeclined(
        f"{args.target} is for subscribers of plan {plan} ({what}): pass --yes (or "
        f"--subscribe) to subscribe, charging the first period now, or run `svcpay "
        f"subscribe PLAN`"
    )


async def _pay_x402(
    request: Request, rpc: AsyncClient, owner: Keypair, required: x402.AnyRequired
) -> int:
    """Pays an x402 server's `exact` price on Solana; the server settles it."""
    args = request.args
    options = x402.solana_options(required, CAIP2)
    if not options:
        offered = ", ".join(sorted({f"{o.scheme} on {o.network}" for o in required.accepts}))
        raise PaymentDeclined(
            f"{args.target} offers no x402 exact payment on Solana (it offers {offered})"
        )
    asset = options[0].asset  # --max-amount is in its units: pay in it only
    try:
        mint = await x402.read_mint(rpc, Pubkey.from_string(asset))
    except x402.CannotPay as e:
        raise NotFound(f"{e}: check --url") from None
    limit = args.max_amount.to_base(mint.decimals)
    auth = PaymentAuth(
        owner, rpc=rpc, max_per_request=limit, allowed_tokens={asset}, protocols=("x402",)
    )
    try:
        response = await request.send(auth)
    except SpendingLimitExceeded as e:
        raise over_limit(e, limit, mint.decimals) from None
    return report(args, request.method, response, x402_payment(response))


async def _pay_mpp(
    request: Request, rpc: AsyncClient, owner: Keypair, charges: list[charge_client.ChargeOffer]
) -> int:
    """Pays an MPP `solana`/`charge` challenge (pull: the server pays the fee); the server
    answers with `Payment-Receipt`."""
    asset = charges[0].mint  # --max-amount is in its units: pay in it only
    try:
        mint = await x402.read_mint(rpc, Pubkey.from_string(asset))
    except x402.CannotPay as e:
        raise NotFound(f"{e}: check --url") from None
    limit = request.args.max_amount.to_base(mint.decimals)
    auth = PaymentAuth(
        owner, rpc=rpc, max_per_request=limit, allowed_tokens={asset}, protocols=("mpp",)
    )
    try:
        response = await request.send(auth)
    except SpendingLimitExceeded as e:
        raise over_limit(e, limit, mint.decimals) from None
    payment: dict[str, Any] | None = None
    if (value := response.headers.get("payment-receipt")) is not None:
        try:
            receipt = mpp.Receipt.parse(value)
        except mpp.MppError:
            receipt = None
        if receipt is not None:
            offer = next((c for c in charges if c.challenge.id == receipt.challenge_id), charges[0])
            payment = {
                "kind": "mpp",
                "intent": "charge",
                "amount": offer.amount,
                "amountDecimal": format_units(offer.amount, mint.decimals),
                "token": asset,
                "recipient": offer.recipient,
                "transaction": receipt.reference,
                "receipt": {"status": receipt.status, "method": receipt.method, **receipt.extra},
            }
    payment = with_cost(payment, auth, {asset: mint.decimals})
    return report(request.args, request.method, response, payment)


def _session_offer(response: httpx.Response) -> SessionOffer | None:
    found = mpp.parse_challenges(response.headers.get_list("www-authenticate"))
    return next((o for c in found if (o := SessionOffer.parse(c)) is not None), None)


def _only_sessions(response: httpx.Response) -> bool:
    """The 402 offers nothing but MPP challenges (its body is MPP's problem)."""
    return "payment-required" not in response.headers and response.headers.get(
        "content-type", ""
    ).startswith("application/problem+json")


def tabs_path() -> Path:
    """Where `svcpay pay --session` keeps its open sessions: $SVCPAY_TABS, else the XDG
    data directory's svcpay/tabs.json."""
    if os.environ.get("SVCPAY_TABS"):
        return Path(os.environ["SVCPAY_TABS"])
    data_home = os.environ.get("XDG_DATA_HOME") or ""
    base = Path(data_home) if Path(data_home).is_absolute() else Path.home() / ".local/share"
    return base / "svcpay" / "tabs.json"


async def _pay_session(
    request: Request, rpc: AsyncClient, owner: Keypair, offer: SessionOffer
) -> int:
    """Pays with a voucher on the session kept for this gate (opened, or topped up, within
    --max-amount, which caps the deposit)."""
    args = request.args
    decimals = await mint_decimals(rpc, offer.currency)
    limit = args.max_amount.to_base(decimals)
    tabs = Tabs(tabs_path())
    deposit = args.deposit.to_base(decimals) if args.deposit is not None else None
    auth = PaymentAuth(
        owner,
        rpc=rpc,
        billing=BillingClient(rpc),
        max_per_request=limit,
        session_deposit=deposit,
        tabs=tabs,
        allowed_tokens={str(offer.currency)},
    )
    try:
        response = await request.send(auth)
    except SpendingLimitExceeded as e:
        raise over_limit(e, limit, decimals) from None
    tab = tabs.get(tab_key(offer))
    payment = None
    receipt = response.headers.get("payment-receipt")
    if tab is not None and receipt:
        payment = {
            "kind": "session",
            "session": str(tab.channel),
            "amount": offer.amount,
            "amountDecimal": format_units(offer.amount, decimals),
            "token": str(offer.currency),
            "cumulative": tab.cumulative,
            "deposit": tab.deposit,
            "left": tab.left(),
            "leftDecimal": format_units(tab.left(), decimals),
        }
    return report(args, request.method, response, payment)


def register(subparsers: Subparsers) -> None:
    p = command(
        subparsers,
        "pay",
        pay,
        help="fetch a gated URL, paying on 402",
        description="Requests URL; when it answers 402 with svcpay or x402 terms, pays within "
        "--max-amount and requests it again, then prints the status, the payment made and "
        "the body. svcpay terms: an ACTIVE subscription of --keypair to an offered plan is "
        "used first; a route for subscribers only offers to subscribe (asking first, unless "
        "--yes); --subscribe prefers subscribing to a one-time price; otherwise it pays once "
        "through the facilitator the terms name (or --facilitator). x402 terms: it pays the "
        "`exact` price on Solana and the server settles it. MPP session offers (--session): a "
        "voucher on your session for that gate. Payments come from --keypair's "
        "associated token account. Exit 4 if the payment is declined or still required.",
        # The example API's routes (`svcpay example serve`, on its default port).
        epilog="examples:\n  svcpay pay http://localhost:8000/v1/data --max-amount 0.50\n"
        "  svcpay pay http://localhost:8000/v1/quote --session --max-amount 1\n"
        "  svcpay pay http://localhost:8000/v1/resource --max-amount 10 --yes",
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
        help="subscribe to an offered plan if you hold no subscription, even where a "
        "one-time price is offered (charges a period, without asking)",
    )
    p.add_argument(
        "--yes",
        "-y",
        action="store_true",
        help="subscribe without asking where the URL is for subscribers only",
    )
    p.add_argument(
        "--session",
        action="store_true",
        help="pay an MPP session offer with a voucher on your session for this gate, opening "
        "one (escrowing the deposit, within --max-amount) if you have none; sessions are kept "
        "in $SVCPAY_TABS (default ~/.local/share/svcpay/tabs.json); see `svcpay session`",
    )
    p.add_argument(
        "--deposit",
        type=amount_arg,
        metavar="AMOUNT",
        help="what a new session escrows (default: the gate's suggested deposit), at most "
        "--max-amount",
    )
    p.add_argument(
        "--protocol",
        choices=["svcpay", "x402", "mpp"],
        help="pay a one-time price with this protocol (default: svcpay's own when offered, "
        "then x402, then MPP charge)",
    )
    p.add_argument(
        "--timeout",
        type=seconds_arg,
        default=60.0,
        metavar="SECS",
        help="HTTP timeout (default: 60)",
    )
