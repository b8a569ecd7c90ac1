"""`svcpay example serve`: the example API (svcpay.examples.resource_server) with its
configuration as flags, so a newcomer sells an API with `svcpay` commands only.

The flags mirror the module's SVCPAY_* variables: --pay-to, --mint, --plan (and
--metered-plan, default --plan; --plan-mint when the plans are in another token),
--facilitator, -k (the metered plan's billing authority) and -u (the RPC node); the
facilitator's key is read from its `GET /supported`. The variables without a flag (the
facilitator's API key, which session vouchers are redeemed with, the memo secret, ...:
`resource_server.UNFLAGGED`) are read from the environment, as the module reads them.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from svcpay import stopping
from svcpay.cli._common import (
    Subparsers,
    UsageError,
    command,
    load_signer,
    pubkey_arg,
    run,
    subcommands,
)
from svcpay.cli._mints import MINT_HELP, mint_arg, resolve_mint
from svcpay.cli.facilitator import listen, port_arg

if TYPE_CHECKING:
    from solders.pubkey import Pubkey

    from svcpay.examples.resource_server import Settings

NAME = "example"
DEFAULT_FACILITATOR = "http://127.0.0.1:8402"
ENVIRONMENT = """\
environment (as python -m svcpay.examples.resource_server reads it):
  SVCPAY_FACILITATOR_API_KEY  the provider's API key at --facilitator, which redeems the
                              session vouchers served (without it they wait in --state-db)
  SVCPAY_FACILITATOR_KEY      the facilitator's proof-signing key (default: its /supported)
  SVCPAY_MEMO_SECRET          the key of the memos in 402 terms (default: random per run)
  SVCPAY_OWNER                the wallet that owns --pay-to (default: read on chain)
  SVCPAY_FEE_PAYER            x402's fee payer (default: the facilitator's key)"""


def _mints_of(args: argparse.Namespace) -> tuple[Pubkey, Pubkey | None]:
    """--mint and --plan-mint as addresses: a stablecoin's symbol is looked up on the
    cluster of the node at --url (one getGenesisHash), only when one was given."""
    if not isinstance(args.mint, str) and not isinstance(args.plan_mint, str):
        return args.mint, args.plan_mint

    async def go() -> tuple[Pubkey, Pubkey | None]:
        from solana.rpc.async_api import AsyncClient

        rpc = AsyncClient(args.url)
        try:
            mint = await resolve_mint(rpc, args.mint)
            plan_mint = None if args.plan_mint is None else await resolve_mint(rpc, args.plan_mint)
            return mint, plan_mint
        finally:
            await rpc.close()

    return run(go())


def settings_of(args: argparse.Namespace) -> Settings:
    """The example's settings: the flags, and the environment for what has no flag
    (SVCPAY_FACILITATOR_API_KEY, SVCPAY_MEMO_SECRET, ...); UsageError for a bad value."""
    from svcpay.examples import resource_server as example

    try:
        unflagged = example.unflagged_from_env()
    except ValueError as e:
        raise UsageError(str(e)) from None
    mint, plan_mint = _mints_of(args)
    symbol = args.token_symbol or (args.mint if isinstance(args.mint, str) else None)
    return example.Settings(
        facilitator_url=args.facilitator,
        pay_to=str(args.pay_to),
        mint=str(mint),
        subscription_plan=str(args.plan),
        metered_plan=str(args.metered_plan or args.plan),
        billing_authority=Path(args.keypair),
        rpc_url=args.url,
        network=args.network,
        state_db=args.state_db,
        x402=not args.no_x402,
        plan_mint=str(plan_mint) if plan_mint else None,
        paywall_rpc_url=args.paywall_rpc_url,
        token_symbol=symbol,
        **unflagged,
    )


def serve(args: argparse.Namespace) -> int:
    from svcpay._extras import require

    require("svcpay example serve", ["gate"], ["fastapi", "uvicorn"])  # before importing them
    import uvicorn

    from svcpay.examples import resource_server as example

    load_signer(args)  # a missing keypair says how to make one
    settings = settings_of(args)
    try:
        app = example.create_app(settings)
    except ValueError as e:  # ConfigError, KeypairFileError: one line saying what to fix
        raise UsageError(str(e)) from None
    sock = listen(args.host, args.port)
    server = uvicorn.Server(
        uvicorn.Config(app, host=args.host, port=args.port, log_level="warning")
    )

    def ready(port: int) -> None:
        print(f"svcpay example API ready http://{args.host}:{port}", flush=True)

    # Ctrl-C and SIGTERM are a normal way to stop a server: exit 0 (svcpay.stopping).
    return 0 if stopping.serve(server, ready, [sock]) else 1


def register(subparsers: Subparsers) -> None:
    parser = command(
        subparsers,
        NAME,
        None,
        help="run the example API sold through svcpay's gate",
        description="The example resource server (svcpay.examples.resource_server).",
    )
    sub = subcommands(parser, "example commands")
    p = command(
        sub,
        "serve",
        serve,
        help="serve the example API until Ctrl-C",
        description="Serves GET /v1/data (0.50 a request, one-time), GET /v1/resource "
        "(subscribers of --plan) and POST /v1/process (metered on --metered-plan, whose "
        "billing authority is -k) behind svcpay's gate, paid through --facilitator. Prints "
        "one ready line, then runs until Ctrl-C.",
        epilog=ENVIRONMENT,
    )
    p.add_argument(
        "--pay-to",
        type=pubkey_arg,
        required=True,
        metavar="TOKEN_ACCOUNT",
        help="the token account one-time payments go to (the owner's associated "
        "account of --mint, for x402)",
    )
    p.add_argument("--mint", type=mint_arg, required=True, help=f"{MINT_HELP} (6 decimals)")
    p.add_argument(
        "--plan", type=pubkey_arg, required=True, help="the plan that opens GET /v1/resource"
    )
    p.add_argument(
        "--plan-mint",
        type=mint_arg,
        metavar="MINT",
        help="the token the plans are priced in, when not --mint (e.g. PYUSD plans beside "
        "one-time payments in USDC): an address or a symbol, as --mint",
    )
    p.add_argument(
        "--token-symbol",
        metavar="NAME",
        help="what the browser paywall calls --mint when it is no stablecoin it knows by "
        "address (mainnet USDC, USDT, PYUSD are named already)",
    )
    p.add_argument(
        "--paywall-rpc-url",
        metavar="URL",
        help="the JSON-RPC URL payers' browsers reach, for paying and subscribing from the "
        "paywall with a wallet (default: --url; 'off': the page shows the terms only)",
    )
    p.add_argument(
        "--metered-plan",
        type=pubkey_arg,
        metavar="PLAN",
        help="the plan POST /v1/process draws on (default: --plan)",
    )
    p.add_argument(
        "--facilitator",
        default=DEFAULT_FACILITATOR,
        metavar="URL",
        help=f"the facilitator payments go through (default {DEFAULT_FACILITATOR})",
    )
    p.add_argument(
        "--network",
        default="",
        help="the network named in terms (default: the cluster of the RPC node at --url; "
        "another cluster stops the server)",
    )
    p.add_argument(
        "--state-db",
        type=Path,
        default=Path("resource-server.db"),
        metavar="FILE",
        help="SQLite file of used proofs and pending usage (default resource-server.db)",
    )
    p.add_argument("--no-x402", action="store_true", help="answer svcpay's 402 only")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=port_arg, default=8000, help="0 picks a free port (default 8000)")
