"""What every `svcpay` command shares: exit codes, errors, global options, argument types,
output (human or `--json`), keypairs and the RPC connection. The exit codes and errors live
in `_exits`, the argument types in `_args`; the commands import them all from here.

A command module calls `command(subparsers, name, ...)` for each of its (sub)commands and
gives it a handler `(args) -> int`; a handler raises `CliError` (or lets a program, RPC or
keypair error through) and `svcpay.cli.main` turns it into one line on stderr and an exit
code.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import textwrap
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn, TypeAlias, TypeVar
from urllib.parse import urlparse

from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Confirmed
from solders.keypair import Keypair
from solders.pubkey import Pubkey

from svcpay import stopping
from svcpay.cli._args import (
    AMOUNT_FORMS,
    MAX_BASIS_POINTS,
    Amount,
    amount_arg,
    basis_points_arg,
    format_duration,
    format_time,
    format_units,
    interval_arg,
    parse_duration,
    period_arg,
    plain_decimal,
    pubkey_arg,
    seconds_arg,
    u64_arg,
    zero_or_amount_arg,
)
from svcpay.cli._exits import (
    EXIT_CODES,
    EXIT_FAILED,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_PAYMENT,
    EXIT_USAGE,
    CliError,
    NotFound,
    PaymentDeclined,
    UsageError,
)
from svcpay.keys import KeypairFileError, load_keypair
from svcpay.program.client import BillingClient, TransactionError
from svcpay.protocol.programs import TOKEN_2022_PROGRAM, TOKEN_PROGRAM
from svcpay.protocol.token2022 import MintInfo, TokenAccountInfo, mint_info, token_account_info

__all__ = [
    "AMOUNT_FORMS",
    "Amount",
    "CliError",
    "CliParser",
    "DEFAULT_KEYPAIR",
    "DEFAULT_RPC_URL",
    "EXIT_CODES",
    "EXIT_FAILED",
    "EXIT_NOT_FOUND",
    "EXIT_OK",
    "EXIT_PAYMENT",
    "EXIT_USAGE",
    "HELP_WIDTH",
    "Handler",
    "MAX_BASIS_POINTS",
    "MINT_SIZE",
    "MONIKERS",
    "NotFound",
    "PaymentDeclined",
    "SOLANA_CONFIG",
    "Subparsers",
    "TOKEN_ACCOUNT_SIZE",
    "TOKEN_PROGRAM_NAMES",
    "TokenAccount",
    "UsageError",
    "add_global_options",
    "amount_arg",
    "basis_points_arg",
    "billing_client",
    "check_token_account",
    "command",
    "emit",
    "fetch_mint_info",
    "interval_arg",
    "seconds_arg",
    "fetch_token_account",
    "format_duration",
    "format_time",
    "format_units",
    "load_signer",
    "mint_decimals",
    "parse_duration",
    "period_arg",
    "plain_decimal",
    "pubkey_arg",
    "refuse_frozen",
    "require_token_account",
    "resolve_defaults",
    "run",
    "send",
    "solana_cli_config",
    "stderr",
    "subcommands",
    "table",
    "token_program_name",
    "u64_arg",
    "url_arg",
    "zero_or_amount_arg",
]


DEFAULT_RPC_URL = "http://127.0.0.1:8899"
DEFAULT_KEYPAIR = "~/.config/solana/id.json"
MINT_SIZE = 82
TOKEN_ACCOUNT_SIZE = 165
HELP_WIDTH = 88

Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"
Handler = Callable[[argparse.Namespace], int]
T = TypeVar("T")


# -- parsers ------------------------------------------------------------------------------
class CliParser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line (and exit 2, as argparse's do), and
    which reads a '-' followed by a digit (`-1u`, `-1e3`, `-.5`) as a value, not an option,
    as Python 3.13's argparse does: a negative amount then reaches its type, which says
    what is wrong with it, instead of being reported as a missing argument. No option of
    svcpay's is named like a number."""

    last_error = ""  # the message of the latest usage error, for `--json`

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = re.compile(r"^-\.?[0-9]")

    def error(self, message: str) -> NoReturn:
        CliParser.last_error = f"{message} (see `{self.prog} --help`)"
        self.exit(EXIT_USAGE, f"{self.prog}: {CliParser.last_error}\n")


