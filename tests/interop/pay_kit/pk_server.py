"""An API sold with solana-foundation's pay-kit on FastAPI (`RequirePayment`), as its README
shows: pay-kit answers 402 with both an x402 `exact` challenge and an MPP one, and verifies
and settles an x402 payment itself (self-hosted, the operator paying the fees).

    pk_server.py --keypair FILE --rpc URL --pay-to WALLET --price-usd D [--host H] [--port P]
                 [--gc-freeze]

`localnet` to pay-kit: it prices in USDC at mainnet USDC's address, which the tests' validator
holds (svcpay.localnet.accounts). GET /paid costs D dollars; GET /free is free. Prints
`pay-kit server ready http://host:port`. `--gc-freeze` takes the loaded heap out of the
garbage collector's sight before serving, as scripts/bench-gate does to every server it
measures (docs/adr/0027).
"""

from __future__ import annotations

import argparse
import gc
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "x402_sdk"))  # common.py

import solana_pay_kit  # noqa: E402
from common import load_keypair, serve  # noqa: E402
from fastapi import Depends, FastAPI  # noqa: E402
from solana_pay_kit import Operator, usd  # noqa: E402
from solana_pay_kit.fastapi import RequirePayment, install  # noqa: E402
from solana_pay_kit.signer import LocalSigner  # noqa: E402


def create_app(args: argparse.Namespace) -> FastAPI:
    signer = LocalSigner.from_keypair(load_keypair(args.keypair))
    solana_pay_kit.configure(
        network="solana_localnet",
        rpc_url=args.rpc,
        operator=Operator(recipient=args.pay_to, signer=signer),
    )
    app = FastAPI()
    install(app)

    @app.get("/paid")
    async def paid(_: object = Depends(RequirePayment(usd(args.price_usd)))) -> dict[str, str]:
        return {"answer": "paid content"}

    @app.get("/free")
    async def free() -> dict[str, str]:
        return {"answer": "free content"}

    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--keypair", required=True, help="the operator (fee payer) keypair file")
    parser.add_argument("--rpc", required=True, help="the cluster's JSON-RPC URL")
    parser.add_argument("--pay-to", required=True, help="the wallet paid (its ATA receives)")
    parser.add_argument("--price-usd", required=True, help="the price of GET /paid, in dollars")
    parser.add_argument("--gc-freeze", action="store_true", help="gc.freeze() before serving")
    args = parser.parse_args()
    app = create_app(args)
    if args.gc_freeze:
        gc.collect()
        gc.freeze()
    serve(app, args.host, args.port, "pay-kit server")


if __name__ == "__main__":
    main()
