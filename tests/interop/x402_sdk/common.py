"""What the SDK programs here share: keypair files, the paying client, serving an app and
saying when it is ready. Runs in the SDK's environment (scripts/x402-sdk), never in
svcpay's; pay-kit's programs (tests/interop/pay_kit, another environment, without x402)
import it too, so x402 is imported only where a paying client is made."""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
from collections.abc import Awaitable, Callable
from contextlib import suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any

import uvicorn
from solders.keypair import Keypair

if TYPE_CHECKING:
    from x402 import x402Client


def load_keypair(path: str) -> Keypair:
    """A keypair file in the Solana CLI's format (a JSON array of 64 bytes)."""
    return Keypair.from_bytes(bytes(json.loads(Path(path).read_text())))


def paying_client(keypair: str, rpc: str, network: str, mint: str) -> x402Client:
    """The SDK's async payment client with the exact SVM scheme, paying as the keypair
    file's wallet and building transactions with `rpc`."""
    from x402 import x402Client
    from x402.mechanisms.svm import KeypairSigner
    from x402.mechanisms.svm.exact import register_exact_svm_client

    client = x402Client()
    register_exact_svm_client(client, KeypairSigner(load_keypair(keypair)), rpc_url=rpc)
    # The SDK pays only the USDC mints it knows unless told otherwise: allow the local one.
    client.set_spend_controls({"allowed_assets": [{"network": network, "asset": mint}]})
    return client


def payer_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The options of a paying client program: who pays, on what, and `--replay`."""
    parser.add_argument("--keypair", required=True, help="the payer's keypair file")
    parser.add_argument("--rpc", required=True, help="the cluster's JSON-RPC URL")
    parser.add_argument("--network", required=True, help="its CAIP-2 id, as the SDK knows it")
    parser.add_argument("--mint", required=True, help="the token the SDK may pay in")
    parser.add_argument("--replay", action="store_true", help="then replay the payment")
    return parser


def seller_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The options of a selling server program: where it listens, its facilitator, its
    price and who is paid."""
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--facilitator", required=True, help="the facilitator's base URL")
    parser.add_argument("--pay-to", required=True, help="the wallet paid (its ATA receives)")
    parser.add_argument("--mint", required=True)
    parser.add_argument("--network", required=True, help="CAIP-2 id")
    parser.add_argument("--price", type=int, required=True, help="in base units of the mint")
    return parser


def print_report(
    run: Callable[[argparse.Namespace], Awaitable[dict[str, Any]]],
    args: argparse.Namespace,
    refused: type[Exception],
) -> int:
    """Prints `run`'s JSON report (exit 0), or `{"error": ...}` when the SDK refused to pay
    (exit 1)."""
    try:
        report, code = asyncio.run(run(args)), 0
    except refused as e:
        report, code = {"error": f"{type(e).__name__}: {e}"}, 1
    print(json.dumps(report))
    return code


def serve(app: object, host: str, port: int, name: str, path: str = "") -> None:
    """Serves `app`; prints `<name> ready http://host:port<path>` once it listens (port 0:
    any free port). SIGTERM stops it as SIGINT does."""
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning"))

    async def main() -> None:
        task = asyncio.create_task(server.serve())
        while not server.started and not task.done():
            await asyncio.sleep(0.02)
        if server.started:
            bound = server.servers[0].sockets[0].getsockname()[1]
            print(f"{name} ready http://{host}:{bound}{path}", flush=True)
        await task

    signal.signal(signal.SIGTERM, signal.default_int_handler)
    with suppress(KeyboardInterrupt):
        asyncio.run(main())
