"""Exceptions as one line for the user: what went wrong, what to do, and the exit code."""

from __future__ import annotations

import argparse
import re

import httpx
from solana.exceptions import SolanaRpcException
from solana.rpc.core import RPCException

from svcpay._extras import MissingExtra
from svcpay.cli._common import EXIT_FAILED, EXIT_USAGE, CliError
from svcpay.keys import KeypairFileError
from svcpay.program.client import TransactionError
from svcpay.program.errors import ProgramError

# What to do about each program error (the spec's resolutions where it names them).
HINTS = {
    "InsufficientFunds": "top up the paying token account",
    "SubscriptionNotActive": "resume it (`svcpay subscription resume`) or subscribe again",
    "AllowanceExhausted": "raise the cap (`svcpay subscription allowance SUB AMOUNT`) or wait "
    "for the next billing cycle",
    "PlanDeprecated": "subscribe to the provider's current plan",
    "ZeroAmount": "give an amount greater than zero",
    "InvalidPeriod": "use a period between 1s and 366d",
    "InvalidGrace": "use a grace between 0s and 90d",
    "Unauthorized": "sign with --keypair of the subscriber or of the plan's authority",
    "NotDue": "wait until the current period ends",
    "NoAllowance": "add one: `svcpay subscription allowance SUB AMOUNT`",
    "MintMismatch": "use token accounts of the plan's mint",
    "DestinationMismatch": "pass a --destination token account of the plan's mint",
    "DelegationMissing": "approve the subscriber's delegate PDA again (spl-token approve)",
    "NotPaused": "only a paused subscription resumes",
    "SubscriptionEnded": "subscribe again",
    "PlanHasSubscribers": "wait until its subscriptions end",
    "SubscriptionStillLive": "cancel it first",
    "NotYourDecision": "sign with the --keypair of whoever paused or cancelled",
    "AlreadySubscribed": "use the live subscription (`svcpay subscription show`)",
    "WrongDelegate": "pass the subscriber's delegate PDA",
    "DuplicateAccount": "pass two different token accounts",
    "MintNonTransferable": "price the plan in a transferable mint (USDC, PYUSD, USDG)",
    "UnsupportedMintExtension": "price the plan in a mint without it",
}


def program_error_line(e: ProgramError) -> str:
    hint = HINTS.get(e.name)
    return f"{e.name}: {e.message or e.name}" + (f": {hint}" if hint else "")


# Anchor's own log line for a failed constraint or account check (codes below 6000).
_ANCHOR_LOG = re.compile(r"Error Code: (\w+)\. Error Number: \d+\. Error Message: (.+?)\.?$")


def _transaction_line(e: TransactionError) -> str:
    text = str(e)
    for line in e.logs:
        match = _ANCHOR_LOG.search(line)
        if match:
            return f"{match.group(1)}: {match.group(2)}"
    lamports = any("insufficient lamports" in line for line in e.logs)  # a rent payment
    if (
        "prior credit" in text
        or "AccountNotFound" in text
        or "insufficient funds for fee" in text.lower()
        or lamports
    ):
        return (
            "the fee payer (--keypair) has no SOL for fees and rent: fund it "
            "(on localnet or devnet: `svcpay keys airdrop`)"
        )
    if "already in use" in text:
        return f"the account already exists ({text})"
    last = next((line for line in reversed(e.logs) if "failed" in line or "Error" in line), "")
    return f"transaction failed: {text}" + (f" ({last})" if last and last not in text else "")


def _not_refused(cause: BaseException | None) -> str:
    """Why a connection failed, in parentheses, unless the node refused it (nothing listens
    there: the hint says what to do). A timeout, a name that does not resolve or a process
    out of file descriptors is not "start a validator", and the message must tell which."""
    if cause is None:
        return ""
    deepest = cause  # the OS's own words are at the end of the chain
    while not isinstance(deepest, ConnectionRefusedError) and (
        inner := deepest.__cause__ or deepest.__context__
    ):
        deepest = inner
    if isinstance(deepest, ConnectionRefusedError):
        return ""
    text = str(deepest) or str(cause)
    return f" ({type(cause).__name__}: {text})" if text else f" ({type(cause).__name__})"


def describe(exc: BaseException, args: argparse.Namespace | None) -> tuple[int, str, str] | None:
    """(exit code, error name, one-line message) for an exception the CLI expects, or None
    for a bug."""
    url = getattr(args, "url", None) or "the RPC URL"
    if isinstance(exc, CliError):
        return exc.exit_code, exc.name, exc.message
    if isinstance(exc, MissingExtra):
        return EXIT_USAGE, "MissingExtra", str(exc)
    if isinstance(exc, KeypairFileError):
        return EXIT_USAGE, "KeypairFileError", f"{exc}: pass --keypair with a keypair file"
    if isinstance(exc, ProgramError):
        return EXIT_FAILED, exc.name, program_error_line(exc)
    if isinstance(exc, TransactionError):
        return EXIT_FAILED, "TransactionError", _transaction_line(exc)
    if isinstance(exc, SolanaRpcException):
        cause = exc.__cause__ or exc.__context__
        # solana-py's transport (httpx2 since 0.41) raises its own classes of httpx's names.
        if type(cause).__name__ in ("ConnectError", "ConnectTimeout"):
            local = all(
                (httpx.URL(u.strip()).host or "") in ("127.0.0.1", "localhost", "::1")
                for u in str(url).split(",")
            )
            why = _not_refused(cause)
            if not local:
                hint = "check the URL and this machine's network, or pass another with --url"
            elif why:  # something listens there and did not take the connection
                hint = "check that the node is not overloaded, or pass --url"
            else:
                hint = "start one with `svcpay localnet` or pass --url"
            return EXIT_FAILED, "RpcUnreachable", f"cannot reach RPC at {url}{why}: {hint}"
        reason = f"{type(cause).__name__}: {cause}" if cause else str(exc)
        return EXIT_FAILED, "RpcError", f"RPC request to {url} failed ({reason}): check --url"
    if isinstance(exc, RPCException):
        detail = exc.args[0] if exc.args else exc
        message = getattr(detail, "message", None) or str(detail)
        return EXIT_FAILED, "RpcError", f"the RPC at {url} refused the request: {message}"
    if isinstance(exc, httpx.HTTPError):
        return EXIT_FAILED, "HttpError", f"HTTP request failed: {exc or type(exc).__name__}"
    if isinstance(exc, OSError) and exc.strerror:
        # A file or directory the user named: missing, unwritable, a directory...
        where = f"{exc.filename}: " if exc.filename else ""
        return EXIT_FAILED, type(exc).__name__, f"{where}{exc.strerror}: check the path"
    return None
