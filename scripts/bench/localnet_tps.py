"""Transactions per second through the local validator over JSON-RPC (scripts/bench-localnet).

Signs N transactions up front (distinct amounts, one recent blockhash), sends them one after
another over a keep-alive connection, then confirms them all. Prints numbers; asserts
nothing. N defaults to 500 (`--n 2000` for more).
"""

from __future__ import annotations

import argparse
import base64
import time

import httpx
from solders.hash import Hash
from solders.instruction import Instruction
from solders.keypair import Keypair
from solders.message import MessageV0
from solders.transaction import VersionedTransaction
from spl.token.constants import TOKEN_PROGRAM_ID
from spl.token.instructions import transfer_checked
from spl.token.models import TransferCheckedParams

from svcpay.localnet.chain import Chain
from svcpay.localnet.process import localnet
from svcpay.program import instructions, pda

USDC = 10**6


def rate(chain: Chain, http: httpx.Client, build: list[tuple[Instruction, Keypair]]) -> float:
    latest = chain.rpc("getLatestBlockhash", {"commitment": "confirmed"})
    blockhash = Hash.from_string(latest["value"]["blockhash"])
    wires = [
        base64.b64encode(
            bytes(VersionedTransaction(MessageV0.try_compile(s.pubkey(), [ix], [], blockhash), [s]))
        ).decode()
        for ix, s in build
    ]
    start = time.perf_counter()
    sigs = []
    for wire in wires:
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "sendTransaction",
            "params": [wire, {"encoding": "base64", "preflightCommitment": "confirmed"}],
        }
        reply = http.post(chain.url, json=body).json()
        if "error" in reply:
            raise RuntimeError(reply["error"])
        sigs.append(reply["result"])
    elapsed = time.perf_counter() - start
    statuses = chain.rpc("getSignatureStatuses", sigs)["value"]
    assert all(s and s["err"] is None for s in statuses), "a benchmark transaction failed"
    return len(wires) / elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=500)
    n = parser.parse_args().n
    with localnet() as node, httpx.Client(timeout=30) as http:
        chain = Chain(node.url, node.can_time_travel)
        provider, facilitator, client = (chain.funded_keypair() for _ in range(3))
        mint = chain.create_mint()
        dest = chain.token_account(provider.pubkey(), mint)
        wallet = chain.token_account(client.pubkey(), mint, 10**9 * USDC)
        ix = instructions.create_plan(
            provider.pubkey(), 1, mint, dest, facilitator.pubkey(), USDC, 30 * 86_400, 0
        )
        chain.send_ok([ix], [provider])
        plan = pda.plan_address(provider.pubkey(), 1)
        chain.send_ok(
            [instructions.subscribe(plan, client.pubkey(), wallet, mint, dest, 10**8 * USDC)],
            [client],
        )

        transfers = [
            (
                transfer_checked(
                    TransferCheckedParams(
                        program_id=TOKEN_PROGRAM_ID,
                        source=wallet,
                        mint=mint,
                        dest=dest,
                        owner=client.pubkey(),
                        amount=i + 1,
                        decimals=6,
                    )
                ),
                client,
            )
            for i in range(n)
        ]
        deducts = [
            (
                instructions.deduct_allowance(
                    facilitator.pubkey(), plan, client.pubkey(), wallet, mint, dest, i + 1
                ),
                facilitator,
            )
            for i in range(n)
        ]
        print(f"validator: {node.kind}, {n} transactions each, sequential over one connection")
        print(f"SPL token transfer_checked   {rate(chain, http, transfers):8.1f} tx/s")
        print(f"svc_billing deduct_allowance {rate(chain, http, deducts):8.1f} tx/s")


if __name__ == "__main__":
    main()
