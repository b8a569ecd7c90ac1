"""Accounts a local validator starts with, in solana-test-validator's `--account ADDRESS FILE`
format (the JSON of `solana account --output json`), read by both validators.

`usdc_mint_account()` makes the one most wanted locally: a 6-decimal mint at mainnet USDC's
address whose mint authority is `LOCAL_USDC_AUTHORITY`, a keypair anyone can derive from a
published seed. Clients and gates that accept only the stablecoins they know (pay-kit's on
`localnet`, which uses mainnet's mints) can then be paid on a local validator, and anyone can
mint with `svcpay token mint`. Never on a cluster: the authority's secret is public.
"""

from __future__ import annotations

import base64
import hashlib
import json
import struct
from pathlib import Path
from typing import Any

from solders.account import Account
from solders.keypair import Keypair
from solders.pubkey import Pubkey

USDC_MAINNET_MINT = Pubkey.from_string("EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v")
TOKEN_PROGRAM = Pubkey.from_string("TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA")
MINT_SIZE = 82
# What the validators charge for 82 bytes (rent-exempt minimum at the default rent).
MINT_RENT_LAMPORTS = 1_461_600
LOCAL_USDC_AUTHORITY = Keypair.from_seed(hashlib.sha256(b"svcpay localnet usdc authority").digest())
_LOCAL_USDC_AUTHORITY = LOCAL_USDC_AUTHORITY.pubkey()


def mint_data(authority: Pubkey, decimals: int, supply: int = 0) -> bytes:
    """An initialized SPL Token mint (82 bytes): authority set, no freeze authority."""
    return (
        struct.pack("<I", 1)
        + bytes(authority)
        + struct.pack("<QB?", supply, decimals, True)
        + struct.pack("<I", 0)
        + bytes(32)
    )


def account_json(address: Pubkey, account: Account) -> dict[str, Any]:
    """`solana account --output json` of `account` at `address`."""
    return {
        "pubkey": str(address),
        "account": {
            "lamports": account.lamports,
            "data": [base64.b64encode(bytes(account.data)).decode(), "base64"],
            "owner": str(account.owner),
            "executable": account.executable,
            "rentEpoch": 0,
            "space": len(account.data),
        },
    }


def usdc_mint_account(authority: Pubkey = _LOCAL_USDC_AUTHORITY) -> dict[str, Any]:
    """The local USDC mint (see the module's docstring), as an `--account` file's JSON."""
    data = mint_data(authority, 6)
    return account_json(USDC_MAINNET_MINT, Account(MINT_RENT_LAMPORTS, data, TOKEN_PROGRAM))


def write_account_file(path: Path, account: dict[str, Any]) -> Path:
    path.write_text(json.dumps(account))
    return path


class AccountFileError(ValueError):
    """An `--account` file that cannot be loaded; the message says why."""


def read_account_file(path: Path) -> tuple[Pubkey, Account]:
    """The address and account of an `--account` file (`pubkey` may be absent: then the
    caller's address applies, as solana-test-validator allows)."""
    try:
        doc = json.loads(path.read_text())
        raw = doc["account"]
        data, encoding = raw["data"]
        if encoding != "base64":
            raise AccountFileError(f"{path}: data must be base64, not {encoding!r}")
        account = Account(
            int(raw["lamports"]),
            base64.b64decode(data, validate=True),
            Pubkey.from_string(raw["owner"]),
            bool(raw.get("executable", False)),
        )
        address = Pubkey.from_string(doc["pubkey"]) if doc.get("pubkey") else Pubkey.default()
    except AccountFileError:
        raise
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise AccountFileError(f"{path}: not an account file ({type(e).__name__}: {e})") from e
    return address, account
