"""SPL Token and Token-2022 accounts as agave 4.2's `jsonParsed` shows them
(solana-account-decoder's parse_token): token accounts, mints and multisigs, with their
Token-2022 extensions (token_extensions.py) and UI amounts as agave computes them: the plain
`real_number_string_trimmed`, or scaled by the mint's InterestBearingConfig or
ScaledUiAmountConfig at the cluster's unix time.

Parsed where agave parses (spl-token-2022's `StateWithExtensions::unpack`: an initialized base
state, zero padding and the right account type byte before any extensions) and with its field
names; what agave cannot parse, the caller answers as base64, as agave does.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import base58

from svcpay.localnet import token_extensions as ext
from svcpay.localnet.parsed import TOKEN, TOKEN_2022, is_token_account, ui_token_amount

NATIVE_MINT = "So11111111111111111111111111111111111111112"  # 9 decimals, even where absent
PROGRAM_NAMES = {TOKEN: "spl-token", TOKEN_2022: "spl-token-2022"}
ACCOUNT_LEN, MINT_LEN, MULTISIG_LEN = 165, 82, 355
_STATES = {1: "initialized", 2: "frozen"}
_SECONDS_PER_YEAR = 60.0 * 60.0 * 24.0 * 365.24
_I64 = range(-(2**63), 2**63)


@dataclass(frozen=True)
class MintInfo:
    """What agave reads of a token account's mint to show its amounts (its
    SplTokenAdditionalDataV2): the decimals, and the UI-amount configs with the clock's time."""

    decimals: int
    interest: bytes | None = None  # an InterestBearingConfig's 52 bytes
    scaled: bytes | None = None  # a ScaledUiAmountConfig's 56 bytes
    unix_timestamp: int = 0


MintOf = Callable[[bytes], MintInfo | None]  # a mint's address -> its info (None: unknown)


def _b58(raw: bytes) -> str:
    return base58.b58encode(raw).decode()


def _coption(data: bytes, at: int) -> tuple[bool, str | None]:
    """(valid, key) of a COption<Pubkey>: its tag is 0 or 1, anything else fails unpacking."""
    tag = data[at : at + 4]
    if tag not in (b"\0\0\0\0", b"\1\0\0\0"):
        return False, None
    return True, (_b58(data[at + 4 : at + 36]) if tag[0] == 1 else None)


def _tlv(data: bytes, base_len: int, account_type: int) -> bytes | None:
    """The TLV data after a base state of `base_len` bytes (b"" without any), or None where
    `unpack_tlv_data` fails: padding not zero, a short rest, the other account type."""
    rest = data[base_len:]
    if not rest:
        return b""
    type_at = ACCOUNT_LEN - base_len
    if len(rest) < type_at + 1 or any(rest[:type_at]) or rest[type_at] != account_type:
        return None
    return rest[type_at + 1 :]


def mint_info(data: bytes, unix_timestamp: int) -> MintInfo | None:
    """A mint's MintInfo as agave's `get_additional_mint_data` reads it (whoever owns it), or
    None where `StateWithExtensions::<Mint>::unpack` fails."""
    unpacked = _unpack_mint(data)
    if unpacked is None:
        return None
    _, tlv = unpacked
    return MintInfo(
        decimals=data[44],
        interest=ext.extension_value(tlv, ext.INTEREST_BEARING, ext.ACCOUNT_TYPE_MINT),
        scaled=ext.extension_value(tlv, ext.SCALED_UI_AMOUNT, ext.ACCOUNT_TYPE_MINT),
        unix_timestamp=unix_timestamp,
    )


# -- UI amounts (token_amount_to_ui_amount_v3) ---------------------------------------------
def _pow10(exp: int) -> float:
    """num_traits::pow(10_f64, exp): squaring and multiplying, as agave rounds it."""
    base, acc = 10.0, 1.0
    while exp:
        if exp & 1:
            acc *= base
        exp >>= 1
        if exp:
            base *= base
    return acc


def _exp(x: float) -> float:
    try:
        return math.exp(x)
    except OverflowError:
        return math.inf


def _fixed(x: float, decimals: int) -> str:
    """format!("{x:.decimals$}") then trim_ui_amount_string."""
    text = "NaN" if math.isnan(x) else f"{x:.{decimals}f}"
    return text.rstrip("0").rstrip(".") if decimals > 0 else text


def _interest_ui(cfg: bytes, amount: int, decimals: int, now: int) -> str | None:
    init, last = ext.i64_at(cfg, 32), ext.i64_at(cfg, 42)
    pre_rate, rate = ext.i16_at(cfg, 40), ext.i16_at(cfg, 50)
    pre_span, post_span = last - init, now - last
    if pre_span not in _I64 or post_span not in _I64:
        return None  # checked_sub overflows: no UI amount
    pre = _exp(float(pre_rate * pre_span) / _SECONDS_PER_YEAR / 10_000.0)
    post = _exp(float(rate * post_span) / _SECONDS_PER_YEAR / 10_000.0)
    return _fixed(float(amount) * (pre * post / _pow10(decimals)), decimals)


def _scaled_ui(cfg: bytes, amount: int, decimals: int, now: int) -> str:
    multiplier = ext.f64_at(cfg, 48) if now >= ext.i64_at(cfg, 40) else ext.f64_at(cfg, 32)
    scaled = float(amount) * multiplier
    truncated = float(math.trunc(scaled)) if math.isfinite(scaled) else scaled
    return _fixed(truncated / _pow10(decimals), decimals)


