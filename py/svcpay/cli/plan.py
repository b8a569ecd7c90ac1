"""`svcpay plan create|list|show|deprecate`: a provider's plans on svc_billing."""

from __future__ import annotations

import argparse
from typing import Any

from base58 import b58encode
from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Confirmed
from solana.rpc.models import MemcmpOpts
from solders.keypair import Keypair
from solders.pubkey import Pubkey

from svcpay.cli._common import (
    CliError,
    NotFound,
    Subparsers,
    TokenAccount,
    amount_arg,
    billing_client,
    check_token_account,
    command,
    emit,
    fetch_mint_info,
    format_duration,
    format_time,
    format_units,
    load_signer,
    parse_duration,
    period_arg,
    pubkey_arg,
    run,
    send,
    stderr,
    subcommands,
    table,
    token_program_name,
    u64_arg,
)
from svcpay.cli._mints import MINT_HELP, mint_arg, resolve_mint
from svcpay.cli.token import extension_name
from svcpay.program import pda
from svcpay.program.borsh import AccountInvalidDiscriminator
from svcpay.program.client import BillingClient
from svcpay.program.errors import ProgramError, error_class
from svcpay.program.generated.accounts.plan import Plan
from svcpay.protocol.token2022 import ExtensionType as ET
from svcpay.protocol.token2022 import MintInfo

PLAN_HELP = "the plan's address (its planId), or its number among --authority's plans"

AMOUNTS = """\
amounts: token units scaled by the mint's decimals (9.99 is 9990000 base units of a
  6-decimal token), or base units with a u suffix (9990000u)"""
DURATIONS = "durations: 30d, 12h, 90m, 3600s, 1w, 1d12h, or bare seconds (3600)"


def plan_ref(text: str) -> Pubkey | int:
    """A plan address, or a plan number (resolved against --authority)."""
    text = text.strip()
    if text.isdigit() and len(text) <= 20:  # addresses are 32 to 44 characters
        return u64_arg(text)
    return pubkey_arg(text)


def resolve_plan(args: argparse.Namespace, ref: Pubkey | int) -> Pubkey:
    if isinstance(ref, Pubkey):
        return ref
    authority = args.authority if args.authority else load_signer(args).pubkey()
    return pda.plan_address(authority, ref)


async def fetch_plan(billing: BillingClient, address: Pubkey) -> Plan:
    """The plan at `address`; NotFound if there is none."""
    try:
        plan = await billing.fetch_plan(address)
    except AccountInvalidDiscriminator:
        raise NotFound(
            f"{address} is a svc_billing account but not a plan (a subscription id?)"
        ) from None
    if plan is None:
        raise NotFound(f"no plan at {address}: check the address (`svcpay plan list`) and --url")
    return plan


def plan_json(address: Pubkey, plan: Plan) -> dict[str, Any]:
    return {
        "plan": str(address),
        "planId": plan.plan_id,
        "authority": str(plan.authority),
        "status": type(plan.status).__name__,
        "mint": str(plan.mint),
        "decimals": plan.decimals,
        "amount": plan.amount,
        "amountDecimal": format_units(plan.amount, plan.decimals),
        "periodSecs": plan.period_secs,
        "graceSecs": plan.grace_secs,
        "destination": str(plan.destination),
        "billingAuthority": str(plan.billing_authority),
        "createdAt": plan.created_at,
        "liveSubscriptions": plan.live_subscriptions,
        "totalSubscriptions": plan.total_subscriptions,
        "totalCollected": plan.total_collected,
    }


def plan_lines(address: Pubkey, plan: Plan, token_program: Pubkey | None = None) -> list[str]:
    """A plan's terms and counters (with its mint's token program where it was read)."""
    program = [("token program", token_program_name(token_program))] if token_program else []
    price = format_units(plan.amount, plan.decimals)
    collected = format_units(plan.total_collected, plan.decimals)
    return table(
        [
            ("plan", address),
            ("plan number", f"{plan.plan_id} of {plan.authority}"),
            ("status", type(plan.status).__name__),
            ("price", f"{price} every {format_duration(plan.period_secs)} "
                      f"({plan.amount} base units)"),
            ("mint", f"{plan.mint} ({plan.decimals} decimals)"),
            *program,
            ("grace", format_duration(plan.grace_secs)),
            ("destination", plan.destination),
            ("billing authority", plan.billing_authority),
            ("created", format_time(plan.created_at)),
            ("subscriptions", f"{plan.live_subscriptions} live, {plan.total_subscriptions} in all"),
            ("collected", f"{collected} ({plan.total_collected} base units)"),
        ]
    )  # fmt: skip


