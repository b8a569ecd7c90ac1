"""The `svcpay` command line, for operators and developers.

    svcpay localnet                      run the local validator with svc_billing loaded
    svcpay program deploy|upgrade|show   put the svc_billing program on a cluster
    svcpay keys create|show|airdrop      keypair files (Solana CLI format)
    svcpay token create-mint|mint|account|balance
                                         tokens to test with (SPL Token or Token-2022)
    svcpay plan create|list|show|deprecate
    svcpay subscribe PLAN                subscribe (first period charged at once)
    svcpay subscription show|pause|resume|cancel SUB
    svcpay session open|show|top-up|close
                                         payment sessions: a deposit for signed vouchers
    svcpay pay URL                       fetch a gated URL, paying on 402
    svcpay facilitator serve|migrate|crank|provider
                                         run and operate the facilitator
    svcpay example serve                 the example API behind the gate
    svcpay analytics                     volume, subscriptions, revenue (table + PNG)
    svcpay demo                          walk through the three flows on a local validator

`svcpay --version` prints the installed package's version.

Global options (before or after the command), as the Solana CLI has them: `-u/--url` (an RPC
URL or a moniker: mainnet-beta, devnet, testnet, localhost, or m, d, t, l), `-k/--keypair`
(default for both: $SVCPAY_RPC_URL / $SVCPAY_KEYPAIR, else the Solana CLI's
~/.config/solana/cli/config.yml, else http://127.0.0.1:8899 and ~/.config/solana/id.json),
`--json` (one JSON object on stdout instead of text) and `-v/--verbose` (an error's
traceback; otherwise an error is one line on stderr). Amounts are token units scaled by
the mint's decimals (`9.99`) or base units with a `u` suffix (`9990000u`); durations are
`30d`, `12h`, `90m`, `3600s`, `1w` or combinations (`1d12h`).

Failures print one line on stderr (what went wrong and what to do; with --json also a JSON
object `{"error", "message", "exitCode"}` on stdout) and exit with:

    0  ok
    1  the operation failed (program, transaction, RPC or HTTP error)
    2  usage error (bad arguments, missing or invalid keypair file)
    3  not found (the plan, subscription, mint or token account does not exist)
    4  payment declined or still required (`svcpay pay`)

Adding a command: a module here with `register(subparsers)` (see `_common.command`), listed
in `COMMANDS`.

Layer 6 (docs/adr/0041): it may import every part of svcpay below it (the demo, the
examples, the facilitator, the paying client, the drop-in validator, the program, the
schemes, the protocol, the RPC transport, the root modules); only `svcpay.__main__` (the
console script) imports it.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import sys
import traceback
from collections.abc import Sequence
from types import ModuleType

from svcpay import stopping
from svcpay.cli import (
    demo,
    example,
    facilitator,
    keys,
    localnet,
    mcp,
    pay,
    plan,
    program,
    session,
    subscription,
    token,
)
from svcpay.cli._common import (
    EXIT_CODES,
    EXIT_FAILED,
    EXIT_USAGE,
    CliParser,
    add_global_options,
    resolve_defaults,
    stderr,
)
from svcpay.cli._errors import describe

# Each registers its commands, in the order `svcpay --help` lists them.
COMMANDS: list[ModuleType] = [
    localnet,
    program,
    keys,
    token,
    plan,
    subscription,
    session,
    pay,
    mcp,
    facilitator,
    example,
    demo,
]

__all__ = ["COMMANDS", "build_parser", "main"]


def _version() -> str:
    try:
        return importlib.metadata.version("svcpay")
    except importlib.metadata.PackageNotFoundError:  # run from a source tree, uninstalled
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = CliParser(
        prog="svcpay",
        description="svcpay: HTTP 402 pay-per-request and subscription payments on Solana.",
        epilog=EXIT_CODES + "\n\n`svcpay COMMAND --help` describes each command;\n"
        "`svcpay localnet --help` lists the validator's flags.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"svcpay {_version()}")
    add_global_options(parser, defaults=True)
    subparsers = parser.add_subparsers(title="commands", metavar="COMMAND")
    for module in COMMANDS:
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list[:1] == [localnet.NAME]:
        return localnet.run(args_list[1:])  # the validator parses its own flags
    parser = build_parser()
    if not args_list:
        parser.print_help()
        return 0
    try:
        args = parser.parse_args(args_list)
    except SystemExit as e:  # --help (0) or a usage error (2), already printed
        code = e.code if isinstance(e.code, int) else EXIT_USAGE
        if code == EXIT_USAGE and "--json" in args_list:
            message = CliParser.last_error
            print(json.dumps({"error": "UsageError", "message": message, "exitCode": code}))
        return code
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    verbose = bool(getattr(args, "verbose", False) or os.environ.get("SVCPAY_DEBUG"))
    try:
        with stopping.handling():  # Ctrl-C and SIGTERM cancel the command's work, then 130
            stopping.check()  # one during the imports (svcpay.__main__ handles it from there)
            resolve_defaults(args)
            return int(handler(args))
    except KeyboardInterrupt:
        stderr("svcpay: interrupted")
        return 130
    except Exception as e:
        known = describe(e, args)
        if known is None:
            code, name = EXIT_FAILED, type(e).__name__
            message = f"unexpected {name}: {e} (--verbose shows the traceback)"
        else:
            code, name, message = known
        if verbose:
            traceback.print_exc()
        stderr(f"svcpay: {message}")
        if getattr(args, "json", False):
            print(json.dumps({"error": name, "message": message, "exitCode": code}))
        return code


if __name__ == "__main__":
    sys.exit(main())
