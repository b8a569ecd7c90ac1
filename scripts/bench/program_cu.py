"""Compute units of each svc_billing instruction and rent of each account, in the runtime.

Run through scripts/bench-program. Prints a table (or JSON with --json); never asserts:
targets are compared by people, in the issue notes.
"""

from __future__ import annotations

import json
import sys

from svcpay.localnet.chain import Chain
from svcpay.localnet.process import PROGRAM_SO, localnet
from svcpay.program import instructions, pda

USDC = 10**6
DAY = 86_400


def measure(chain: Chain) -> dict[str, int]:
    provider, facilitator = chain.funded_keypair(), chain.funded_keypair()
    mint = chain.create_mint()
    dest = chain.token_account(provider.pubkey(), mint)
    out: dict[str, int] = {}

    ix = instructions.create_plan(
        provider.pubkey(), 1, mint, dest, facilitator.pubkey(), 10 * USDC, 30 * DAY, 3 * DAY
    )
    out["create_plan CU"] = chain.send_ok([ix], [provider]).compute_units
    plan = pda.plan_address(provider.pubkey(), 1)

    plain, metered = chain.funded_keypair(), chain.funded_keypair()
    plain_tok = chain.token_account(plain.pubkey(), mint, 100 * USDC)
    metered_tok = chain.token_account(metered.pubkey(), mint, 100 * USDC)
    ix = instructions.subscribe(plan, plain.pubkey(), plain_tok, mint, dest)
    out["subscribe CU"] = chain.send_ok([ix], [plain]).compute_units
    ix = instructions.subscribe(plan, metered.pubkey(), metered_tok, mint, dest, 20 * USDC)
    out["subscribe with allowance CU"] = chain.send_ok([ix], [metered]).compute_units
    ix = instructions.deduct_allowance(
        facilitator.pubkey(), plan, metered.pubkey(), metered_tok, mint, dest, USDC // 2
    )
    out["deduct_allowance CU"] = chain.send_ok([ix], [facilitator]).compute_units

    chain.advance_to(chain.unix_timestamp() + 30 * DAY)
    ix = instructions.collect(plan, plain.pubkey(), plain_tok, mint, dest, has_allowance=False)
    out["collect CU"] = chain.send_ok([ix], [facilitator]).compute_units
    ix = instructions.collect(plan, metered.pubkey(), metered_tok, mint, dest, has_allowance=True)
    out["collect with allowance CU"] = chain.send_ok([ix], [facilitator]).compute_units

    ix = instructions.set_allowance_cap(metered.pubkey(), plan, 30 * USDC)
    out["set_allowance_cap CU"] = chain.send_ok([ix], [metered]).compute_units
    ix = instructions.pause(plain.pubkey(), plan, plain.pubkey())
    out["pause CU"] = chain.send_ok([ix], [plain]).compute_units
    ix = instructions.resume(plain.pubkey(), plan, plain.pubkey())
    out["resume CU"] = chain.send_ok([ix], [plain]).compute_units
    ix = instructions.cancel(plain.pubkey(), plan, plain.pubkey(), at_period_end=False)
    out["cancel CU"] = chain.send_ok([ix], [plain]).compute_units

    subscription = pda.subscription_address(plan, metered.pubkey())
    for name, address in (
        ("plan", plan),
        ("subscription", subscription),
        ("allowance", pda.allowance_address(subscription)),
    ):
        acct = chain.account(address)
        assert acct is not None
        out[f"{name} account bytes"] = len(acct.data)
        out[f"{name} rent lamports"] = acct.lamports

    provider_key = provider.pubkey()
    ix = instructions.update_plan(provider_key, plan, grace_secs=5 * DAY)
    out["update_plan CU"] = chain.send_ok([ix], [provider]).compute_units
    ix = instructions.deprecate_plan(provider_key, plan)
    out["deprecate_plan CU"] = chain.send_ok([ix], [provider]).compute_units
    ix = instructions.close_subscription(plain.pubkey(), plan, has_allowance=False)
    out["close_subscription CU"] = chain.send_ok([ix], [plain]).compute_units
    ix = instructions.cancel(metered.pubkey(), plan, metered.pubkey(), at_period_end=False)
    chain.send_ok([ix], [metered])
    ix = instructions.close_plan(provider_key, plan)
    out["close_plan CU"] = chain.send_ok([ix], [provider]).compute_units
    out["program .so bytes"] = PROGRAM_SO.stat().st_size
    return out


def main() -> None:
    with localnet() as node:
        results = measure(Chain(node.url, node.can_time_travel))
    if "--json" not in sys.argv:
        print(f"validator: {node.kind}")
    if "--json" in sys.argv:
        print(json.dumps(results, indent=2))
        return
    width = max(map(len, results))
    for name, value in results.items():
        print(f"{name:<{width}}  {value:>12,}")


if __name__ == "__main__":
    main()