# -- handlers -------------------------------------------------------------------------------
def create(args: argparse.Namespace) -> int:
    authority = load_signer(args)
    return run(_create(args, authority))


async def _create(args: argparse.Namespace, authority: Keypair) -> int:
    async with billing_client(args) as billing:
        args.mint = await resolve_mint(billing.rpc, args.mint)
        mint = await fetch_mint_info(billing.rpc, args.mint)
        amount = args.amount.to_base(mint.decimals)
        destination = await check_token_account(
            billing.rpc, args.destination, what="--destination token account", mint=args.mint
        )
        address = pda.plan_address(authority.pubkey(), args.plan_id)
        if (await billing.rpc.get_account_info(address, Confirmed)).value is not None:
            raise CliError(
                f"plan number {args.plan_id} of {authority.pubkey()} already exists at "
                f"{address}: pick another --plan-id"
            )
        refuse_what_the_program_refuses(mint, destination)
        await refuse_an_absent_hook(billing.rpc, mint)
        epoch = 0  # a fee's schedule depends on the epoch
        if mint.has(ET.TRANSFER_FEE_CONFIG):
            epoch = (await billing.rpc.get_epoch_info(Confirmed)).value.epoch
        warnings = mint_warnings(mint, amount, epoch)
        if not args.json:  # with --json they are in the answer
            for warning in warnings:
                stderr(f"svcpay: warning: {warning['message']}")
        await send(
            lambda: billing.create_plan(
                authority,
                plan_id=args.plan_id,
                mint=args.mint,
                destination=args.destination,
                billing_authority=args.billing_authority or authority.pubkey(),
                amount=amount,
                period_secs=args.period,
                grace_secs=args.grace,
            )
        )
        plan = await fetch_plan(billing, address)
    data = {**plan_json(address, plan), "tokenProgram": str(mint.program), "warnings": warnings}
    emit(args, data, [f"created plan {address}", *plan_lines(address, plan, mint.program)])
    return 0


# -- what a mint's extensions mean for a plan (docs/adr/0030) ----------------------------------
def refuse_what_the_program_refuses(mint: MintInfo, destination: TokenAccount) -> None:
    """Raises, before anything is sent, what create_plan would fail with, in the program's
    own words: a non-transferable mint, an extension newer than the program knows, a
    destination that requires memos or is frozen."""
    if mint.non_transferable:
        raise _program_error("MintNonTransferable")
    if mint.unknown_extensions:
        types = ", ".join(str(n) for n in mint.unknown_extensions)
        raise _program_error("UnsupportedMintExtension", f" (extension type {types})")
    account = destination.info
    if account is not None and account.memo_required:
        raise _program_error("DestinationRequiresMemo")
    if account is not None and account.frozen:
        thaw = (
            f"{mint.freeze_authority}" if mint.freeze_authority else "nobody (no freeze authority)"
        )
        raise CliError(
            f"--destination token account {destination.address} is frozen, and the program "
            f"refuses a frozen destination: only the mint's freeze authority, {thaw}, can "
            f"thaw it"
        )


async def refuse_an_absent_hook(rpc: AsyncClient, mint: MintInfo) -> None:
    """Raises when the mint's transfer hook names a program this cluster does not run:
    Token-2022 calls it on every transfer, so no subscriber could pay the plan (issue 38)."""
    hook = mint.hook_program
    if hook is None:
        return
    account = (await rpc.get_account_info(hook, Confirmed)).value
    if account is None or not account.executable:
        what = "no account" if account is None else "an account that is not a program"
        raise CliError(
            f"the mint's transfer hook names program {hook}, and this cluster has {what} "
            f"there: Token-2022 calls it on every transfer, so no subscriber could pay. "
            f"Deploy the hook program first, or check --url"
        )


def _program_error(name: str, detail: str = "") -> ProgramError:
    cls = error_class(name)
    return cls((cls.__doc__ or name) + detail)