# -- the Solana CLI's conventions ---------------------------------------------------------
# The Solana CLI's URL monikers (`solana config set --url`): long names and their initials.
MONIKERS = {
    "mainnet-beta": "https://api.mainnet-beta.solana.com",
    "devnet": "https://api.devnet.solana.com",
    "testnet": "https://api.testnet.solana.com",
    "localhost": "http://localhost:8899",
}
MONIKERS.update({name[0]: url for name, url in MONIKERS.items()})
SOLANA_CONFIG = Path("~/.config/solana/cli/config.yml")


def url_arg(text: str) -> str:
    """An RPC URL, or a Solana moniker (mainnet-beta, devnet, testnet, localhost, m, d, t, l);
    or several URLs of one cluster, comma-separated (svcpay.rpc: reads fail over, sends go
    to all)."""
    text = text.strip()
    if text.lower() in MONIKERS:
        return MONIKERS[text.lower()]
    for part in text.split(","):
        parsed = urlparse(part.strip())
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise argparse.ArgumentTypeError(
                f"not an RPC URL or moniker: {part.strip()!r} (give http(s)://HOST:PORT, "
                "several separated by commas, or one of mainnet-beta, devnet, testnet, "
                "localhost, m, d, t, l)"
            )
    return ",".join(part.strip() for part in text.split(","))


def solana_cli_config(path: Path | None = None) -> dict[str, str]:
    """The top-level `key: value` pairs of the Solana CLI's config file ({} when absent or
    unreadable). A flat YAML subset is all the file holds at the top level; nested blocks
    (address_labels) are skipped."""
    where = (path or SOLANA_CONFIG).expanduser()
    try:
        text = where.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return {}
    values: dict[str, str] = {}
    for line in text.splitlines():
        if not line or line[0] in " \t#-" or ":" not in line:
            continue
        key, _, value = line.partition(":")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        if value and value not in ("~", "null"):
            values[key.strip()] = value
    return values


def resolve_defaults(args: argparse.Namespace) -> None:
    """Fills --url and --keypair left unset: $SVCPAY_RPC_URL / $SVCPAY_KEYPAIR, then the
    Solana CLI config file's json_rpc_url / keypair_path, then svcpay's defaults. Records where
    the keypair came from in `args.keypair_source` (option, env, solana-config, default)."""
    config: dict[str, str] | None = None

    def solana(key: str) -> str | None:
        nonlocal config
        if config is None:
            config = solana_cli_config()
        return config.get(key)

    if getattr(args, "url", None) is None:
        env = os.environ.get("SVCPAY_RPC_URL")
        given = env or solana("json_rpc_url")
        try:
            args.url = url_arg(given) if given else DEFAULT_RPC_URL
        except argparse.ArgumentTypeError as e:
            where = "$SVCPAY_RPC_URL" if env else str(SOLANA_CONFIG)
            raise UsageError(f"{where}: {e}") from None
    if getattr(args, "keypair", None) is None:
        for source, value in (
            ("env", os.environ.get("SVCPAY_KEYPAIR")),
            ("solana-config", solana("keypair_path")),
            ("default", DEFAULT_KEYPAIR),
        ):
            if value:
                args.keypair, args.keypair_source = value, source
                break
    else:
        args.keypair_source = getattr(args, "keypair_source", "option")


