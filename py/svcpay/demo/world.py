"""The chain as the demo sets it up: the USDC mint (or, with --token-2022, a PYUSD-like mint
for the plans), the provider and its two plans, the facilitator's and the resource server's
keys, and a client holding tokens and no SOL; and the balances each step shows."""

from __future__ import annotations

from dataclasses import dataclass

from solders.keypair import Keypair
from solders.pubkey import Pubkey
from spl.token.constants import TOKEN_PROGRAM_ID
from spl.token.instructions import get_associated_token_address

from svcpay.amounts import format_amount, to_base_units
from svcpay.demo.output import say, sol, step, usdc
from svcpay.examples.resource_server import PROCESS_PRICE
from svcpay.localnet import test_hook
from svcpay.localnet.chain import Chain
from svcpay.program import instructions, pda
from svcpay.protocol.programs import TOKEN_2022_PROGRAM

DAY = 86_400


def plan_times(can_time_travel: bool) -> tuple[int, int]:
    """(period, grace) of the demo's plans: a month and three days where the validator can
    travel in time (the drop-in); on solana-test-validator, whose clock only runs, 20 and
    5 seconds, so the renewal step waits a few seconds instead of a month."""
    return (30 * DAY, 3 * DAY) if can_time_travel else (20, 5)


def format_period(secs: int) -> str:
    return f"{secs // DAY} days" if secs >= DAY else f"{secs} seconds"


SUBSCRIPTION_PRICE = to_base_units("10")  # the plan that opens GET /v1/resource
METERED_PLAN_PRICE = to_base_units("1")  # the plan whose allowance POST /v1/process uses
MAX_OVERAGE = to_base_units("0.30")  # the client's metered cap: three calls
RAISE_BY = to_base_units("0.20")
CLIENT_FUNDS = to_base_units("50")
CLIENT_SOL = 50_000_000  # lamports, for the client's own transactions (subscribe, cap)


@dataclass(frozen=True)
class PlanToken:
    """The token the plans are priced in: the demo's USDC, or with --token-2022 a PYUSD-like
    Token-2022 mint, its program, and the provider's account of it (the plans' destination)."""

    mint: Pubkey
    symbol: str
    program: Pubkey
    pay_to: Pubkey
    hooked: bool = False  # its transfers call the test hook

    @property
    def token_2022(self) -> bool:
        return self.program == TOKEN_2022_PROGRAM

    def amount(self, units: int) -> str:
        return format_amount(units, symbol=self.symbol)


@dataclass(frozen=True)
class World:
    mint: Pubkey  # USDC: one-time payments and the session
    provider: Keypair
    pay_to: Pubkey
    plan: Pubkey  # 10 USDC every 30 days: GET /v1/resource
    metered_plan: Pubkey  # 1 USDC every 30 days + allowance: POST /v1/process
    facilitator: Keypair
    server_authority: Keypair  # the metered plan's billing authority (the resource server)
    client: Keypair
    plans_in: PlanToken  # USDC, or the PYUSD-like mint with --token-2022


@dataclass(frozen=True)
class Balances:
    client_usdc: int
    client_sol: int
    provider_usdc: int
    facilitator_sol: int
    client_plan_token: int = 0  # with --token-2022: the PYUSD-like mint's balances
    provider_plan_token: int = 0


def pyusd_like(chain: Chain, provider: Keypair) -> PlanToken:
    """A mint as PYUSD is on mainnet: Token-2022, 6 decimals, a transfer hook (the test hook,
    where the validator loaded it), a permanent delegate and a transfer fee of zero."""
    hooked = test_hook.loaded(chain)
    mint = test_hook.pyusd_like(chain, hook=hooked)
    say(f"PYUSD: a PYUSD-like Token-2022 mint {mint}: 6 decimals, a transfer fee of 0 bps,")
    say(f"   permanent delegate {chain.payer.pubkey()} (the issuer: it can move anyone's PYUSD),")
    if hooked:
        say(f"   transfer hook {test_hook.HOOK_PROGRAM} (svc_test_hook: it counts transfers)")
    else:
        say("   no transfer hook: the test hook is not built (target/deploy/svc_test_hook.so)")
    pay_to = chain.token_account(provider.pubkey(), mint, program_id=TOKEN_2022_PROGRAM)
    return PlanToken(mint, "PYUSD", TOKEN_2022_PROGRAM, pay_to, hooked)