def mint_warnings(mint: MintInfo, amount: int, epoch: int) -> list[dict[str, str]]:
    """One warning for each of the mint's extensions that changes what a payment in it
    means ({"extension", "message"}), for a plan priced at `amount` base units."""
    found: list[dict[str, str]] = []

    def warn(kind: ET, message: str) -> None:
        found.append({"extension": extension_name(kind), "message": message})

    def units(value: int) -> str:
        return format_units(value, mint.decimals)

    fees = mint.fee_config
    if fees is not None:
        now = fees.schedule(epoch)
        fee = now.fee(amount)
        text = (
            f"transfer fee: the provider receives the price less the fee, {now.basis_points} "
            f"bps up to {units(now.maximum_fee)} (on this price, {units(amount)}: "
            f"{units(fee)} withheld, {units(amount - fee)} received)"
        )
        if fees.newer != now:
            later = fees.newer
            text += (
                f"; from epoch {later.epoch}: {later.basis_points} bps up to "
                f"{units(later.maximum_fee)}"
            )
        if fees.config_authority is not None:
            text += f"; {fees.config_authority} can change it"
        warn(ET.TRANSFER_FEE_CONFIG, text)
    if mint.hook_program is not None:
        warn(
            ET.TRANSFER_HOOK,
            f"transfer hook: transfers call program {mint.hook_program}, which can refuse a "
            f"renewal (the crank reports it: subscription.renewal_failed, TransferRefused)",
        )
    if mint.permanent_delegate is not None:
        warn(
            ET.PERMANENT_DELEGATE,
            f"permanent delegate: {mint.permanent_delegate} can move any holder's tokens, "
            f"the subscribers' and the destination's included",
        )
    pausable = mint.pausable
    if pausable is not None:
        text = (
            f"pausable: {pausable.authority or 'its pause authority'} can pause the mint; "
            f"renewals go past due while it is paused (MintPaused)"
        )
        warn(ET.PAUSABLE, text + ("; it is paused now" if pausable.paused else ""))
    if mint.default_frozen:
        warn(
            ET.DEFAULT_ACCOUNT_STATE,
            f"default-frozen accounts: new token accounts of this mint start frozen; a "
            f"subscriber can pay only once {mint.freeze_authority or 'the freeze authority'} "
            f"thaws its account",
        )
    rate = mint.interest_bearing
    if rate is not None:
        warn(
            ET.INTEREST_BEARING_CONFIG,
            f"interest-bearing ({rate.current_rate} bps a year): prices are raw base units; "
            f"wallets show a UI amount that grows with interest",
        )
    if mint.has(ET.SCALED_UI_AMOUNT):
        warn(
            ET.SCALED_UI_AMOUNT,
            "scaled UI amount: prices are raw base units; wallets show them times the "
            "mint's multiplier",
        )
    return found


def list_plans(args: argparse.Namespace) -> int:
    return run(_list(args))


async def _list(args: argparse.Namespace) -> int:
    filters: list[int | MemcmpOpts] = [
        MemcmpOpts(offset=0, bytes=b58encode(Plan.discriminator).decode())
    ]
    if args.authority is not None:
        filters.append(MemcmpOpts(offset=8, bytes=str(args.authority)))
    async with billing_client(args) as billing:
        accounts = (
            await billing.rpc.get_program_accounts(
                billing.program_id, Confirmed, encoding="base64", filters=filters
            )
        ).value
    plans = sorted(
        ((k.pubkey, Plan.decode(bytes(k.account.data))) for k in accounts),
        key=lambda item: (str(item[1].authority), item[1].plan_id),
    )
    lines = [
        f"{address}  #{p.plan_id:<4} {type(p.status).__name__:<10} "
        f"{format_units(p.amount, p.decimals)} every {format_duration(p.period_secs)}  "
        f"{p.live_subscriptions} live  authority {p.authority}"
        for address, p in plans
    ]
    if not plans:
        lines = ["no plans" + (f" of {args.authority}" if args.authority else "")]
    emit(args, {"plans": [plan_json(address, p) for address, p in plans]}, lines)
    return 0


def show(args: argparse.Namespace) -> int:
    address = resolve_plan(args, args.plan)
    return run(_show(args, address))


async def _show(args: argparse.Namespace, address: Pubkey) -> int:
    async with billing_client(args) as billing:
        plan = await fetch_plan(billing, address)
    emit(args, plan_json(address, plan), plan_lines(address, plan))
    return 0


