"""Frozen token accounts, as a stablecoin issuer freezes a blacklisted one (issue 38): the
command line reads the account before sending and names it, instead of the program's
TokenAccountMismatch or the token program's `custom program error: 0x11` (AccountFrozen).
Subscribing, opening or topping up a session from a frozen account, minting into one, and
minting where a Token-2022 mint's new accounts start frozen."""

from __future__ import annotations

from pathlib import Path

from solders.pubkey import Pubkey
from spl.token.instructions import (
    freeze_account,
    get_associated_token_address,
    thaw_account,
)
from spl.token.models import FreezeAccountParams, ThawAccountParams

from svcpay.protocol.programs import TOKEN_2022_PROGRAM, TOKEN_PROGRAM
from tests.cli.conftest import Cli, keyfile
from tests.support.billing import USDC, Billing, Plan
from tests.support.chain import Chain
from tests.support.token2022 import t22_mint


def freeze(chain: Chain, mint: Pubkey, account: Pubkey, program: Pubkey = TOKEN_PROGRAM) -> None:
    """The mint's freeze authority (the chain's payer) freezes `account`."""
    params = FreezeAccountParams(
        program_id=program, account=account, mint=mint, authority=chain.payer.pubkey()
    )
    chain.send_ok([freeze_account(params)], [chain.payer])


def thaw(chain: Chain, mint: Pubkey, account: Pubkey, program: Pubkey = TOKEN_PROGRAM) -> None:
    params = ThawAccountParams(
        program_id=program, account=account, mint=mint, authority=chain.payer.pubkey()
    )
    chain.send_ok([thaw_account(params)], [chain.payer])


def frozen(account: Pubkey, can: str, authority: Pubkey) -> str:
    return (
        f"{account} is frozen (by the mint's freeze authority {authority}); it cannot {can} "
        "until thawed"
    )


def test_a_frozen_account_is_named_before_anything_is_sent(
    cli: Cli, chain: Chain, billing: Billing, tmp_path: Path
) -> None:
    authority = chain.payer.pubkey()
    mint = chain.create_mint(freeze_authority=authority)
    plan: Plan = billing.plan(amount=USDC, mint=mint)
    subscriber = billing.subscriber(plan, 10 * USDC)
    key = keyfile(tmp_path, subscriber.keypair)
    freeze(chain, mint, subscriber.token_account)

    subscribed = cli("subscribe", str(plan.address), "--keypair", key)
    assert subscribed.code == 1, subscribed.err
    assert subscribed.err == (
        f"svcpay: the paying token account {frozen(subscriber.token_account, 'pay', authority)}\n"
    )
    opened = cli("session", "open", "--mint", str(mint), "--pay-to", str(plan.destination),
                 "--deposit", "1", "--keypair", key)  # fmt: skip
    assert opened.code == 1 and frozen(subscriber.token_account, "pay", authority) in opened.err

    minter = keyfile(tmp_path, chain.payer, "mint-authority.json")
    minted = cli("token", "mint", str(mint), "1", "--to", str(subscriber.pubkey), "-k", minter)
    assert minted.code == 1
    assert minted.err == (
        f"svcpay: the token account {frozen(subscriber.token_account, 'receive', authority)}\n"
    )
    assert chain.token_state(subscriber.token_account)["amount"] == 10 * USDC  # nothing sent

    thaw(chain, mint, subscriber.token_account)
    session = cli.ok("session", "open", "--mint", str(mint), "--pay-to", str(plan.destination),
                     "--deposit", "1", "--keypair", key)["session"]  # fmt: skip
    freeze(chain, mint, subscriber.token_account)
    topped = cli("session", "top-up", session, "1", "--keypair", key)
    assert topped.code == 1 and frozen(subscriber.token_account, "pay", authority) in topped.err
    thaw(chain, mint, subscriber.token_account)
    assert cli.ok("subscribe", str(plan.address), "--keypair", key)["status"] == "Active"


def test_minting_where_new_accounts_start_frozen_says_so(
    cli: Cli, chain: Chain, tmp_path: Path
) -> None:
    authority = chain.payer.pubkey()
    mint = t22_mint(chain, 6, default_frozen=True, freeze_authority=authority)
    wallet = chain.funded_keypair().pubkey()
    minter = keyfile(tmp_path, chain.payer, "mint-authority.json")
    ata = get_associated_token_address(wallet, mint, TOKEN_2022_PROGRAM)

    fresh = cli("token", "mint", str(mint), "1", "--to", str(wallet), "-k", minter)
    assert fresh.code == 1 and "0x11" not in fresh.err
    assert f"new token accounts of {mint} start frozen (its default account state)" in fresh.err
    assert f"{ata} would be created frozen" in fresh.err and str(authority) in fresh.err
    assert chain.account(ata) is None  # nothing sent

    created = cli.ok("token", "account", str(mint), "--owner", str(wallet), "-k", minter)
    assert created["account"] == str(ata)
    still = cli("token", "mint", str(mint), "1", "--to", str(wallet), "-k", minter)
    assert still.code == 1 and frozen(ata, "receive", authority) in still.err
    thaw(chain, mint, ata, TOKEN_2022_PROGRAM)
    assert (
        cli.ok("token", "mint", str(mint), "1", "--to", str(wallet), "-k", minter)["balance"]
        == 1_000_000
    )
