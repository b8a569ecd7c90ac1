"""`svcpay session open|show|top-up|close`: payment sessions (docs/adr/0024).

A session escrows a deposit for vouchers the payer signs per call; the provider redeems the
newest, and the rest goes back at close.
"""

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
    command,
    emit,
    fetch_mint_info,
    fetch_token_account,
    format_duration,
    format_time,
    format_units,
    load_signer,
    parse_duration,
    pubkey_arg,
    refuse_frozen,
    require_token_account,
    run,
    send,
    subcommands,
    table,
)
from svcpay.cli._mints import MINT_HELP, mint_arg, resolve_mint
from svcpay.cli.plan import AMOUNTS
from svcpay.program.client import BillingClient
from svcpay.program.generated.accounts.session import Session
from svcpay.program.session_client import Sessions

SESSION_HELP = "the session's address (the channel id its vouchers name)"


def _duration(text: str) -> int:
    secs = parse_duration(text)
    if secs <= 0:
        raise argparse.ArgumentTypeError(f"the duration must be longer than zero: {text!r}")
    return secs


async def fetch_session(billing: BillingClient, address: Pubkey) -> Session:
    found = await Sessions(billing).fetch(address)
    if found is None:
        raise NotFound(f"no session at {address}: check the address and --url")
    return found


def status(s: Session) -> str:
    return type(s.status).__name__


def session_json(address: Pubkey, s: Session) -> dict[str, Any]:
    return {
        "session": str(address),
        "status": status(s),
        "payer": str(s.payer),
        "signer": str(s.signer),
        "provider": str(s.provider),
        "recipient": str(s.recipient),
        "refund": str(s.refund),
        "mint": str(s.mint),
        "decimals": s.decimals,
        "tokenProgram": str(s.token_program),
        "vault": str(s.vault),
        "deposit": str(s.deposit),
        "redeemed": str(s.redeemed),
        "withdrawn": str(s.withdrawn),
        "held": str(s.deposit - s.redeemed),
        "price": str(s.price),
        "expiresAt": s.expires_at,
        "disputeSecs": s.dispute_secs,
        "closeRequestedAt": s.close_requested_at or None,
    }


def session_lines(address: Pubkey, s: Session) -> list[str]:
    def units(n: int) -> str:
        return format_units(n, s.decimals)

    state = status(s)
    if s.close_requested_at:
        state += f" (the payer may close at {format_time(s.close_requested_at + s.dispute_secs)})"
    return table(
        [
            ("session", address),
            ("status", state),
            ("payer", s.payer),
            ("voucher signer", s.signer),
            ("provider", f"{s.provider} (paid to {s.recipient})"),
            ("deposit", f"{units(s.deposit)} of {s.mint}"),
            ("redeemed", f"{units(s.redeemed)} ({units(s.withdrawn)} paid out)"),
            ("price", f"{units(s.price)} a call"),
            ("expires", format_time(s.expires_at)),
            ("dispute window", format_duration(s.dispute_secs)),
        ]
    )


# -- handlers -------------------------------------------------------------------------------
def open_cmd(args: argparse.Namespace) -> int:
    return run(_open(args, load_signer(args)))


async def _open(args: argparse.Namespace, payer: Keypair) -> int:
    async with billing_client(args) as billing:
        args.mint = await resolve_mint(billing.rpc, args.mint)
        mint = await fetch_mint_info(billing.rpc, args.mint)
        decimals = mint.decimals
        await require_token_account(billing.rpc, args.pay_to, "--pay-to", mint=args.mint)
        source = get_associated_token_address(payer.pubkey(), args.mint, mint.program)
        paying = await fetch_token_account(billing.rpc, source)
        if paying is not None:
            await refuse_frozen(billing.rpc, paying, what="the paying token account", can="pay")
        deposit = args.deposit.to_base(decimals)
        price = args.price.to_base(decimals) if args.price else 1
        expires_at = await billing.chain_time() + args.expires_in  # the program's clock
        sessions = Sessions(billing)
        address = await send(
            lambda: sessions.open(
                payer, mint=args.mint, recipient=args.pay_to, deposit=deposit, price=price,
                expires_at=expires_at, dispute_secs=args.dispute, signer=args.signer,
            )
        )  # fmt: skip
        s = await fetch_session(billing, address)
    said = f"opened session {address}: {format_units(deposit, decimals)} escrowed"
    emit(args, session_json(address, s), [said, *session_lines(address, s)])
    return 0


def show(args: argparse.Namespace) -> int:
    return run(_show(args))


async def _show(args: argparse.Namespace) -> int:
    async with billing_client(args) as billing:
        if await Sessions(billing).buried(args.session):
            emit(
                args,
                {"session": str(args.session), "status": "Closed", "tombstone": True},
                [f"session {args.session}: closed; its deposit was settled and its rent "
                 "returned (an empty account keeps the address from reuse)"],
            )  # fmt: skip
            return 0
        s = await fetch_session(billing, args.session)
    emit(args, session_json(args.session, s), session_lines(args.session, s))
    return 0


def top_up(args: argparse.Namespace) -> int:
    return run(_top_up(args, load_signer(args)))


async def _top_up(args: argparse.Namespace, payer: Keypair) -> int:
    async with billing_client(args) as billing:
        s = await fetch_session(billing, args.session)
        if s.payer != payer.pubkey():
            raise CliError(f"only the session's payer {s.payer} may top it up (--keypair)")
        amount = args.amount.to_base(s.decimals)
        paying = await fetch_token_account(billing.rpc, s.refund)
        if paying is not None:
            await refuse_frozen(billing.rpc, paying, what="the paying token account", can="pay")
        now = await billing.chain_time()
        expires = now + args.expires_in if args.expires_in else None
        sessions = Sessions(billing)
        receipt = await send(lambda: sessions.top_up(args.session, payer, amount, expires))
        s = await fetch_session(billing, args.session)
    data = {**session_json(args.session, s), "signature": receipt.signature}
    said = f"deposit now {format_units(s.deposit, s.decimals)}"
    emit(args, data, [said, *session_lines(args.session, s)])
    return 0