def ui_amount(amount: int, mint: MintInfo) -> dict[str, Any]:
    """A UiTokenAmount as agave shows an account's (or a supply's) amount of `mint`."""
    if mint.interest is None and mint.scaled is None:
        return ui_token_amount(amount, mint.decimals)
    if mint.interest is not None:
        text = _interest_ui(mint.interest, amount, mint.decimals, mint.unix_timestamp)
    else:
        assert mint.scaled is not None
        text = _scaled_ui(mint.scaled, amount, mint.decimals, mint.unix_timestamp)
    value = float(text) if text is not None else None
    return {
        "uiAmount": value if value is not None and math.isfinite(value) else None,
        "decimals": mint.decimals,
        "amount": str(amount),
        "uiAmountString": text or "",
    }


# -- accounts, mints, multisigs ------------------------------------------------------------
def _unpack_account(data: bytes) -> tuple[dict[str, Any], bytes] | None:
    """The base fields and TLV data of an initialized token account, or None."""
    if len(data) < ACCOUNT_LEN or len(data) == MULTISIG_LEN or data[108] not in _STATES:
        return None
    delegate, close = _coption(data, 72), _coption(data, 129)
    native = data[109:113]
    if not (delegate[0] and close[0]) or native not in (b"\0\0\0\0", b"\1\0\0\0"):
        return None
    tlv = _tlv(data, ACCOUNT_LEN, ext.ACCOUNT_TYPE_ACCOUNT)
    if tlv is None:
        return None
    fields = {"delegate": delegate[1], "close": close[1], "native": native[0] == 1}
    return fields, tlv


def _token_account(data: bytes, mint_of: MintOf) -> dict[str, Any] | None:
    unpacked = _unpack_account(data)
    if unpacked is None:
        return None
    fields, tlv = unpacked
    mint = mint_of(data[:32])
    if mint is None:  # agave needs the mint's data too
        return None
    info: dict[str, Any] = {
        "mint": _b58(data[:32]),
        "owner": _b58(data[32:64]),
        "tokenAmount": ui_amount(struct.unpack_from("<Q", data, 64)[0], mint),
    }
    if fields["delegate"] is not None:
        info["delegate"] = fields["delegate"]
    info["state"] = _STATES[data[108]]
    info["isNative"] = fields["native"]
    if fields["native"]:
        info["rentExemptReserve"] = ui_amount(struct.unpack_from("<Q", data, 113)[0], mint)
    if fields["delegate"] is not None:
        info["delegatedAmount"] = ui_amount(struct.unpack_from("<Q", data, 121)[0], mint)
    if fields["close"] is not None:
        info["closeAuthority"] = fields["close"]
    if extensions := ext.ui_extensions(tlv, ext.ACCOUNT_TYPE_ACCOUNT):
        info["extensions"] = extensions
    return {"type": "account", "info": info}


def _unpack_mint(data: bytes) -> tuple[dict[str, Any], bytes] | None:
    """The base fields and TLV data of an initialized mint, or None."""
    if len(data) < MINT_LEN or len(data) == MULTISIG_LEN or data[45] != 1:
        return None
    authority, freeze = _coption(data, 0), _coption(data, 46)
    tlv = _tlv(data, MINT_LEN, ext.ACCOUNT_TYPE_MINT)
    if not (authority[0] and freeze[0]) or tlv is None:
        return None
    return {"mintAuthority": authority[1], "freezeAuthority": freeze[1]}, tlv


def _mint(data: bytes) -> dict[str, Any] | None:
    unpacked = _unpack_mint(data)
    if unpacked is None:
        return None
    keys, tlv = unpacked
    info: dict[str, Any] = {
        "mintAuthority": keys["mintAuthority"],
        "supply": str(struct.unpack_from("<Q", data, 36)[0]),
        "decimals": data[44],
        "isInitialized": True,
        "freezeAuthority": keys["freezeAuthority"],
    }
    if extensions := ext.ui_extensions(tlv, ext.ACCOUNT_TYPE_MINT):
        info["extensions"] = extensions
    return {"type": "mint", "info": info}


def _multisig(data: bytes) -> dict[str, Any] | None:
    if len(data) != MULTISIG_LEN or data[2] != 1:  # agave unpacks initialized ones only
        return None
    signers = [data[3 + 32 * i : 35 + 32 * i] for i in range(11)]
    return {
        "type": "multisig",
        "info": {
            "numRequiredSigners": data[0],
            "numValidSigners": data[1],
            "isInitialized": True,
            "signers": [_b58(s) for s in signers if any(s)],
        },
    }


def parse_token(owner: str, data: bytes, mint_of: MintOf) -> dict[str, Any] | None:
    """`{"program", "parsed", "space"}` as jsonParsed shows a token program's account, or
    None (answer base64): not a token program's, not parsable, or a token account whose
    mint is unknown (agave needs its decimals too)."""
    program = PROGRAM_NAMES.get(owner)
    if program is None:
        return None
    parsed = _token_account(data, mint_of) or _mint(data) or _multisig(data)
    if parsed is None:
        return None
    return {"program": program, "parsed": parsed, "space": len(data)}


def unpacks_as_account(data: bytes) -> bool:
    """Whether `StateWithExtensions::<Account>::unpack` reads `data` (getTokenAccountBalance's
    test; the lists' filters test less, as token_account_fields does)."""
    return _unpack_account(data) is not None


def token_account_fields(owner: str, data: bytes) -> tuple[bytes, bytes, int] | None:
    """(mint, owner, amount) of an initialized token account of either token program."""
    if not is_token_account(owner, data):
        return None
    return data[:32], data[32:64], struct.unpack_from("<Q", data, 64)[0]
