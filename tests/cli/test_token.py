"""`svcpay token create-mint|mint|account|balance`: a test token from an empty wallet, on the
session's validator; every step can be run again."""

from __future__ import annotations

from pathlib import Path

from solders.keypair import Keypair
from solders.pubkey import Pubkey
from spl.token.instructions import get_associated_token_address

from svcpay.localnet.accounts import LOCAL_USDC_AUTHORITY
from svcpay.protocol.stablecoins import mint_of
from tests.cli.conftest import Cli, keyfile
from tests.support.chain import Chain


def test_from_an_empty_wallet_to_a_balance(cli: Cli, chain: Chain, tmp_path: Path) -> None:
    me = keyfile(tmp_path, chain.funded_keypair())
    friend = Keypair().pubkey()

    made = cli.ok("token", "create-mint", "--decimals", "2", "-k", me)
    mint = made["mint"]
    assert made["decimals"] == 2
    assert chain.account(Pubkey.from_string(mint)) is not None

    before = cli.ok("token", "balance", mint, "-k", me)
    assert (before["exists"], before["amount"]) == (False, 0)
    assert "no account yet" in cli("token", "balance", mint, "-k", me).out

    minted = cli.ok("token", "mint", mint, "12.5", "-k", me)
    assert (minted["amount"], minted["balance"]) == (1250, 1250)
    again = cli.ok("token", "mint", mint, "100u", "-k", me)  # the ATA exists: still fine
    assert again["balance"] == 1350
    assert cli("token", "balance", mint, "-k", me).out.strip() == "13.50"

    created = cli.ok("token", "account", mint, "--owner", str(friend), "-k", me)
    ata = get_associated_token_address(friend, Pubkey.from_string(mint))
    assert (created["created"], created["account"]) == (True, str(ata))
    repeated = cli.ok("token", "account", mint, "--owner", str(friend), "-k", me)
    assert (repeated["created"], repeated["account"]) == (False, created["account"])
    cli.ok("token", "mint", mint, "1", "--to", created["account"], "-k", me)
    shown = cli.ok("token", "balance", mint, "--owner", str(friend), "-k", me)
    assert (shown["amount"], shown["account"]) == (100, created["account"])


def test_wrong_accounts_are_named_in_one_line(cli: Cli, chain: Chain, tmp_path: Path) -> None:
    me = keyfile(tmp_path, chain.funded_keypair())
    stranger = keyfile(tmp_path, chain.funded_keypair())
    mint = cli.ok("token", "create-mint", "-k", me)["mint"]
    account = cli.ok("token", "account", mint, "-k", me)["account"]

    not_authority = cli("token", "mint", mint, "1", "-k", stranger)
    assert not_authority.code == 2 and "mint authority is" in not_authority.err

    swapped = cli("token", "balance", account, "-k", me)  # a token account where a mint goes
    assert swapped.code == 3 and "is a token account, not an SPL Token mint" in swapped.err

    other_mint = cli.ok("token", "create-mint", "-k", me)["mint"]
    wrong = cli("token", "mint", other_mint, "1", "--to", account, "-k", me)
    assert wrong.code == 2 and f"holds mint {mint}, not {other_mint}" in wrong.err

    nothing = cli("token", "mint", str(Keypair().pubkey()), "1", "-k", me)
    assert nothing.code == 3 and "not found" in nothing.err

    too_precise = cli("token", "mint", mint, "0.0000001", "-k", me)
    assert too_precise.code == 2 and "6 decimals" in too_precise.err


def test_a_stablecoin_by_symbol_on_the_nodes_cluster(
    cli: Cli, chain: Chain, tmp_path: Path
) -> None:
    """`usdc` is the USDC of the cluster the node is on: a local validator holds mainnet's,
    minted by the local authority anyone can derive (svcpay.localnet.accounts)."""
    usdc = mint_of("USDC", "solana-mainnet")
    authority = keyfile(tmp_path, LOCAL_USDC_AUTHORITY, "usdc-authority.json")
    chain.fund(LOCAL_USDC_AUTHORITY, 10**9)  # it pays for the accounts it creates
    wallet = Keypair().pubkey()
    minted = cli.ok("token", "mint", "usdc", "2.5", "--to", str(wallet), "-k", authority)
    assert (minted["mint"], minted["balance"]) == (usdc, 2_500_000)
    shown = cli.ok("token", "balance", "USDC", "--owner", str(wallet), "-k", authority)
    assert (shown["mint"], shown["amount"]) == (usdc, 2_500_000)
    made = cli.ok("token", "account", "Usdc", "--owner", str(Keypair().pubkey()), "-k", authority)
    assert made["mint"] == usdc and made["created"] is True
    unknown = cli("token", "balance", "DOGE", "-k", authority)
    assert unknown.code == 2 and "USDC, USDT, PYUSD, USDG" in unknown.err
