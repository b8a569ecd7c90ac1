"""The `svcpay` command line. Today: `svcpay localnet`; the rest arrives with issue 7."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from svcpay.localnet.process import LOCALNET_PYTHON, PROGRAM_SO
from svcpay.program.generated.program_id import PROGRAM_ID


def localnet(argv: list[str]) -> int:
    """Runs the drop-in validator in the foreground (Ctrl-C stops it). With no
    --bpf-program, loads the built svc_billing at its program id."""
    python = Path(os.environ.get("SVCPAY_LOCALNET_PYTHON", LOCALNET_PYTHON))
    if not python.exists():
        print(f"svcpay localnet: {python} is missing; run scripts/python-env", file=sys.stderr)
        return 1
    if "--bpf-program" not in argv:
        if not PROGRAM_SO.exists():
            print(
                f"svcpay localnet: {PROGRAM_SO} is missing; run scripts/build-program",
                file=sys.stderr,
            )
            return 1
        argv = ["--bpf-program", str(PROGRAM_ID), str(PROGRAM_SO), *argv]
    os.execv(str(python), [str(python), "-m", "svcpay.localnet.server", *argv])
    return 0  # not reached


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(
        prog="svcpay", description="svcpay: HTTP 402 payments on Solana"
    )
    parser.add_argument("command", choices=["localnet"], help="localnet: run the local validator")
    if not args or args[0] in ("-h", "--help"):
        parser.print_help()
        print("\n`svcpay localnet --help` lists the validator's flags.")
        return 0
    if args[0] == "localnet":
        return localnet(args[1:])
    parser.parse_args(args[:1])  # prints the usage error and exits 2
    return 2


if __name__ == "__main__":
    sys.exit(main())