def deprecate(args: argparse.Namespace) -> int:
    authority = load_signer(args)
    address = args.plan if isinstance(args.plan, Pubkey) else pda.plan_address(
        authority.pubkey(), args.plan
    )  # fmt: skip
    return run(_deprecate(args, authority, address))


async def _deprecate(args: argparse.Namespace, authority: Keypair, address: Pubkey) -> int:
    async with billing_client(args) as billing:
        plan = await fetch_plan(billing, address)
        if plan.authority != authority.pubkey():
            raise CliError(
                f"plan {address} belongs to {plan.authority}, not to {authority.pubkey()}: "
                f"pass --keypair with the plan authority's keypair"
            )
        receipt = await send(lambda: billing.deprecate_plan(authority, address))
        plan = await fetch_plan(billing, address)
    data = {**plan_json(address, plan), "signature": receipt.signature}
    emit(
        args,
        data,
        [
            f"deprecated plan {address}: it accepts no new subscribers; "
            f"its {plan.live_subscriptions} live subscriptions carry on",
            f"transaction {receipt.signature}",
        ],
    )
    return 0


def register(subparsers: Subparsers) -> None:
    plan = command(
        subparsers,
        "plan",
        None,
        help="create, list, show and deprecate plans (providers)",
        description="A provider's plans: a price per period in one token, paid to the "
        "provider's token account. A plan is named by its address (the planId clients "
        "subscribe to) or by its number among its authority's plans.",
        global_options=False,
    )
    sub = subcommands(plan, "plan commands")

    _register_create(sub)

    p = command(
        sub,
        "list",
        list_plans,
        help="list plans on the cluster",
        description="Lists svc_billing plans at --url: every plan, or those of --authority.",
    )
    p.add_argument("--authority", type=pubkey_arg, metavar="PUBKEY", help="only this provider's")

    p = command(
        sub,
        "show",
        show,
        help="show a plan",
        description="Shows a plan's terms, status and counters.",
    )
    p.add_argument("plan", type=plan_ref, metavar="PLAN", help=PLAN_HELP)
    p.add_argument(
        "--authority",
        type=pubkey_arg,
        metavar="PUBKEY",
        help="whose plan number PLAN is (default: --keypair's public key)",
    )

    p = command(
        sub,
        "deprecate",
        deprecate,
        help="stop a plan accepting new subscribers",
        description="Deprecates a plan (signed by --keypair, its authority): new "
        "subscriptions fail with PlanDeprecated; existing ones carry on and renew.",
    )
    p.add_argument(
        "plan",
        type=plan_ref,
        metavar="PLAN",
        help="the plan's address, or its number among your plans",
    )


def _register_create(sub: Subparsers) -> None:
    """`svcpay plan create` and its options."""
    p = command(
        sub,
        "create",
        create,
        help="publish a new plan (signed by --keypair, its authority)",
        description="Publishes a plan owned by --keypair. Subscribers are charged --amount "
        "at once and every --period after, into --destination (a token account of --mint).",
        epilog=f"{AMOUNTS}\n{DURATIONS}\n\nexample:\n"
        "  svcpay plan create --plan-id 1 --mint MINT --amount 9.99 --period 30d \\\n"
        "      --destination TOKEN_ACCOUNT --grace 3d",
    )
    p.add_argument(
        "--plan-id",
        type=u64_arg,
        required=True,
        metavar="N",
        help="the plan's number among your plans (any unused u64; it fixes the address)",
    )
    p.add_argument("--mint", type=mint_arg, required=True, help=MINT_HELP)
    p.add_argument(
        "--amount",
        type=amount_arg,
        required=True,
        help="price per period: 9.99 (token units) or 9990000u (base units)",
    )
    p.add_argument(
        "--period",
        type=period_arg,
        required=True,
        metavar="DURATION",
        help="billing period, e.g. 30d",
    )
    p.add_argument(
        "--destination",
        type=pubkey_arg,
        required=True,
        metavar="TOKEN_ACCOUNT",
        help="your token account of --mint that receives the payments",
    )
    p.add_argument(
        "--grace",
        type=parse_duration,
        default=0,
        metavar="DURATION",
        help="how long a failed renewal may be retried before the subscription expires "
        "(default: 0s)",
    )
    p.add_argument(
        "--billing-authority",
        type=pubkey_arg,
        metavar="PUBKEY",
        help="who may charge metered usage (your facilitator; default: your own key)",
    )
