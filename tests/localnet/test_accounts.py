"""Accounts from genesis (solana-test-validator's `--account ADDRESS FILE`, which the drop-in
takes too): the session's validator holds the local USDC mint (tests/conftest.py), and the
drop-in refuses a bad account file in one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from solders.keypair import Keypair
from spl.token.instructions import get_associated_token_address

from svcpay.localnet.accounts import (
    LOCAL_USDC_AUTHORITY,
    USDC_MAINNET_MINT,
    read_account_file,
    usdc_mint_account,
    write_account_file,
)
from tests.support.chain import Chain


def test_the_validator_starts_with_the_local_usdc_mint(chain: Chain) -> None:
    mint = chain.account(USDC_MAINNET_MINT)
    assert mint is not None and len(mint.data) == 82
    assert str(mint.owner) == "TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA"
    assert mint.data[4:36] == bytes(LOCAL_USDC_AUTHORITY.pubkey())  # anyone may mint
    assert mint.data[44] == 6  # decimals
    owner = Keypair()
    account = chain.token_account(owner.pubkey(), USDC_MAINNET_MINT)
    assert account == get_associated_token_address(owner.pubkey(), USDC_MAINNET_MINT)
    chain.mint_to(USDC_MAINNET_MINT, account, 2_500_000, authority=LOCAL_USDC_AUTHORITY)
    assert chain.token_state(account)["amount"] == 2_500_000


def test_an_account_file_round_trips(tmp_path: Path) -> None:
    path = write_account_file(tmp_path / "usdc.json", usdc_mint_account())
    address, account = read_account_file(path)
    assert address == USDC_MAINNET_MINT and len(account.data) == 82
    assert json.loads(path.read_text())["account"]["space"] == 82


def drop_in(*args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "svcpay.localnet.server", "--rpc-port", "0", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60)


def test_the_drop_in_refuses_a_bad_account_file_in_one_line(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.json"
    garbage.write_text("{not json")
    good = write_account_file(tmp_path / "usdc.json", usdc_mint_account())
    cases = {
        ("--account", "-", str(tmp_path / "missing.json")): "missing.json: not an account file",
        ("--account", "-", str(garbage)): "garbage.json: not an account file",
        ("--account", "not-a-key", str(good)): "'not-a-key' is not a base58 public key",
    }
    for args, expected in cases.items():
        done = drop_in(*args)
        assert done.returncode == 2, (args, done.stderr)
        assert expected in done.stderr and "Traceback" not in done.stderr, done.stderr
