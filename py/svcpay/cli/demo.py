"""`svcpay demo`: the walkthrough of `scripts/demo` (svcpay.demo) on the embedded defaults.

It starts its own local validator, facilitator and resource server (on free ports, with
their files in a temporary directory), walks a paying client through the three flows, and
stops everything it started (with --serve, only at Ctrl-C, the paywall and the dashboard
up meanwhile); the analytics chart is left in --out. With --json the
narration goes to stderr and stdout gets one JSON object at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path

from svcpay import demo
from svcpay.cli._common import Subparsers, UsageError, command
from svcpay.demo import DEFAULT_OUT, TOKEN_2022_HELP

NAME = "demo"


def handle(args: argparse.Namespace) -> int:
    if args.out.exists() and not args.out.is_dir():
        raise UsageError(f"--out {args.out} is a file: give a directory for the chart")
    options = {"token_2022": True} if args.token_2022 else {}  # only what was asked
    if args.serve:
        options["serve"] = True
    if not args.json:
        return demo.run(args.out, **options)
    # The walkthrough's narration goes to stderr; stdout carries one JSON object.
    with contextlib.redirect_stdout(sys.stderr):
        code = demo.run(args.out, **options)
    chart = args.out / "analytics.png"
    data = {"ok": code == 0, "exitCode": code, "chart": str(chart) if chart.exists() else None}
    print(json.dumps(data))
    return code


def register(subparsers: Subparsers) -> None:
    p = command(
        subparsers,
        NAME,
        handle,
        help="walk through svcpay's flows on a local validator (processes it starts)",
        description="Starts a local validator, the facilitator and the example resource "
        "server as separate processes, walks a paying client through one-time payment, "
        "subscription (with a renewal 30 days later) and metered billing, prints the "
        "webhooks and analytics, then stops everything. Needs the built program "
        "(scripts/demo builds it first).",
        global_options=False,
    )
    p.add_argument(
        "--out",
        type=Path,
        default=DEFAULT_OUT,
        metavar="DIR",
        help=f"where the analytics chart is written (default: {DEFAULT_OUT})",
    )
    p.add_argument("--token-2022", action="store_true", help=TOKEN_2022_HELP)
    p.add_argument(
        "--serve",
        action="store_true",
        help="after the walkthrough, keep the services up and print the paywall's and the "
        "dashboard's URLs (with the API key and a funded wallet) until Ctrl-C",
    )
    p.add_argument(
        "--json",
        action="store_true",
        default=argparse.SUPPRESS,
        help='narrate on stderr; print {"ok", "exitCode", "chart"} on stdout at the end',
    )
