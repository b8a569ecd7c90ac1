"""Exact amounts and Solana CLI keypair files."""

from __future__ import annotations

import json
import os
from decimal import Decimal
from pathlib import Path

import pytest
from solders.keypair import Keypair

from svcpay.amounts import format_amount, from_base_units, to_base_units
from svcpay.keys import KeypairFileError, describe, load_keypair, save_keypair


@pytest.mark.parametrize(
    ("human", "units"),
    [
        ("0.50", 500_000),
        ("1", 1_000_000),
        ("0.000001", 1),
        (" 20 ", 20_000_000),
        (Decimal("12.3"), 12_300_000),
        (3, 3_000_000),
    ],
)
def test_human_amounts_convert_exactly(human: str | int | Decimal, units: int) -> None:
    assert to_base_units(human) == units


@pytest.mark.parametrize(
    "bad", ["0.0000001", "-1", "abc", "", "NaN", "Infinity", "18446744073709.551616"]
)
def test_bad_amounts_are_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        to_base_units(bad)


def test_floats_are_refused_because_they_are_inexact() -> None:
    with pytest.raises(TypeError, match="floats are inexact"):
        to_base_units(0.1)  # type: ignore[arg-type]


def test_formatting() -> None:
    assert from_base_units(500_000) == Decimal("0.5")
    assert format_amount(500_000) == "0.50 USDC"
    assert format_amount(1_234_567) == "1.234567 USDC"
    assert format_amount(12, decimals=0, symbol="X") == "12.00 X"


def test_keypairs_round_trip_in_the_solana_cli_format(tmp_path: Path) -> None:
    kp = Keypair()
    path = save_keypair(kp, tmp_path / "id.json")
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert json.loads(path.read_text()) == list(bytes(kp))
    assert load_keypair(path).pubkey() == kp.pubkey()
    with pytest.raises(KeypairFileError, match="refusing to overwrite"):
        save_keypair(Keypair(), path)


def test_bad_keypair_files_name_the_problem_not_the_secret(tmp_path: Path) -> None:
    with pytest.raises(KeypairFileError, match="no such keypair file"):
        load_keypair(tmp_path / "missing.json")
    (tmp_path / "short.json").write_text("[1, 2, 3]")
    with pytest.raises(KeypairFileError, match="64 bytes"):
        load_keypair(tmp_path / "short.json")
    (tmp_path / "junk.json").write_text("{not json")
    with pytest.raises(KeypairFileError, match="not a JSON keypair"):
        load_keypair(tmp_path / "junk.json")
    kp = Keypair()
    assert describe(kp) == f"keypair {kp.pubkey()}"
    assert str(list(bytes(kp))[:8])[1:-1] not in describe(kp)
