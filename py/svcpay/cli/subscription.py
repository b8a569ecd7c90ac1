"""`svcpay subscribe` and `svcpay subscription show|allowance|pause|resume|cancel`."""

from __future__ import annotations

import argparse
from typing import Any

from solders.keypair import Keypair
from solders.pubkey import Pubkey
from spl.token.instructions import get_associated_token_address

from svcpay.cli._common import (
    CliError,
    NotFound,
    Subparsers,
    amount_arg,
    billing_client,
    check_token_account,
    command,
    emit,
    format_duration,
    format_time,
    format_units,
    load_signer,
    pubkey_arg,
    refuse_frozen,
    run,
    send,
    subcommands,
    table,
)
from svcpay.cli.plan import AMOUNTS, fetch_plan
from svcpay.program.borsh import AccountInvalidDiscriminator
from svcpay.program.client import BillingClient, Receipt, status_name
from svcpay.program.generated.accounts.allowance import Allowance
from svcpay.program.generated.accounts.subscription import Subscription

SUB_HELP = "the subscription id (its address, sent in X-Svc-Sub)"


async def fetch_subscription(
    billing: BillingClient, address: Pubkey
) -> tuple[Subscription, Allowance | None]:
    """The subscription at `address` and its allowance; NotFound if there is none."""
    try:
        sub = await billing.fetch_subscription(address)
    except AccountInvalidDiscriminator:
        raise NotFound(
            f"{address} is a svc_billing account but not a subscription (a plan id?)"
        ) from None
    if sub is None:
        raise NotFound(f"no subscription at {address}: check the id and --url")
    allowance = await billing.fetch_allowance(address) if sub.has_allowance else None
    return sub, allowance


def party_name(party: object | None) -> str | None:
    """ "subscriber" or "provider" for a recorded decision, None when there is none."""
    return None if party is None else type(party).__name__.lower()


def subscription_json(
    address: Pubkey, sub: Subscription, allowance: Allowance | None
) -> dict[str, Any]:
    terms = sub.terms
    return {
        "subscription": str(address),
        "plan": str(sub.plan),
        "subscriber": str(sub.subscriber),
        "tokenAccount": str(sub.token_account),
        "status": status_name(sub),
        "cancelAtPeriodEnd": sub.cancel_at_period_end,
        "cancelRequestedBy": party_name(sub.cancel_requested_by),
        "pausedBy": party_name(sub.paused_by),
        "mint": str(terms.mint),
        "decimals": terms.decimals,
        "amount": terms.amount,
        "amountDecimal": format_units(terms.amount, terms.decimals),
        "periodSecs": terms.period_secs,
        "destination": str(terms.destination),
        "createdAt": sub.created_at,
        "currentPeriodStart": sub.current_period_start,
        "currentPeriodEnd": sub.current_period_end,
        "pastDueSince": sub.past_due_since,
        "pausedAt": sub.paused_at,
        "cyclesBilled": sub.cycles_billed,
        "totalPaid": sub.total_paid,
        "allowance": None
        if allowance is None
        else {
            "cap": allowance.cap,
            "used": allowance.used,
            "totalDeducted": allowance.total_deducted,
            "cycle": allowance.cycle,
        },
    }


def subscription_lines(
    address: Pubkey, sub: Subscription, allowance: Allowance | None
) -> list[str]:
    terms, status = sub.terms, status_name(sub)
    if sub.cancel_at_period_end and status == "Active":
        by = party_name(sub.cancel_requested_by)
        status += f" (cancels at {format_time(sub.current_period_end)}, asked by the {by})"
    elif status == "Paused":
        status += f" since {format_time(sub.paused_at)} by the {party_name(sub.paused_by)}"
    elif status == "PastDue":
        status += f" since {format_time(sub.past_due_since)}"
    rows: list[tuple[str, object]] = [
        ("subscription", address),
        ("status", status),
        ("plan", sub.plan),
        ("subscriber", sub.subscriber),
        ("paying account", sub.token_account),
        ("price", f"{format_units(terms.amount, terms.decimals)} every "
                  f"{format_duration(terms.period_secs)} of {terms.mint}"),
        ("period", f"{format_time(sub.current_period_start)} to "
                   f"{format_time(sub.current_period_end)}"),
        ("paid", f"{format_units(sub.total_paid, terms.decimals)} over "
                 f"{sub.cycles_billed} cycles"),
    ]  # fmt: skip
    if allowance is not None:
        used, cap = (format_units(v, terms.decimals) for v in (allowance.used, allowance.cap))
        rows.append(("allowance", f"{used} of {cap} used this cycle"))
    return table(rows)


