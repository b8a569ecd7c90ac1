"""`svcpay plan create|show|list|deprecate` against the local validator."""

from __future__ import annotations

from pathlib import Path

from svcpay.localnet.accounts import USDC_MAINNET_MINT
from svcpay.program import pda
from svcpay.program.generated.accounts.plan import Plan
from svcpay.program.generated.types.plan_status import Deprecated
from svcpay.protocol.programs import TOKEN_PROGRAM
from svcpay.protocol.stablecoins import mint_of
from tests.cli.conftest import Cli, keyfile
from tests.support.billing import DAY, USDC
from tests.support.chain import Chain


def test_create_show_list_and_deprecate(cli: Cli, chain: Chain, tmp_path: Path) -> None:
    provider, facilitator = chain.funded_keypair(), chain.funded_keypair()
    key = keyfile(tmp_path, provider)
    mint = chain.create_mint(decimals=6)
    destination = chain.token_account(provider.pubkey(), mint)
    create = ["plan", "create", "--mint", str(mint), "--destination", str(destination)]

    created = cli.ok(*create, "--plan-id", "7", "--amount", "9.99", "--period", "30d",
                     "--grace", "3d", "--keypair", key)  # fmt: skip

    address = pda.plan_address(provider.pubkey(), 7)
    account = chain.account(address)
    assert account is not None
    plan = Plan.decode(account.data)
    assert (plan.amount, plan.period_secs, plan.grace_secs) == (9_990_000, 30 * DAY, 3 * DAY)
    assert plan.billing_authority == provider.pubkey() == plan.authority
    assert created["plan"] == str(address) and created["planId"] == 7
    assert (created["amount"], created["amountDecimal"]) == (9_990_000, "9.99")
    assert (created["status"], created["periodSecs"]) == ("Active", 30 * DAY)
    # create also says which token program the mint is on, and what its extensions mean
    assert (created.pop("tokenProgram"), created.pop("warnings")) == (str(TOKEN_PROGRAM), [])

    assert cli.ok("plan", "show", str(address)) == created
    by_number = cli.ok("plan", "show", "7", "--authority", str(provider.pubkey()))
    assert by_number == created
    assert cli.ok("plan", "show", "7", "--keypair", key) == created
    human = cli("plan", "show", str(address))
    assert human.code == 0 and "9.99 every 30d (9990000 base units)" in human.out

    second = cli.ok(*create, "--plan-id", "8", "--amount", "2500000u", "--period", "1h",
                    "--billing-authority", str(facilitator.pubkey()), "--keypair", key)  # fmt: skip
    assert (second["amount"], second["periodSecs"]) == (2_500_000, 3600)
    assert second["billingAuthority"] == str(facilitator.pubkey())
    listed = cli.ok("plan", "list", "--authority", str(provider.pubkey()))["plans"]
    assert [p["planId"] for p in listed] == [7, 8]
    assert listed[0] == created
    everyone = cli.ok("plan", "list")["plans"]
    assert {p["plan"] for p in listed} <= {p["plan"] for p in everyone}
    assert str(address) in cli("plan", "list", "--authority", str(provider.pubkey())).out

    deprecated = cli.ok("plan", "deprecate", str(address), "--keypair", key)

    assert deprecated["status"] == "Deprecated" and deprecated["signature"]
    account = chain.account(address)
    assert account is not None and isinstance(Plan.decode(account.data).status, Deprecated)
    assert cli.ok("plan", "show", str(address))["status"] == "Deprecated"

    subscriber = chain.funded_keypair()
    chain.token_account(subscriber.pubkey(), mint, 20 * USDC)
    refused = cli("subscribe", str(address), "--keypair", keyfile(tmp_path, subscriber))
    assert refused.code == 1
    assert refused.err.startswith("svcpay: PlanDeprecated: ")
    assert "current plan" in refused.err


def test_create_refuses_an_existing_plan_id_and_a_foreign_deprecation(
    cli: Cli, chain: Chain, tmp_path: Path
) -> None:
    provider, other = chain.funded_keypair(), chain.funded_keypair()
    key = keyfile(tmp_path, provider)
    mint = chain.create_mint(decimals=2)
    destination = chain.token_account(provider.pubkey(), mint)
    create = ["plan", "create", "--plan-id", "1", "--mint", str(mint),
              "--destination", str(destination), "--period", "1d", "--keypair", key]  # fmt: skip

    assert cli.ok(*create, "--amount", "5")["amount"] == 500  # 2 decimals

    again = cli(*create, "--amount", "5")
    assert again.code == 1 and "already exists" in again.err and "--plan-id" in again.err
    too_precise = cli(*create, "--amount", "5.001")
    assert too_precise.code == 2 and "2 decimals" in too_precise.err
    address = str(pda.plan_address(provider.pubkey(), 1))
    foreign = cli("plan", "deprecate", address, "--keypair", keyfile(tmp_path, other))
    assert foreign.code == 1 and "belongs to" in foreign.err


def test_create_checks_the_mint_and_destination_exist(
    cli: Cli, chain: Chain, tmp_path: Path
) -> None:
    provider = chain.funded_keypair()
    key = keyfile(tmp_path, provider)
    mint = chain.create_mint()
    destination = chain.token_account(provider.pubkey(), mint)
    nobody = str(chain.funded_keypair().pubkey())  # a wallet, not a token account
    base = ["plan", "create", "--plan-id", "1", "--amount", "1", "--period", "1d",
            "--keypair", key]  # fmt: skip

    no_mint = cli(*base, "--mint", nobody, "--destination", str(destination))
    assert no_mint.code == 3 and "not an SPL Token mint" in no_mint.err
    no_destination = cli(*base, "--mint", str(mint), "--destination", nobody)
    assert no_destination.code == 3 and "destination token account" in no_destination.err


def test_create_takes_a_stablecoins_symbol_for_the_clusters_mint(
    cli: Cli, chain: Chain, tmp_path: Path
) -> None:
    """`--mint usdc` is the USDC of the RPC node's cluster: mainnet's address on a local
    validator (the session's holds a USDC mint there), devnet's on devnet; a symbol svcpay
    does not know is a usage error that lists the ones it does."""
    provider = chain.funded_keypair()
    key = keyfile(tmp_path, provider)
    destination = chain.token_account(provider.pubkey(), USDC_MAINNET_MINT)
    create = ["plan", "create", "--destination", str(destination), "--amount", "1",
              "--period", "30d", "--plan-id", "4", "-k", key]  # fmt: skip

    made = cli.ok(*create, "--mint", "usdc")

    assert made["mint"] == str(USDC_MAINNET_MINT) == mint_of("USDC", "solana-localnet")
    assert mint_of("USDC", "solana-devnet") == "4zMMC9srt5Ri5X14GAgXhaHii3GnPAEERYPJgZJDncDU"
    assert mint_of("usdt", "solana-devnet") is None  # its issuer has no devnet mint
    unknown = cli(*create, "--mint", "USDX")
    assert unknown.code == 2 and "nor one of USDC, USDT, PYUSD, USDG: 'USDX'" in unknown.err