def add_global_options(parser: argparse.ArgumentParser, *, defaults: bool) -> None:
    """-u/--url, -k/--keypair, --json and -v/--verbose. The top-level parser holds the
    defaults (None for --url and --keypair: `resolve_defaults` fills them once parsed);
    subcommands accept the same options after their name without overriding what was given
    before it."""

    def default(value: object) -> object:
        return value if defaults else argparse.SUPPRESS

    group = parser.add_argument_group("global options")
    group.add_argument(
        "-u",
        "--url",
        metavar="URL_OR_MONIKER",
        type=url_arg,
        default=default(None),
        help="JSON-RPC URL or moniker: mainnet-beta, devnet, testnet, localhost (m, d, t, l); "
        f"default: $SVCPAY_RPC_URL, json_rpc_url in {SOLANA_CONFIG}, or {DEFAULT_RPC_URL}",
    )
    group.add_argument(
        "-k",
        "--keypair",
        metavar="PATH",
        default=default(None),
        help="signer's keypair file, Solana CLI format (default: $SVCPAY_KEYPAIR, "
        f"keypair_path in {SOLANA_CONFIG}, or {DEFAULT_KEYPAIR})",
    )
    group.add_argument(
        "--json",
        action="store_true",
        default=default(False),
        help="print one machine-readable JSON object on stdout",
    )
    group.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        default=default(False),
        help="on an error, show its traceback too",
    )


def command(
    subparsers: Subparsers,
    name: str,
    handler: Handler | None,
    *,
    help: str,
    description: str,
    epilog: str | None = None,
    global_options: bool = True,
) -> argparse.ArgumentParser:
    """A (sub)command parser with the global options; `handler` runs it (None for a group
    of subcommands)."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        name,
        help=help,
        description=textwrap.fill(description, HELP_WIDTH),
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    if global_options:
        add_global_options(parser, defaults=False)
    if handler is not None:
        parser.set_defaults(handler=handler)
    return parser


def subcommands(parser: argparse.ArgumentParser, title: str) -> Subparsers:
    return parser.add_subparsers(title=title, metavar="COMMAND", required=True)


# -- output -------------------------------------------------------------------------------
def emit(args: argparse.Namespace, data: Mapping[str, Any], human: Iterable[str]) -> None:
    """The command's result: `data` as one JSON object with --json, else `human` lines."""
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        for line in human:
            print(line)


def table(rows: Iterable[tuple[str, object]]) -> list[str]:
    rows = list(rows)
    width = max((len(k) for k, _ in rows), default=0)
    return [f"{k:<{width}}  {v}" for k, v in rows]


# -- keypairs and the chain -------------------------------------------------------------------
def load_signer(args: argparse.Namespace, path: str | None = None) -> Keypair:
    """The keypair at `path` (default --keypair); a missing or bad file is a usage error."""
    where = path or args.keypair
    try:
        return load_keypair(where)
    except KeypairFileError as e:
        if "no such keypair file" in str(e):
            raise UsageError(
                f"keypair {where} not found: create one with `svcpay keys create` "
                f"or pass --keypair PATH"
            ) from None
        raise UsageError(f"{e}: pass --keypair with a Solana CLI keypair file") from None


def run(coro: Coroutine[Any, Any, T]) -> T:
    """The command's coroutine, cancelled by Ctrl-C or SIGTERM (svcpay.stopping)."""
    return stopping.run(coro)


@asynccontextmanager
async def billing_client(args: argparse.Namespace) -> AsyncIterator[BillingClient]:
    client = BillingClient.connect(args.url)
    try:
        yield client
    finally:
        await client.close()


async def send(action: Callable[[], Awaitable[T]]) -> T:
    """Runs `action` (a BillingClient call that sends one transaction). Each command starts
    with a new client, so the same instruction repeated within a slot (pause, resume,
    pause) is the same transaction as before, which the cluster drops as AlreadyProcessed:
    the client then waits for the next blockhash and sends it again."""
    try:
        return await action()
    except TransactionError as e:
        # agave's preflight words it "This transaction has already been processed"
        if "AlreadyProcessed" not in str(e) and "already been processed" not in str(e):
            raise
    return await action()


TOKEN_PROGRAM_NAMES = {TOKEN_PROGRAM: "SPL Token", TOKEN_2022_PROGRAM: "Token-2022"}


def token_program_name(program: Pubkey) -> str:
    """`SPL Token` or `Token-2022` (the address of any other program)."""
    return TOKEN_PROGRAM_NAMES.get(program, str(program))