# -- handlers -------------------------------------------------------------------------------
def subscribe(args: argparse.Namespace) -> int:
    subscriber = load_signer(args)
    return run(_subscribe(args, subscriber))


async def _subscribe(args: argparse.Namespace, subscriber: Keypair) -> int:
    async with billing_client(args) as billing:
        plan = await fetch_plan(billing, args.plan)
        cap = args.allowance_cap.to_base(plan.decimals) if args.allowance_cap else None
        program = await billing.tokens.program(plan.mint)  # SPL Token or Token-2022
        source = args.token_account or get_associated_token_address(
            subscriber.pubkey(), plan.mint, program
        )
        paying = await check_token_account(
            billing.rpc,
            source,
            what="paying token account",
            mint=plan.mint,
            owner=subscriber.pubkey(),
        )
        if source == plan.destination:
            raise CliError(
                f"{source} is the plan's own destination: pay from another account "
                f"(--token-account) or subscribe with another --keypair"
            )
        held = await billing.held_subscription(args.plan, subscriber.pubkey())
        if held is None:
            await refuse_frozen(billing.rpc, paying, what="the paying token account", can="pay")
            address = await send(
                lambda: billing.subscribe(
                    args.plan, subscriber, max_overage=cap, token_account=args.token_account
                )
            )
            said = "subscribed"
        else:
            address, said = held[0], "already subscribed, nothing charged"
            if cap is not None:  # the allowance asked for, on the subscription held
                said += "; " + (await _set_allowance(billing, address, cap, subscriber))[1]
        sub, allowance = await fetch_subscription(billing, address)
    lines = [f"{said}: subscription id {address} (send it in X-Svc-Sub)"]
    emit(
        args,
        subscription_json(address, sub, allowance),
        [*lines, *subscription_lines(address, sub, allowance)],
    )
    return 0


def show(args: argparse.Namespace) -> int:
    return run(_show(args))


async def _show(args: argparse.Namespace) -> int:
    async with billing_client(args) as billing:
        sub, allowance = await fetch_subscription(billing, args.subscription)
    address = args.subscription
    emit(
        args,
        subscription_json(address, sub, allowance),
        subscription_lines(address, sub, allowance),
    )
    return 0


async def _set_allowance(
    billing: BillingClient, address: Pubkey, cap: int, subscriber: Keypair
) -> tuple[str, str]:
    """Sets the metered cap of `address`, adding the allowance if it has none; what was done
    ("added", "changed" or "unchanged") and a line saying so."""
    sub, allowance = await fetch_subscription(billing, address)
    if sub.subscriber != subscriber.pubkey():
        raise CliError(
            f"{address} is {sub.subscriber}'s subscription: only its subscriber may set its "
            "allowance (--keypair)"
        )
    shown = format_units(cap, sub.terms.decimals)
    if allowance is None:
        await send(lambda: billing.set_allowance(address, cap, subscriber))
        return "added", f"allowance added: {shown} per cycle"
    if allowance.cap == cap:
        return "unchanged", f"allowance already {shown} per cycle"
    await send(lambda: billing.set_allowance(address, cap, subscriber))
    was = format_units(allowance.cap, sub.terms.decimals)
    return "changed", f"allowance cap {was} -> {shown} per cycle"


def allowance(args: argparse.Namespace) -> int:
    subscriber = load_signer(args)
    return run(_allowance(args, subscriber))


async def _allowance(args: argparse.Namespace, subscriber: Keypair) -> int:
    address: Pubkey = args.subscription
    async with billing_client(args) as billing:
        sub, _ = await fetch_subscription(billing, address)
        action, done = await _set_allowance(
            billing, address, args.cap.to_base(sub.terms.decimals), subscriber
        )
        sub, held = await fetch_subscription(billing, address)
    data = {**subscription_json(address, sub, held), "action": action}
    emit(args, data, [done, *subscription_lines(address, sub, held)])
    return 0


