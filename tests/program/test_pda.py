"""The Python seeds and error names are the program's own, read back from the IDL."""

from __future__ import annotations

import json
from pathlib import Path

from svcpay.program import errors, pda
from svcpay.program.generated.program_id import PROGRAM_ID

ROOT = Path(__file__).resolve().parents[2]
IDL = json.loads((ROOT / "target" / "idl" / "svc_billing.json").read_text())


def idl_constant(name: str) -> bytes:
    (const,) = [c for c in IDL["constants"] if c["name"] == name]
    return bytes(json.loads(const["value"]))


def test_seeds_match_the_idl_constants() -> None:
    assert idl_constant("PLAN_SEED") == pda.PLAN_SEED
    assert idl_constant("SUBSCRIPTION_SEED") == pda.SUBSCRIPTION_SEED
    assert idl_constant("ALLOWANCE_SEED") == pda.ALLOWANCE_SEED
    assert idl_constant("DELEGATE_SEED") == pda.DELEGATE_SEED
    assert idl_constant("SESSION_SEED") == pda.SESSION_SEED
    assert idl_constant("VAULT_SEED") == pda.VAULT_SEED


def test_program_id_matches_the_idl_and_the_localnet_keypair() -> None:
    from solders.keypair import Keypair

    assert str(PROGRAM_ID) == IDL["address"]
    secret = json.loads((ROOT / "keys" / "svc_billing-localnet-keypair.json").read_text())
    assert Keypair.from_bytes(bytes(secret)).pubkey() == PROGRAM_ID


def test_every_program_error_has_an_exception_of_the_same_name_and_code() -> None:
    for entry in IDL["errors"]:
        err = errors.from_code(entry["code"])
        assert err is not None and type(err).__name__ == entry["name"], entry
        assert err.code == entry["code"]
    for name in (
        "InsufficientFunds",
        "SubscriptionNotActive",
        "AllowanceExhausted",
        "PlanDeprecated",
    ):
        assert getattr(errors, name) is errors.error_class(name)
