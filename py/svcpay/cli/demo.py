"""`svcpay demo`: the walkthrough of `scripts/demo` (svcpay.demo) on the embedded defaults.

It starts its own local validator, facilitator and resource server (on free ports, with
their files in a temporary directory), walks a paying client through the three flows, and
stops everything it started; the analytics chart is left in --out.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from svcpay import demo
from svcpay.cli._common import Subparsers, command
from svcpay.demo import DEFAULT_OUT

NAME = "demo"


def handle(args: argparse.Namespace) -> int:
    return demo.run(args.out)


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