def set_up_chain(chain: Chain, token_2022: bool = False) -> World:
    step("Setup on chain")
    mint = chain.create_mint(decimals=6)
    say(f"USDC: a 6-decimal mint {mint}")
    provider, facilitator = chain.funded_keypair(), chain.funded_keypair()
    server_authority = chain.funded_keypair(10**9)
    pay_to = chain.token_account(provider.pubkey(), mint)
    plans_in = PlanToken(mint, "USDC", TOKEN_PROGRAM_ID, pay_to)
    if token_2022:
        plans_in = pyusd_like(chain, provider)
    plan, metered_plan = (pda.plan_address(provider.pubkey(), n) for n in (1, 2))
    period, grace = plan_times(chain.can_time_travel)
    token, to, program = plans_in.mint, plans_in.pay_to, plans_in.program
    created = chain.send_ok(
        [
            instructions.create_plan(
                provider.pubkey(), 1, token, to, facilitator.pubkey(),
                SUBSCRIPTION_PRICE, period, grace, token_program=program,
            ),
            instructions.create_plan(
                provider.pubkey(), 2, token, to, server_authority.pubkey(),
                METERED_PLAN_PRICE, period, grace, token_program=program,
            ),
        ],
        [provider],
    )  # fmt: skip
    say(f"provider {provider.pubkey()}, payTo (its USDC account) {pay_to}")
    if plans_in.token_2022:
        say(f"   its PYUSD account {plans_in.pay_to} receives the plans' payments")
    price = plans_in.amount
    say(f"plan {plan}: {price(SUBSCRIPTION_PRICE)} every 30 days (GET /v1/resource)")
    say(f"   billing authority: the facilitator's key {facilitator.pubkey()}")
    say(
        f"plan {metered_plan}: {price(METERED_PLAN_PRICE)} every 30 days + "
        f"{price(PROCESS_PRICE)} per POST /v1/process from an allowance"
    )
    say(f"   billing authority: the resource server's key {server_authority.pubkey()}")
    say(f"both plans in one transaction: {created.compute_units:,} compute units")
    if plans_in.token_2022:
        say("one-time payments (1, 1b, 1c) and the session (5) stay in USDC: the example API")
        say("   sells its plans in one token (--plan-mint) and single calls in another; both")
        say("   work in PYUSD (docs/adr/0030, 0031)")
    client = Keypair()
    chain.token_account(client.pubkey(), mint, amount=CLIENT_FUNDS)
    funds = usdc(CLIENT_FUNDS)
    if plans_in.token_2022:
        chain.token_account(client.pubkey(), plans_in.mint, CLIENT_FUNDS, program_id=program)
        funds += f" and {plans_in.amount(CLIENT_FUNDS)}"
    say(f"client {client.pubkey()}: {funds} and no SOL")
    say(f"facilitator: {sol(chain_balance(chain, facilitator.pubkey()))} (it pays the fees)")
    return World(
        mint, provider, pay_to, plan, metered_plan, facilitator, server_authority, client, plans_in
    )


def chain_balance(chain: Chain, address: Pubkey) -> int:
    return int(chain.rpc("getBalance", str(address), {"commitment": "confirmed"})["value"])


def token_balance(
    chain: Chain, owner: Pubkey, mint: Pubkey, program: Pubkey = TOKEN_PROGRAM_ID
) -> int:
    return int(chain.token_state(get_associated_token_address(owner, mint, program))["amount"])
