"""`svcpay localnet`: the drop-in validator in the foreground, with svc_billing loaded.

Every argument after `localnet` goes to the validator (`svcpay localnet --help` lists its
flags), so `svcpay.cli.main` hands them over before parsing anything itself.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from svcpay.cli._common import Subparsers, command
from svcpay.localnet import process
from svcpay.program.generated.program_id import PROGRAM_ID

NAME = "localnet"


def run(argv: list[str]) -> int:
    """Runs the drop-in validator in the foreground (Ctrl-C stops it). With no
    --bpf-program, loads the built svc_billing at its program id. With --json the ready line
    (or the error) is one JSON object on stdout. A missing program is reported only when the
    validator is to start: --help needs none."""
    if "--bpf-program" not in argv and not asks_for_help(argv):
        if not process.PROGRAM_SO.exists():
            message = f"{process.PROGRAM_SO} is missing; run scripts/build-program"
            print(f"svcpay localnet: {message}", file=sys.stderr)
            if "--json" in argv:
                print(json.dumps({"error": "MissingProgram", "message": message, "exitCode": 1}))
            return 1
        argv = ["--bpf-program", str(PROGRAM_ID), str(process.PROGRAM_SO), *argv]
    os.execv(sys.executable, [sys.executable, "-m", "svcpay.localnet.server", *argv])
    return 0  # not reached


def asks_for_help(argv: list[str]) -> bool:
    """Whether `argv` asks the validator for its help: -h, --help, or an abbreviation of it
    that argparse takes (--he); no other flag of the validator starts with --h."""
    return any(arg == "-h" or (len(arg) >= 3 and "--help".startswith(arg)) for arg in argv)


def register(subparsers: Subparsers) -> None:
    # Listed in `svcpay --help`; `main` dispatches `svcpay localnet ...` to `run` unparsed.
    parser = command(
        subparsers,
        NAME,
        lambda args: run(list(args.validator_args)),
        help="run the local validator with svc_billing loaded (`svcpay localnet --help`)",
        description="Runs the local validator in the foreground with the built svc_billing "
        "program; every argument goes to the validator.",
        global_options=False,
    )
    parser.add_argument("validator_args", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
