"""`svcpay keys`: Solana CLI keypair files, never overwritten without --force."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from solders.pubkey import Pubkey

from svcpay.keys import load_keypair
from tests.cli.conftest import Cli
from tests.support.chain import Chain


def test_create_then_show_round_trips_the_key(offline_cli: Cli, tmp_path: Path) -> None:
    path = tmp_path / "nested" / "id.json"

    created = offline_cli.ok("keys", "create", "--outfile", str(path))

    raw = json.loads(path.read_text())
    assert isinstance(raw, list) and len(raw) == 64  # the Solana CLI format
    assert path.stat().st_mode & 0o777 == 0o600
    assert created == {"pubkey": str(load_keypair(path).pubkey()), "path": str(path)}
    assert offline_cli.ok("keys", "show", str(path))["pubkey"] == created["pubkey"]
    human = offline_cli("keys", "show", str(path))
    assert (human.code, human.out.strip()) == (0, created["pubkey"])
    assert "[" not in created_text(offline_cli, path)  # the secret is never printed


def test_create_refuses_to_overwrite_without_force(offline_cli: Cli, tmp_path: Path) -> None:
    path = tmp_path / "id.json"
    first = offline_cli.ok("keys", "create", "-o", str(path))
    before = path.read_text()

    refused = offline_cli("keys", "create", "-o", str(path))

    assert refused.code == 1
    assert "already exists" in refused.err and "--force" in refused.err
    assert path.read_text() == before
    replaced = offline_cli.ok("keys", "create", "-o", str(path), "--force")
    assert replaced["pubkey"] != first["pubkey"]
    assert str(load_keypair(path).pubkey()) == replaced["pubkey"]


def created_text(cli: Cli, path: Path) -> str:
    other = path.with_name("other.json")
    result = cli("keys", "create", "-o", str(other))
    return result.out + result.err


def test_the_keypair_option_and_environment_are_the_defaults(
    offline_cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "from-option.json"
    created = offline_cli.ok("keys", "create", "--keypair", str(path))
    assert created["path"] == str(path)
    assert offline_cli.ok("--keypair", str(path), "keys", "show")["pubkey"] == created["pubkey"]
    monkeypatch.setenv("SVCPAY_KEYPAIR", str(path))
    assert offline_cli.ok("keys", "show")["pubkey"] == created["pubkey"]


def test_show_reports_missing_and_malformed_files(offline_cli: Cli, tmp_path: Path) -> None:
    missing = offline_cli("keys", "show", str(tmp_path / "absent.json"))
    assert missing.code == 2
    assert "not found" in missing.err and "svcpay keys create" in missing.err

    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2, 3]")
    malformed = offline_cli("keys", "show", str(bad))
    assert malformed.code == 2 and "64 bytes" in malformed.err


def test_airdrop_funds_the_keypair_on_localnet(cli: Cli, tmp_path: Path, chain: Chain) -> None:
    path = str(tmp_path / "id.json")
    pubkey = cli.ok("keys", "create", "-o", path)["pubkey"]

    dropped = cli.ok("keys", "airdrop", "2", "--keypair", path)

    assert dropped == {"pubkey": pubkey, "lamports": 2 * 10**9, "balance": 2 * 10**9}
    assert chain.balance(Pubkey.from_string(pubkey)) == 2 * 10**9
    assert cli("keys", "airdrop", "lots", "--keypair", path).code == 2