def _change(action: str) -> Any:
    """The handler of pause, resume or cancel: by the subscriber or the plan's authority."""

    def handler(args: argparse.Namespace) -> int:
        signer = load_signer(args)
        return run(_act(args, action, signer))

    return handler


async def _act(args: argparse.Namespace, action: str, signer: Keypair) -> int:
    address: Pubkey = args.subscription
    async with billing_client(args) as billing:
        await fetch_subscription(billing, address)
        receipt: Receipt
        if action == "pause":
            receipt = await send(lambda: billing.pause(address, signer))
        elif action == "resume":
            receipt = await send(lambda: billing.resume(address, signer))
        else:
            at_end = bool(args.at_period_end)
            receipt = await send(lambda: billing.cancel(address, signer, at_period_end=at_end))
        sub, allowance = await fetch_subscription(billing, address)
    if action == "cancel" and args.at_period_end:
        done = f"subscription {address} cancels at {format_time(sub.current_period_end)}"
    else:
        done = f"subscription {address} is now {status_name(sub)}"
    data = {**subscription_json(address, sub, allowance), "signature": receipt.signature}
    emit(args, data, [done, f"transaction {receipt.signature}"])
    return 0


def register(subparsers: Subparsers) -> None:
    p = command(
        subparsers,
        "subscribe",
        subscribe,
        help="subscribe to a plan (the first period is charged at once)",
        description="Subscribes --keypair to PLAN: the first period is paid at once from "
        "--token-account, and the billing authority renews it every period. Prints the "
        "subscription id to send in X-Svc-Sub. With --allowance-cap, metered usage may also "
        "be charged up to that much per cycle.",
        epilog=AMOUNTS,
    )
    p.add_argument("plan", type=pubkey_arg, metavar="PLAN", help="the plan's address (planId)")
    p.add_argument(
        "--token-account",
        type=pubkey_arg,
        metavar="ACCOUNT",
        help="the token account to pay from (default: your associated account of the mint)",
    )
    p.add_argument(
        "--allowance-cap",
        "--max-overage",
        dest="allowance_cap",
        type=amount_arg,
        metavar="AMOUNT",
        help="metered allowance per cycle (the spec's maxOverage), e.g. 20 or 20000000u",
    )

    group = command(
        subparsers,
        "subscription",
        None,
        help="show a subscription, set its allowance, pause, resume or cancel it",
        description="A subscription, named by its id (the address sent in X-Svc-Sub). Pause, "
        "resume and cancel are signed by --keypair: the subscriber or the plan's authority.",
        global_options=False,
    )
    sub = subcommands(group, "subscription commands")
    p = command(
        sub,
        "show",
        show,
        help="show a subscription and its allowance",
        description="Shows a subscription's status, terms, period, payments and allowance.",
    )
    p.add_argument("subscription", type=pubkey_arg, metavar="SUB", help=SUB_HELP)
    p = command(
        sub,
        "allowance",
        allowance,
        help="set a subscription's metered allowance per cycle (adding one if it has none)",
        description="Sets the metered allowance of SUB (the cap on usage charged per cycle, "
        "the spec's maxOverage), signed by its subscriber (--keypair). A subscription made "
        "without one (e.g. by `svcpay pay --yes`) gets one; the subscriber pays its rent, "
        "returned when the subscription is closed.",
        epilog=AMOUNTS,
    )
    p.add_argument("subscription", type=pubkey_arg, metavar="SUB", help=SUB_HELP)
    p.add_argument("cap", type=amount_arg, metavar="AMOUNT", help="per cycle, e.g. 20 or 20000000u")
    for action, short, text in (
        ("pause", "pause a subscription (no access, no charges)",
         "Pauses an ACTIVE subscription: access stops and nothing is charged until it resumes."),
        ("resume", "resume a paused subscription",
         "Resumes a paused subscription, crediting the paid time that was left."),
        ("cancel", "cancel a subscription, now or at the period's end",
         "Cancels a subscription now, or with --at-period-end when the paid period ends "
         "(access continues until then)."),
    ):  # fmt: skip
        p = command(sub, action, _change(action), help=short, description=text)
        p.add_argument("subscription", type=pubkey_arg, metavar="SUB", help=SUB_HELP)
        if action == "cancel":
            p.add_argument(
                "--at-period-end",
                action="store_true",
                help="end when the current paid period ends instead of now",
            )
