"""Billing crank throughput on the local validator (scripts/bench-crank): N subscriptions
fall due, one crank run collects them, as the facilitator runs it (leasing each
subscription in its database and recording the events); prints subscriptions per second
and transactions.
Setup (N subscribers) is not timed. Prints numbers; asserts nothing."""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time

from svcpay.facilitator.crank import run_once
from svcpay.facilitator.store import Store
from svcpay.localnet.chain import Chain
from svcpay.localnet.process import localnet
from svcpay.program import instructions, pda
from svcpay.program.client import BillingClient

USDC, PERIOD = 10**6, 30 * 86_400


async def main(n: int, database: str | None) -> None:
    with localnet() as node:
        chain = Chain(node.url, node.can_time_travel)
        # The payer creates every token account (about 2.04M lamports of rent each).
        chain.rpc("requestAirdrop", str(chain.payer.pubkey()), n * 3_000_000)
        provider, facilitator = chain.funded_keypair(), chain.funded_keypair(10**12)
        mint = chain.create_mint()
        dest = chain.token_account(provider.pubkey(), mint)
        ix = instructions.create_plan(
            provider.pubkey(), 1, mint, dest, facilitator.pubkey(), USDC, PERIOD, 0
        )
        chain.send_ok([ix], [provider])
        plan = pda.plan_address(provider.pubkey(), 1)
        start = time.perf_counter()
        for i in range(n):
            kp = chain.funded_keypair(10**8)
            wallet = chain.token_account(kp.pubkey(), mint, 3 * USDC)
            chain.send_ok([instructions.subscribe(plan, kp.pubkey(), wallet, mint, dest)], [kp])
            if (i + 1) % 500 == 0:
                print(
                    f"  setup: {i + 1}/{n} subscribers ({time.perf_counter() - start:.0f}s)",
                    flush=True,
                )
        later = chain.unix_timestamp() + PERIOD
        chain.advance_to(later)
        client = BillingClient.connect(node.url)
        with tempfile.TemporaryDirectory() as tmp:
            store = (
                Store.open(database or f"sqlite:///{tmp}/crank.db") if database != "none" else None
            )
            t0 = time.perf_counter()
            summary = await run_once(client, facilitator, plan, now=later, store=store)
            elapsed = time.perf_counter() - t0
            if store is not None:
                await store.close()
        await client.close()
    where = "no database" if database == "none" else (database or "SQLite")
    print(f"{n} due subscriptions ({where}): {summary.renewed} renewed in {elapsed:.1f}s "
          f"({summary.renewed / elapsed:,.0f}/s), {summary.transactions} transactions "
          f"({summary.renewed / max(summary.transactions, 1):.1f} renewals each), "
          f"{summary.skipped} skipped")  # fmt: skip


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument(
        "--database",
        help="the facilitator's database the run records leases and events in (default: "
        "SQLite in a temporary directory; 'none' for the bare crank)",
    )
    args = parser.parse_args()
    asyncio.run(main(args.n, args.database))
