"""MPP `charge` paid end to end on the drop-in validator, svcpay beside pay-kit (issue 24's
anchor): the same price (0.001 USDC, at mainnet USDC's address as pay-kit prices it) on the
same FastAPI handler, every request a distinct pulled charge the server co-signs, sends and
confirms before answering.

- svcpay: the gate (uvicorn, 1 worker, uvloop, httptools) settling through svcpay's
  facilitator (`svcpay facilitator serve`, SQLite) after the handler answers;
- pay-kit 0.10: its FastAPI gate (`RequirePayment`), which settles by itself.

Both servers on core 0, wrk (-c32) on core 1 with the validator and the facilitator. The
credentials are built here as pay-kit's client builds them, for each server's own challenge,
over 128 payers, just before each run (a blockhash lives about a minute). Prints numbers;
asserts nothing.

    python -m scripts.bench.mpp_e2e [--seconds 10] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import statistics
import sys
import tempfile
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path

import httpx
from solders.hash import Hash
from solders.keypair import Keypair

from scripts.bench.gate_http import (
    ROOT,
    UVICORN,
    Result,
    free_port,
    lua_script,
    sdk_python,
    server,
    table,
    wrk,
)
from svcpay.keys import save_keypair
from svcpay.localnet.accounts import (
    LOCAL_USDC_AUTHORITY,
    USDC_MAINNET_MINT,
    usdc_mint_account,
    write_account_file,
)
from svcpay.localnet.chain import Chain
from svcpay.localnet.process import localnet
from svcpay.protocol import mpp
from svcpay.schemes.mpp_charge import client as charge_client
from svcpay.schemes.mpp_charge.client import ChargeClient

PAYERS = 128
PER_SECOND = 1_500  # credentials per second of a run: more than either path serves
PRICE = 1_000  # 0.001 USDC


def build(
    offer: charge_client.ChargeOffer, payers: list[Keypair], n: int, blockhash: Hash
) -> list[str]:
    """n distinct credentials for `offer`, round-robin over `payers` (each payer's told
    apart by their compute-unit price), signed over `blockhash`."""
    offer = replace(offer, recent_blockhash=str(blockhash))
    clients = [ChargeClient(p, None) for p in payers]  # type: ignore[arg-type]  # no RPC needed

    async def all_of() -> list[str]:
        out = []
        for i in range(n):
            price = i // len(clients) + 1
            tx = await clients[i % len(clients)].transaction(offer, compute_unit_price=price)
            payload = {"type": "transaction", "transaction": base64.b64encode(bytes(tx)).decode()}
            out.append(mpp.Credential(offer.challenge, payload).header())
        return out

    return asyncio.run(all_of())


def offer_of(url: str) -> charge_client.ChargeOffer:
    reply = httpx.get(url, timeout=30)
    offers = [o for o in charge_client.offers(reply.headers.get_list("www-authenticate")) if o.pull]
    if reply.status_code != 402 or not offers:
        raise SystemExit(f"bench-mpp: {url} answered {reply.status_code} with no charge to pull")
    return offers[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    pay_kit = sdk_python("pay-kit")
    if pay_kit is None:
        raise SystemExit("bench-mpp: pay-kit's environment is missing (scripts/pay-kit)")
    n = PER_SECOND * args.seconds
    rounds: list[dict[str, Result]] = []
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        usdc = write_account_file(Path(tmp) / "usdc.json", usdc_mint_account())
        node = stack.enter_context(localnet(accounts=[(str(USDC_MAINNET_MINT), usdc)]))
        chain = Chain(node.url, node.can_time_travel)
        seller, operator, fee_payer = Keypair(), chain.funded_keypair(), chain.funded_keypair()
        seller_usdc = chain.token_account(seller.pubkey(), USDC_MAINNET_MINT)
        print(f"bench-mpp: funding {PAYERS} payers ...", file=sys.stderr)
        payers = []
        for _ in range(PAYERS):
            payer = chain.funded_keypair()
            ata = chain.token_account(payer.pubkey(), USDC_MAINNET_MINT)
            chain.mint_to(USDC_MAINNET_MINT, ata, 10**9, authority=LOCAL_USDC_AUTHORITY)
            payers.append(payer)
        if chain.can_time_travel:  # pay-kit checks accounts at finalized
            chain.time_travel(chain.unix_timestamp() + 30)
        keys = Path(tmp)
        operator_file = save_keypair(operator, keys / "operator.json")
        fee_payer_file = save_keypair(fee_payer, keys / "fee-payer.json")
        port = {k: free_port() for k in ("fac", "svcpay", "pk")}
        url = {k: f"http://127.0.0.1:{p}" for k, p in port.items()}
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        fac_env = env | {
            "SVCPAY_FACILITATOR_KEYPAIR": str(fee_payer_file),
            "SVCPAY_RPC_URL": node.url,
            "SVCPAY_DATABASE_URL": f"sqlite:///{Path(tmp) / 'facilitator.db'}",
            "SVCPAY_SETTLE_UNREGISTERED": "1",
            "SVCPAY_SETTLE_RATE": "100000",
            "SVCPAY_SETTLE_BURST": "100000",
        }
        cmd = [
            "1",
            sys.executable,
            "-m",
            "svcpay.cli",
            "facilitator",
            "serve",
            "--port",
            str(port["fac"]),
        ]
        stack.enter_context(server(cmd, url["fac"], "facilitator", fac_env))
        gate_env = env | {
            "BENCH_RPC": node.url,
            "BENCH_OWNER": str(seller.pubkey()),
            "BENCH_PAY_TO": str(seller_usdc),
            "BENCH_TOKEN": str(USDC_MAINNET_MINT),
            "BENCH_FEE_PAYER": str(fee_payer.pubkey()),
            "BENCH_FACILITATOR_URL": url["fac"],
            "BENCH_PRICE": str(PRICE),
        }
        cmd = ["0", sys.executable, "-m", "uvicorn", *UVICORN, "scripts.bench.mpp_gate_app:app",
               "--port", str(port["svcpay"])]  # fmt: skip
        stack.enter_context(server(cmd, url["svcpay"], "svcpay", gate_env))
        program = str(ROOT / "tests/interop/pay_kit/pk_server.py")
        cmd = ["0", pay_kit, program, "--port", str(port["pk"]), "--keypair", str(operator_file),
               "--rpc", node.url, "--pay-to", str(seller.pubkey()), "--price-usd", "0.001",
               "--gc-freeze"]  # fmt: skip
        secret = {"PAY_KIT_MPP_CHALLENGE_BINDING_SECRET": "bench-" + "0" * 32}
        stack.enter_context(server(cmd, url["pk"], "pay-kit", env | secret))
        for number in range(1, args.rounds + 1):
            print(f"bench-mpp: round {number} of {args.rounds} ...", file=sys.stderr)
            results = {}
            for name, key in (("svcpay gate + facilitator", "svcpay"), ("pay-kit's gate", "pk")):
                offer = offer_of(url[key] + "/paid")
                latest = chain.rpc("getLatestBlockhash", {"commitment": "confirmed"})
                blockhash = Hash.from_string(latest["value"]["blockhash"])
                values = build(offer, payers, n, blockhash)
                script = lua_script(Path(tmp) / f"{key}.lua", "Authorization", values)
                results[name] = wrk(url[key] + "/paid", script, args.seconds)
            rounds.append(results)
            svc, pk = results["svcpay gate + facilitator"], results["pay-kit's gate"]
            print(f"round {number}: svcpay / pay-kit {svc.rps / pk.rps:.2f}", file=sys.stderr)
    print(
        "MPP charge paid end to end on the drop-in validator; wrk -c32; "
        f"{args.rounds} x {args.seconds} s, median"
    )
    table(rounds, lambda name: False)
    ratios = [r["svcpay gate + facilitator"].rps / r["pay-kit's gate"].rps for r in rounds]
    each = " ".join(f"{v:.2f}" for v in ratios)
    print(f"svcpay / pay-kit, each from one round: median {statistics.median(ratios):.2f} ({each})")


if __name__ == "__main__":
    main()
