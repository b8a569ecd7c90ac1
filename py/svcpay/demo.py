"""A walkthrough of svcpay's on-chain billing in the real Solana runtime (`scripts/demo`).

A provider publishes a 30-day plan, a client subscribes (first period charged at once, with a
metered allowance), and the facilitator deducts metered usage until the allowance refuses.
Each step prints what was sent, what changed on chain, and the compute units it used.
"""

from __future__ import annotations

import asyncio
import sys
from decimal import Decimal

from solders.keypair import Keypair

from svcpay import demo_http
from svcpay.localnet.chain import Chain, TxResult
from svcpay.localnet.process import LocalnetError, ProgramBinaryMissing, localnet
from svcpay.program import errors, instructions, pda

USDC = 10**6
DAY = 24 * 60 * 60


def usdc(base_units: int) -> str:
    return f"{Decimal(base_units) / USDC:,.2f} USDC"


def step(title: str) -> None:
    print(f"\n── {title}")


def show(result: TxResult) -> None:
    status = "ok" if result.ok else f"FAILED ({result.program_error or result.error})"
    print(f"   transaction {status}, {result.compute_units:,} compute units")
    for event in result.events:
        fields = ", ".join(f"{k}={v}" for k, v in event.data.items())
        print(f"   event {event.name}: {fields}")


def main() -> int:
    try:
        with localnet() as node:
            print(f"svcpay demo: local validator ({node.kind}) at {node.url}")
            chain = Chain(node.url, node.can_time_travel)
            provider, client = walkthrough(chain)
            asyncio.run(demo_http.run(chain, node.url, provider, client))
            balances(chain, provider, client)
    except (ProgramBinaryMissing, LocalnetError) as e:
        print(f"demo: {e}", file=sys.stderr)
        return 1
    return 0


def balances(chain: Chain, provider: demo_http.Provider, client: Keypair) -> None:
    step("Balances")
    wallet = demo_http.chain_token(client, provider.mint)
    print(
        f"   client {usdc(chain.token_state(wallet)['amount'])}, "
        f"provider {usdc(chain.token_state(provider.destination)['amount'])}"
    )


def walkthrough(chain: Chain) -> tuple[demo_http.Provider, Keypair]:
    provider, facilitator, client = (chain.funded_keypair() for _ in range(3))
    mint = chain.create_mint(decimals=6)
    destination = chain.token_account(provider.pubkey(), mint)
    wallet = chain.token_account(client.pubkey(), mint, amount=50 * USDC)
    print("On-chain billing with the svc_billing program:")
    print(f"   provider {provider.pubkey()}, facilitator {facilitator.pubkey()}")
    print(f"   client {client.pubkey()} holds {usdc(chain.token_state(wallet)['amount'])}")

    step("1. The provider publishes a plan: 10 USDC every 30 days, 3 days of grace")
    plan = pda.plan_address(provider.pubkey(), 1)
    ix = instructions.create_plan(
        provider.pubkey(), 1, mint, destination, facilitator.pubkey(), 10 * USDC, 30 * DAY, 3 * DAY
    )
    show(chain.send_ok([ix], [provider]))
    print(f"   planId (the plan's address): {plan}")

    step("2. The client subscribes with a metered allowance of 2 USDC per cycle")
    ix = instructions.subscribe(plan, client.pubkey(), wallet, mint, destination, 2 * USDC)
    show(chain.send_ok([ix], [client]))
    subscription = pda.subscription_address(plan, client.pubkey())
    print(f"   subscription id (sent as X-Svc-Sub): {subscription}")
    print(
        f"   client {usdc(chain.token_state(wallet)['amount'])}, "
        f"provider {usdc(chain.token_state(destination)['amount'])}"
    )

    step("3. Metered calls: the facilitator deducts 0.50 USDC per call")
    call = 0
    while True:
        call += 1
        ix = instructions.deduct_allowance(
            facilitator.pubkey(), plan, client.pubkey(), wallet, mint, destination, USDC // 2
        )
        result = chain.send([ix], [facilitator])
        print(f"   call {call}:", end="")
        show(result)
        if not result.ok:
            refused = isinstance(result.program_error, errors.AllowanceExhausted)
            print(f"   → the cap is reached: a gate answers 402 AllowanceExhausted ({refused})")
            break

    return demo_http.Provider(provider, facilitator, mint, destination, plan), client


if __name__ == "__main__":
    sys.exit(main())