async def fetch_mint_info(rpc: AsyncClient, address: Pubkey, what: str = "mint") -> MintInfo:
    """The mint at `address`, of SPL Token or Token-2022 (its owner says which), with its
    extensions; NotFound when there is no account, or it is not a mint (a token account,
    a wallet)."""
    info = (await rpc.get_account_info(address, Confirmed)).value
    if info is None:
        raise NotFound(f"{what} {address} not found on this cluster: check the address and --url")
    data = bytes(info.data)
    try:
        return mint_info(info.owner, data)
    except ValueError:
        pass
    try:
        token_account_info(info.owner, data)
        kind = "a token account"
    except ValueError:
        kind = "an account"
    raise NotFound(
        f"{address} is {kind}, not an SPL Token mint or a Token-2022 mint: pass the token's "
        f"mint address"
    )


async def mint_decimals(rpc: AsyncClient, mint: Pubkey) -> int:
    """The decimals of `mint` (SPL Token or Token-2022); NotFound unless it is a mint."""
    return (await fetch_mint_info(rpc, mint)).decimals


@dataclass(frozen=True)
class TokenAccount:
    address: Pubkey
    mint: Pubkey
    owner: Pubkey
    amount: int
    program: Pubkey = TOKEN_PROGRAM
    info: TokenAccountInfo | None = None  # with its state and extensions


async def fetch_token_account(
    rpc: AsyncClient, address: Pubkey, what: str = "token account"
) -> TokenAccount | None:
    """The token account (SPL Token or Token-2022) at `address`, None when there is no
    account; NotFound when the account is something else (a mint, a wallet)."""
    info = (await rpc.get_account_info(address, Confirmed)).value
    if info is None:
        return None
    data = bytes(info.data)
    try:
        account = token_account_info(info.owner, data)
    except ValueError:
        try:
            mint_info(info.owner, data)
            kind = "a mint"
        except ValueError:
            kind = "not a token account (of SPL Token or Token-2022)"
        raise NotFound(
            f"{what} {address} is {kind}: pass a token account (`svcpay token account`)"
        ) from None
    return TokenAccount(
        address,
        mint=account.mint,
        owner=account.owner,
        amount=account.amount,
        program=account.program,
        info=account,
    )


async def check_token_account(
    rpc: AsyncClient,
    address: Pubkey,
    *,
    what: str,
    mint: Pubkey | None = None,
    owner: Pubkey | None = None,
) -> TokenAccount:
    """The token account `address`, checked to exist and to be of `mint` and `owner`."""
    account = await fetch_token_account(rpc, address, what)
    if account is None:
        raise NotFound(f"{what} {address} does not exist: create it (`svcpay token account`)")
    if mint is not None and account.mint != mint:
        raise UsageError(f"{what} {address} holds mint {account.mint}, not {mint}")
    if owner is not None and account.owner != owner:
        raise UsageError(f"{what} {address} belongs to {account.owner}, not {owner}")
    return account


async def refuse_frozen(rpc: AsyncClient, account: TokenAccount, *, what: str, can: str) -> None:
    """CliError naming `account` when it is frozen: its token program refuses every transfer
    from or to it (and minting into it) until the mint's freeze authority thaws it, which the
    program or the token program would report only by an error code. `can` is what it cannot
    do then ("pay", "receive")."""
    if account.info is None or not account.info.frozen:
        return
    authority = (await fetch_mint_info(rpc, account.mint)).freeze_authority
    by = f"the mint's freeze authority {authority}" if authority else "the mint's freeze authority"
    raise CliError(f"{what} {account.address} is frozen (by {by}); it cannot {can} until thawed")


async def require_token_account(
    rpc: AsyncClient,
    account: Pubkey,
    what: str,
    *,
    mint: Pubkey | None = None,
    owner: Pubkey | None = None,
) -> None:
    await check_token_account(rpc, account, what=what, mint=mint, owner=owner)


def stderr(line: str) -> None:
    print(line, file=sys.stderr)
