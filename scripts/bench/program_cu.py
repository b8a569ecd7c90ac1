"""Compute units of each svc_billing instruction and rent of each account, in the runtime.

Run through scripts/bench-program. The instructions that move tokens are measured with an
SPL Token mint and again with Token-2022 mints: plain, with a 1.5% transfer fee, and
PYUSD-like (a transfer hook, the workspace's test hook, whose own work is in the figure; a
permanent delegate; a zero fee). Measures on the drop-in validator and on
solana-test-validator (when it is built; `--validator` picks one) with the same keypairs, so
the PDA bump searches, and so the compute units, are the same work on both. Prints a table (or
JSON with --json); never asserts: targets are compared by people, in the issue notes.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re

from solders.keypair import Keypair
from solders.pubkey import Pubkey

from svcpay.localnet import test_hook
from svcpay.localnet.chain import Chain
from svcpay.localnet.process import DROP_IN, PROGRAM_SO, TEST_VALIDATOR, localnet
from svcpay.localnet.validator import ValidatorNotFound, find_validator
from svcpay.program import instructions, pda, sessions
from svcpay.program.generated.accounts.session import Session
from svcpay.program.generated.program_id import PROGRAM_ID
from svcpay.program.session_client import pack
from svcpay.program.tokens import route_with
from svcpay.protocol import token2022 as t22
from svcpay.protocol.programs import TOKEN_2022_PROGRAM
from svcpay.protocol.voucher import SignedVoucher

USDC = 10**6
DAY = 86_400


def keypair(name: str) -> Keypair:
    """The same keypair in every run (bump searches depend on the keys)."""
    return Keypair.from_seed(hashlib.sha256(f"svcpay-bench-{name}".encode()).digest())


def measure(chain: Chain) -> dict[str, int]:
    provider, facilitator = chain.fund(keypair("provider")), chain.fund(keypair("facilitator"))
    # The same short period on both validators (the real one's clock only runs): the program's
    # date arithmetic then works on the same magnitudes, and costs the same.
    period = 3
    mint = chain.create_mint()
    dest = chain.token_account(provider.pubkey(), mint)
    out: dict[str, int] = {}

    ix = instructions.create_plan(
        provider.pubkey(), 1, mint, dest, facilitator.pubkey(), 10 * USDC, period, 3 * DAY
    )
    out["create_plan CU"] = chain.send_ok([ix], [provider]).compute_units
    plan = pda.plan_address(provider.pubkey(), 1)

    plain, metered = chain.fund(keypair("plain")), chain.fund(keypair("metered"))
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

    chain.advance_to(chain.unix_timestamp() + period)
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
    # Deployed: the upgradeable loader's program-data account (a 45-byte header, the ELF).
    out["program deploy rent lamports"] = chain.minimum_balance(45 + PROGRAM_SO.stat().st_size)
    out.update(measure_sessions(chain))
    for label, extensions in TOKEN_2022_MINTS:
        out.update(measure_token_2022(chain, label, extensions))
    return out


# Token-2022 mints measured beside SPL Token: (label, create_mint_instructions' keywords).
TOKEN_2022_MINTS: list[tuple[str, dict[str, object]]] = [
    ("Token-2022", {}),
    ("Token-2022 1.5% fee", {"transfer_fee": (150, 10_000)}),
    ("PYUSD-like (hook)", {
        "transfer_hook": test_hook.HOOK_PROGRAM, "transfer_fee": (0, 0),
        "permanent_delegate": keypair("t22-authority").pubkey(),
    }),
]  # fmt: skip


def measure_token_2022(chain: Chain, label: str, extensions: dict[str, object]) -> dict[str, int]:
    """create_plan, subscribe, deduct_allowance, collect and open_session with a Token-2022
    mint of `extensions` (fixed keypairs: the same PDAs, the same work, on every run)."""
    tag = label.lower().replace(" ", "-")
    provider, facilitator = (
        chain.fund(keypair(f"{tag}-provider")),
        chain.fund(keypair(f"{tag}-facilitator")),
    )
    mint = test_hook.create_mint(chain, 6, mint=keypair(f"{tag}-mint"), **extensions)
    info = t22.mint_info(TOKEN_2022_PROGRAM, chain.account(mint).data)  # type: ignore[union-attr]

    def extra(source: Pubkey, destination: Pubkey, authority: Pubkey, amount: int):  # type: ignore[no-untyped-def]
        return route_with(
            mint, info, source=source, destination=destination, authority=authority,
            amount=amount, account_data=lambda k: (a.data if (a := chain.account(k)) else None),
        ).extra  # fmt: skip

    t22_program = {"token_program": TOKEN_2022_PROGRAM}
    dest = chain.token_account(provider.pubkey(), mint, program_id=TOKEN_2022_PROGRAM)
    period, out = 3, {}
    ix = instructions.create_plan(
        provider.pubkey(), 1, mint, dest, facilitator.pubkey(), 10 * USDC, period, 3 * DAY,
        **t22_program,
    )  # fmt: skip
    out[f"{label}: create_plan CU"] = chain.send_ok([ix], [provider]).compute_units
    plan = pda.plan_address(provider.pubkey(), 1)
    metered = chain.fund(keypair(f"{tag}-metered"))
    source = chain.token_account(metered.pubkey(), mint, 100 * USDC, program_id=TOKEN_2022_PROGRAM)
    delegate = pda.delegate_address(metered.pubkey())
    ix = instructions.subscribe(
        plan, metered.pubkey(), source, mint, dest, 20 * USDC, **t22_program,
        extra=extra(source, dest, delegate, 10 * USDC),
    )  # fmt: skip
    out[f"{label}: subscribe with allowance CU"] = chain.send_ok([ix], [metered]).compute_units
    ix = instructions.deduct_allowance(
        facilitator.pubkey(), plan, metered.pubkey(), source, mint, dest, USDC // 2,
        **t22_program, extra=extra(source, dest, delegate, USDC // 2),
    )  # fmt: skip
    out[f"{label}: deduct_allowance CU"] = chain.send_ok([ix], [facilitator]).compute_units
    chain.advance_to(chain.unix_timestamp() + period)
    ix = instructions.collect(
        plan, metered.pubkey(), source, mint, dest, has_allowance=True, **t22_program,
        extra=extra(source, dest, delegate, 10 * USDC),
    )  # fmt: skip
    out[f"{label}: collect with allowance CU"] = chain.send_ok([ix], [facilitator]).compute_units
    payer = chain.fund(keypair(f"{tag}-session-payer"))
    payer_token = chain.token_account(
        payer.pubkey(), mint, 100 * USDC, program_id=TOKEN_2022_PROGRAM
    )
    session = pda.session_address(payer.pubkey(), 1)
    ix = sessions.open_session(
        payer.pubkey(), 1, signer=payer.pubkey(), mint=mint, payer_token=payer_token,
        recipient=dest, deposit=10 * USDC, price=1_000, expires_at=chain.unix_timestamp() + DAY,
        dispute_secs=3_600, token_program=TOKEN_2022_PROGRAM,
        extra=extra(payer_token, pda.vault_address(session), payer.pubkey(), 10 * USDC),
    )  # fmt: skip
    out[f"{label}: open_session CU"] = chain.send_ok([ix], [payer]).compute_units
    return out


def consumed(logs: list[str], program: str) -> list[int]:
    """Compute units each invocation of `program` consumed, from the runtime's log lines
    (an outer program's figure includes the programs it called)."""
    found = re.findall(rf"Program {program} consumed (\d+) of", "\n".join(logs))
    return [int(n) for n in found]


def measure_sessions(chain: Chain, batch: int = 8) -> dict[str, int]:
    """Sessions: open, top-up, redeem (it records the claim: no transfer; the Ed25519
    precompile adds nothing to the count) and withdraw (the transfer), as many sessions
    redeemed and withdrawn in one transaction as fit (of `batch`), as many redeemed alone,
    request_close and close."""
    payer, provider = chain.fund(keypair("session-payer")), chain.fund(keypair("session-provider"))
    key = keypair("session-key")
    mint = chain.create_mint()
    payer_token = chain.token_account(payer.pubkey(), mint, 1_000 * USDC)
    recipient = chain.token_account(provider.pubkey(), mint)
    out: dict[str, int] = {}
    addresses = []
    for session_id in range(1, batch + 2):
        ix = sessions.open_session(
            payer.pubkey(), session_id, signer=key.pubkey(), mint=mint, payer_token=payer_token,
            recipient=recipient, deposit=10 * USDC, price=1_000,
            expires_at=chain.unix_timestamp() + DAY, dispute_secs=3_600,
        )  # fmt: skip
        units = chain.send_ok([ix], [payer]).compute_units
        out.setdefault("open_session CU", units)
        addresses.append(pda.session_address(payer.pubkey(), session_id))

    def state(address: Pubkey) -> Session:
        acct = chain.account(address)
        assert acct is not None
        return Session.decode(acct.data)

    first = addresses[0]
    one = SignedVoucher.sign(key, first, 1_000)
    result = chain.send_ok(sessions.redeem(state(first), first, one), [provider])
    program = str(PROGRAM_ID)
    token = str(state(first).token_program)
    # [precompile, redeem_session, withdraw_session]: the program's first invocation is the
    # redeem (it calls nothing), the second the withdrawal (its transfer included).
    redeem, withdraw = consumed(result.logs, program)[:2]
    out["redeem + withdraw CU (transaction)"] = result.compute_units
    out["redeem_session CU"] = redeem
    out["withdraw_session CU (token transfer included)"] = withdraw
    out["  of which the token transfer"] = sum(consumed(result.logs, token))
    vouchers = [(state(a), a, SignedVoucher.sign(key, a, 2_000)) for a in addresses[1:]]
    fits = pack(vouchers, provider.pubkey())[0]
    result = chain.send_ok(sessions.redeem_many(fits), [provider])
    out["sessions redeemed in one transaction (size limit)"] = len(fits)
    out[f"redeem + withdraw x{len(fits)} in one transaction CU"] = result.compute_units
    more = [(state(a), a, SignedVoucher.sign(key, a, 3_000)) for a in addresses[1:]]
    alone = pack(more, provider.pubkey(), pay=False)[0]
    result = chain.send_ok(sessions.redeem_many(alone, pay=False), [provider])
    out["sessions redeemed alone in one transaction (size limit, of the batch)"] = len(alone)
    out[f"redeem_session x{len(alone)} alone CU"] = result.compute_units
    acct = chain.account(first)
    assert acct is not None
    out["session account bytes"] = len(acct.data)
    out["session rent lamports"] = acct.lamports
    s = state(first)
    ix = sessions.top_up(s, first, USDC)
    out["top_up_session CU"] = chain.send_ok([ix], [payer]).compute_units
    ix = sessions.request_close(s, first)
    out["request_close_session CU"] = chain.send_ok([ix], [payer]).compute_units
    ix = sessions.close(s, first, provider.pubkey())
    before = chain.balance(payer.pubkey())
    out["close_session CU"] = chain.send_ok([ix], [provider]).compute_units
    # The vault's rent and the session's, less the empty tombstone's (docs/adr/0037).
    out["rent back to the payer at close lamports"] = chain.balance(payer.pubkey()) - before
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--validator",
        choices=[DROP_IN, TEST_VALIDATOR, "both"],
        default=None,
        help="where to measure (default: both when solana-test-validator is built)",
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    chosen = args.validator
    if chosen is None:
        try:
            find_validator()
            chosen = "both"
        except ValidatorNotFound:
            chosen = DROP_IN
    kinds = [DROP_IN, TEST_VALIDATOR] if chosen == "both" else [chosen]
    results: dict[str, dict[str, int]] = {}
    for kind in kinds:
        with localnet(validator=kind, deploy=True) as node:
            results[node.describe()] = measure(Chain(node.url, node.can_time_travel))
    if args.json:
        print(json.dumps(results, indent=2))
        return
    names = list(next(iter(results.values())))
    width = max(map(len, names))
    columns = list(results)
    for i, column in enumerate(columns):
        print(f"column {i + 1}: {column}")
    print(f"{'':<{width}}  " + "  ".join(f"{f'({i + 1})':>12}" for i in range(len(columns))))
    for name in names:
        values = [results[c][name] for c in columns]
        differs = "  differs" if len(set(values)) > 1 else ""
        print(f"{name:<{width}}  " + "  ".join(f"{v:>12,}" for v in values) + differs)


if __name__ == "__main__":
    main()