def close(args: argparse.Namespace) -> int:
    return run(_close(args, load_signer(args)))


async def _close(args: argparse.Namespace, closer: Keypair) -> int:
    """The provider closes at once; the payer asks first, and closes once the dispute
    window has passed (run it again then)."""
    async with billing_client(args) as billing:
        s = await fetch_session(billing, args.session)
        sessions = Sessions(billing)
        me = closer.pubkey()
        if me not in (s.provider, s.payer):
            raise CliError(f"only the provider {s.provider} or the payer {s.payer} may close")
        now = await billing.chain_time()
        windows = [t + s.dispute_secs for t in (s.expires_at, s.close_requested_at) if t]
        pending = status(s) == "Closed"  # refunded; the recipient's due still in the vault
        if (
            me == s.payer
            and me != s.provider
            and not pending
            and not any(now >= t for t in windows)
        ):
            if not s.close_requested_at:
                await send(lambda: sessions.request_close(args.session, closer))
            s = await fetch_session(billing, args.session)
            until = s.close_requested_at + s.dispute_secs
            emit(
                args,
                {**session_json(args.session, s), "closableAt": until},
                [f"close requested: the provider may redeem until {format_time(until)}; "
                 "run this again then to get the rest back"],
            )  # fmt: skip
            return 0
        before = await sessions.token_amount(s.refund) or 0
        receipt = await send(lambda: sessions.close(args.session, closer))
        # What reached the payer's account: a transfer-fee mint withholds part of the refund.
        refunded = (await sessions.token_amount(s.refund) or 0) - before
        closed = next((e.data for e in receipt.events if e.name == "SessionClosed"), {})
        unpaid = int(closed.get("unpaid", 0))
        after = await sessions.fetch(args.session)
    data = {
        **session_json(args.session, after or s),
        "status": "Closed",
        "refunded": str(refunded),
        "unpaid": str(unpaid),
        "tombstone": after is None,
        "signature": receipt.signature,
    }
    fee = int(closed.get("refunded", refunded)) - refunded
    said = f"closed: {format_units(refunded, s.decimals)} refunded to {s.refund}"
    if fee > 0:
        said += f" (the mint withheld a fee of {format_units(fee, s.decimals)})"
    lines = [said]
    if unpaid:
        lines.append(
            f"{format_units(unpaid, s.decimals)} owed to the recipient {s.recipient} waits in "
            "the vault: its account cannot take it now (closed, frozen or requiring memos); "
            "run `svcpay session close` again once it can, to pay it and return the rent"
        )
    else:
        lines.append("the vault's and the session's rent went back to the payer")
    emit(args, data, lines)
    return 0


def register(subparsers: Subparsers) -> None:
    group = command(
        subparsers,
        "session",
        None,
        help="open, show, top up or close a payment session",
        description="A payment session escrows a deposit for vouchers the payer signs per "
        "call; the provider redeems the newest voucher, and what is left goes back at close.",
        global_options=False,
    )
    sub = subcommands(group, "session commands")
    p = command(
        sub, "open", open_cmd, help="open a session and escrow its deposit",
        description="Opens a session of --keypair paying --pay-to (the provider's token "
        "account) in --mint: --deposit is escrowed at once from your associated account.",
        epilog=AMOUNTS,
    )  # fmt: skip
    p.add_argument("--mint", type=mint_arg, required=True, help=MINT_HELP)
    p.add_argument("--pay-to", type=pubkey_arg, required=True, metavar="ACCOUNT",
                   help="the provider's token account that redeemed vouchers pay")  # fmt: skip
    p.add_argument("--deposit", type=amount_arg, required=True, metavar="AMOUNT")
    p.add_argument("--price", type=amount_arg, metavar="AMOUNT", help="price per call")
    p.add_argument("--expires-in", type=_duration, default=86_400, metavar="DURATION",
                   help="how long it sells calls (default 1d)")  # fmt: skip
    p.add_argument("--dispute", type=_duration, default=3_600, metavar="DURATION",
                   help="how long the provider keeps to redeem after a close request "
                   "(default 1h)")  # fmt: skip
    p.add_argument("--signer", type=pubkey_arg, metavar="PUBKEY",
                   help="the key that signs vouchers (default: --keypair)")  # fmt: skip
    p = command(sub, "show", show, help="show a session", description="Shows a session.")
    p.add_argument("session", type=pubkey_arg, metavar="SESSION", help=SESSION_HELP)
    p = command(sub, "top-up", top_up, help="add to a session's deposit",
                description="Adds AMOUNT to the deposit (the payer's --keypair).",
                epilog=AMOUNTS)  # fmt: skip
    p.add_argument("session", type=pubkey_arg, metavar="SESSION", help=SESSION_HELP)
    p.add_argument("amount", type=amount_arg, metavar="AMOUNT")
    p.add_argument("--expires-in", type=_duration, metavar="DURATION",
                   help="extend the expiry to this long from now")  # fmt: skip
    p = command(
        sub, "close", close, help="close a session (refunds the rest)",
        description="The provider closes at once. The payer first asks to close; after the "
        "dispute window (or the expiry plus the window) the same command closes it.",
    )  # fmt: skip
    p.add_argument("session", type=pubkey_arg, metavar="SESSION", help=SESSION_HELP)
