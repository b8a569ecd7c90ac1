"""SPL Token and Token-2022 accounts as agave 4.2's `jsonParsed` shows them
(solana-account-decoder's parse_token): token accounts, mints and multisigs, with the amount
strings of `real_number_string_trimmed` (parsed.ui_token_amount).

Parsed where agave parses and with its field names; what this module cannot show as agave
would (a Token-2022 extension other than ImmutableOwner) is left unparsed, and the caller
answers base64 as agave does for any account it cannot parse.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

import base58

from svcpay.localnet.parsed import TOKEN, TOKEN_2022, is_token_account, ui_token_amount

NATIVE_MINT = "So11111111111111111111111111111111111111112"  # 9 decimals, even where absent
PROGRAM_NAMES = {TOKEN: "spl-token", TOKEN_2022: "spl-token-2022"}
ACCOUNT_LEN, MINT_LEN, MULTISIG_LEN = 165, 82, 355
_ACCOUNT_TYPE_MINT, _ACCOUNT_TYPE_ACCOUNT = 1, 2
_STATES = {0: "uninitialized", 1: "initialized", 2: "frozen"}
_EXTENSIONS = {7: "immutableOwner"}  # type id -> agave's name, for state-less extensions

Decimals = Callable[[bytes], int | None]  # a mint's address -> its decimals (None: unknown)


def _b58(raw: bytes) -> str:
    return base58.b58encode(raw).decode()


def _option_key(data: bytes, at: int) -> str | None:
    tag = struct.unpack_from("<I", data, at)[0]
    return _b58(data[at + 4 : at + 36]) if tag == 1 else None


def _extensions(data: bytes, account_type: int) -> list[dict[str, Any]] | None:
    """The TLV extensions after the padded base state, or None when one is not shown here
    (or the data is not this account type)."""
    if len(data) == ACCOUNT_LEN or len(data) < ACCOUNT_LEN + 1 or data[ACCOUNT_LEN] != account_type:
        return [] if len(data) in (ACCOUNT_LEN, MINT_LEN) else None
    out: list[dict[str, Any]] = []
    at = ACCOUNT_LEN + 1
    while at + 4 <= len(data):
        kind, length = struct.unpack_from("<HH", data, at)
        if kind == 0:  # uninitialized space: the list ends
            break
        if kind not in _EXTENSIONS or at + 4 + length > len(data):
            return None
        out.append({"extension": _EXTENSIONS[kind]})
        at += 4 + length
    return out


def _token_account(data: bytes, decimals: Decimals) -> dict[str, Any] | None:
    if len(data) < ACCOUNT_LEN or (
        len(data) > ACCOUNT_LEN and data[ACCOUNT_LEN] != _ACCOUNT_TYPE_ACCOUNT
    ):
        return None
    if len(data) == MULTISIG_LEN or data[108] not in (1, 2):  # uninitialized: not an account
        return None
    extensions = _extensions(data, _ACCOUNT_TYPE_ACCOUNT)
    places = decimals(data[:32])
    if extensions is None or places is None:
        return None
    amount, native_tag = struct.unpack_from("<QI", data, 64)[0], data[109]
    info: dict[str, Any] = {
        "mint": _b58(data[:32]),
        "owner": _b58(data[32:64]),
        "tokenAmount": ui_token_amount(amount, places),
    }
    delegate = _option_key(data, 72)
    if delegate is not None:
        info["delegate"] = delegate
    info["state"] = _STATES[data[108]]
    info["isNative"] = native_tag == 1
    if native_tag == 1:
        info["rentExemptReserve"] = ui_token_amount(struct.unpack_from("<Q", data, 113)[0], places)
    if delegate is not None:
        info["delegatedAmount"] = ui_token_amount(struct.unpack_from("<Q", data, 121)[0], places)
    close = _option_key(data, 129)
    if close is not None:
        info["closeAuthority"] = close
    if extensions:
        info["extensions"] = extensions
    return {"type": "account", "info": info}


def _mint(data: bytes) -> dict[str, Any] | None:
    if len(data) != MINT_LEN and (
        len(data) <= ACCOUNT_LEN or data[ACCOUNT_LEN] != _ACCOUNT_TYPE_MINT
    ):
        return None
    if len(data) > MINT_LEN and any(data[MINT_LEN:ACCOUNT_LEN]):  # the padding is zeros
        return None
    if data[45] != 1:
        return None
    extensions = _extensions(data, _ACCOUNT_TYPE_MINT)
    if extensions is None:
        return None
    info: dict[str, Any] = {
        "mintAuthority": _option_key(data, 0),
        "supply": str(struct.unpack_from("<Q", data, 36)[0]),
        "decimals": data[44],
        "isInitialized": True,
        "freezeAuthority": _option_key(data, 46),
    }
    if extensions:
        info["extensions"] = extensions
    return {"type": "mint", "info": info}


def _multisig(data: bytes) -> dict[str, Any] | None:
    if len(data) != MULTISIG_LEN:
        return None
    signers = [data[3 + 32 * i : 35 + 32 * i] for i in range(11)]
    return {
        "type": "multisig",
        "info": {
            "numRequiredSigners": data[0],
            "numValidSigners": data[1],
            "isInitialized": data[2] == 1,
            "signers": [_b58(s) for s in signers if any(s)],
        },
    }


def parse_token(owner: str, data: bytes, decimals: Decimals) -> dict[str, Any] | None:
    """`{"program", "parsed", "space"}` as jsonParsed shows a token program's account, or
    None (answer base64): not a token program's, not parsable, or a token account whose
    mint's decimals are unknown (agave needs them too)."""
    program = PROGRAM_NAMES.get(owner)
    if program is None:
        return None
    parsed = _token_account(data, decimals) or _mint(data) or _multisig(data)
    if parsed is None:
        return None
    return {"program": program, "parsed": parsed, "space": len(data)}


def token_account_fields(owner: str, data: bytes) -> tuple[bytes, bytes, int] | None:
    """(mint, owner, amount) of an initialized token account of either token program."""
    if not is_token_account(owner, data):
        return None
    return data[:32], data[32:64], struct.unpack_from("<Q", data, 64)[0]
