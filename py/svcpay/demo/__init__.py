"""The demo (`scripts/demo`, `svcpay demo`, `python -m svcpay.demo`): svcpay's processes on
the embedded defaults and a paying client walking through the spec's flows
(`svcpay.demo.walkthrough`, imported on first use so the CLI starts fast).

Layer 5 (docs/adr/0041): it may import every layer below it (the paying client, the
examples, the drop-in validator, the program, the schemes, the protocol, the root modules);
only `svcpay.cli` (`svcpay demo`) imports it. Inside, `options` and `context` (what the
steps share) are below the flow modules, and `walkthrough` is above them.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from svcpay.demo.options import DEFAULT_OUT, TOKEN_2022_HELP

__all__ = ["DEFAULT_OUT", "TOKEN_2022_HELP", "main", "run"]


def run(out_dir: Path = DEFAULT_OUT, *, token_2022: bool = False, serve: bool = False) -> int:
    """Runs the walkthrough (with the plans in a PYUSD-like Token-2022 mint if
    `token_2022`; the paywall and the dashboard kept up until Ctrl-C if `serve`): 0 when
    every step did what it should, 1 (the reason and the failing process's stderr on
    stderr) when one did not, 130 when interrupted."""
    from svcpay import stopping
    from svcpay._extras import require

    # Ctrl-C and SIGTERM request a stop from here on, the second of imports below included:
    # the walkthrough's first checkpoint ends it with 130 (svcpay.stopping).
    with stopping.handling():
        # The resource server (FastAPI, uvicorn), the facilitator and its analytics chart.
        require(
            "svcpay demo",
            ["gate", "facilitator", "charts"],
            ["fastapi", "uvicorn", "sqlalchemy", "alembic", "aiosqlite", "starlette", "matplotlib"],
        )
        from svcpay.demo.walkthrough import run as run_walkthrough

        return run_walkthrough(out_dir, token_2022=token_2022, serve=serve)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m svcpay.demo",
        description="svcpay's walkthrough: validator, facilitator and resource server as "
        "separate processes, and a paying client going through the three flows.",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=DEFAULT_OUT,
        metavar="DIR",
        help=f"where the analytics chart is written (default: {DEFAULT_OUT})",
    )
    parser.add_argument("--token-2022", action="store_true", help=TOKEN_2022_HELP)
    parser.add_argument(
        "--serve",
        action="store_true",
        help="keep the paywall and the dashboard up after the walkthrough, until Ctrl-C",
    )
    args = parser.parse_args(argv)
    options = {"token_2022": True} if args.token_2022 else {}  # only what was asked
    if args.serve:
        options["serve"] = True
    return run(args.out, **options)
