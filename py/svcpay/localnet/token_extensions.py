"""Token-2022 extensions as agave 4.2's `jsonParsed` shows them (solana-account-decoder's
parse_token_extension over spl-token-2022-interface 3.1's TLV reading).

Agave's rules, kept here: the types are listed from the TLV data after the account type byte
and any malformed entry or unknown type empties the whole list (`get_extension_types` fails and
is unwrapped to nothing); each listed type is then read as its first entry, and an entry of the
wrong size, or a type that belongs to the other kind of account, is `unparseableExtension`.
Optional keys (an all-zero key) are null, ElGamal keys and ciphertexts are base64.
"""

from __future__ import annotations

import base64
import struct
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import base58

Json = dict[str, Any]
UNINITIALIZED, ACCOUNT_TYPE_MINT, ACCOUNT_TYPE_ACCOUNT = 0, 1, 2
_STATES = ("uninitialized", "initialized", "frozen")


def _key(raw: bytes) -> str:
    return base58.b58encode(raw).decode()


def _maybe_key(raw: bytes) -> str | None:
    """A MaybeNull key: all zeros is none."""
    return None if not any(raw) else _key(raw)


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def u64_at(raw: bytes, at: int) -> int:
    return int(struct.unpack_from("<Q", raw, at)[0])


def i64_at(raw: bytes, at: int) -> int:
    return int(struct.unpack_from("<q", raw, at)[0])


def i16_at(raw: bytes, at: int) -> int:
    return int(struct.unpack_from("<h", raw, at)[0])


def f64_at(raw: bytes, at: int) -> float:
    return float(struct.unpack_from("<d", raw, at)[0])


def rust_float(x: float) -> str:
    """`f64::to_string` (Display): the shortest digits that read back, never an exponent."""
    if x != x:
        return "NaN"
    if x in (float("inf"), float("-inf")):
        return "inf" if x > 0 else "-inf"
    return format(Decimal(repr(x)).normalize(), "f")


# -- each extension's state: its fields in order, by kind ---------------------------------
def _transfer_fee(raw: bytes) -> Json:
    return {
        "epoch": u64_at(raw, 0),
        "maximumFee": u64_at(raw, 8),
        "transferFeeBasisPoints": int(struct.unpack_from("<H", raw, 16)[0]),
    }


def _account_state(raw: bytes) -> str:  # an unknown state reads as the default
    return _STATES[raw[0]] if raw[0] < len(_STATES) else "uninitialized"


# kind -> (size, reader); a "?" kind is a MaybeNull one: all zeros is null. ElGamal keys and
# ciphertexts ("elgamal", "cipher", "ae": authenticated) show as base64 (their Display).
_FIELDS: dict[str, tuple[int, Callable[[bytes], Any]]] = {
    "key": (32, _key),
    "key?": (32, _maybe_key),
    "u64": (8, lambda raw: u64_at(raw, 0)),
    "i64": (8, lambda raw: i64_at(raw, 0)),
    "i16": (2, lambda raw: i16_at(raw, 0)),
    "bool": (1, lambda raw: raw[0] != 0),
    "f64": (8, lambda raw: rust_float(f64_at(raw, 0))),  # as text: f64::to_string
    "elgamal": (32, _b64),
    "elgamal?": (32, lambda raw: _b64(raw) if any(raw) else None),
    "cipher": (64, _b64),
    "ae": (36, _b64),
    "fee": (18, _transfer_fee),
    "state": (1, _account_state),
}
Layout = tuple[tuple[str, str], ...]


def layout_size(layout: Layout) -> int:
    return sum(_FIELDS[kind][0] for _, kind in layout)


def _read(layout: Layout, raw: bytes) -> Json:
    out, at = {}, 0
    for name, kind in layout:
        size, reader = _FIELDS[kind]
        out[name] = reader(raw[at : at + size])
        at += size
    return out


_AUTHORITY = ("authority", "key?")
_CT_ACCOUNT: Layout = (
    ("approved", "bool"),
    ("elgamalPubkey", "elgamal"),
    ("pendingBalanceLo", "cipher"),
    ("pendingBalanceHi", "cipher"),
    ("availableBalance", "cipher"),
    ("decryptableAvailableBalance", "ae"),
    ("allowConfidentialCredits", "bool"),
    ("allowNonConfidentialCredits", "bool"),
    ("pendingBalanceCreditCounter", "u64"),
    ("maximumPendingBalanceCreditCounter", "u64"),
    ("expectedPendingBalanceCreditCounter", "u64"),
    ("actualPendingBalanceCreditCounter", "u64"),
)
_INTEREST: Layout = (
    ("rateAuthority", "key?"),
    ("initializationTimestamp", "i64"),
    ("preUpdateAverageRate", "i16"),
    ("lastUpdateTimestamp", "i64"),
    ("currentRate", "i16"),
)
_SCALED: Layout = (
    _AUTHORITY,
    ("multiplier", "f64"),
    ("newMultiplierEffectiveTimestamp", "i64"),
    ("newMultiplier", "f64"),
)


# -- TokenMetadata: borsh, variable length (trailing bytes are allowed) ---------------------
class _Borsh:
    def __init__(self, raw: bytes) -> None:
        self.raw, self.at = raw, 0

    def take(self, n: int) -> bytes:
        if self.at + n > len(self.raw):
            raise ValueError("short")
        self.at += n
        return self.raw[self.at - n : self.at]

    def u32(self) -> int:
        return int(struct.unpack("<I", self.take(4))[0])

    def string(self) -> str:
        return self.take(self.u32()).decode()  # UnicodeDecodeError is a ValueError


def token_metadata(raw: bytes) -> Json | None:
    """TokenMetadata's state, or None where borsh would not read it."""
    r = _Borsh(raw)
    try:
        authority, mint = _maybe_key(r.take(32)), _key(r.take(32))
        name, symbol, uri = r.string(), r.string(), r.string()
        extra = [[r.string(), r.string()] for _ in range(r.u32())]
    except ValueError:
        return None
    return {
        "updateAuthority": authority,
        "mint": mint,
        "name": name,
        "symbol": symbol,
        "uri": uri,
        "additionalMetadata": extra,
    }


# type id -> (agave's name, the account type it belongs to, its layout); a stateless
# extension (layout None) is named without reading, TokenMetadata (VARIABLE) is borsh
M, A = ACCOUNT_TYPE_MINT, ACCOUNT_TYPE_ACCOUNT
VARIABLE: Layout = ()
KINDS: dict[int, tuple[str, int, Layout | None]] = {
    1: (
        "transferFeeConfig",
        M,
        (
            ("transferFeeConfigAuthority", "key?"),
            ("withdrawWithheldAuthority", "key?"),
            ("withheldAmount", "u64"),
            ("olderTransferFee", "fee"),
            ("newerTransferFee", "fee"),
        ),
    ),
    2: ("transferFeeAmount", A, (("withheldAmount", "u64"),)),
    3: ("mintCloseAuthority", M, (("closeAuthority", "key?"),)),
    4: (
        "confidentialTransferMint",
        M,
        (_AUTHORITY, ("autoApproveNewAccounts", "bool"), ("auditorElgamalPubkey", "elgamal?")),
    ),
    5: ("confidentialTransferAccount", A, _CT_ACCOUNT),
    6: ("defaultAccountState", M, (("accountState", "state"),)),
    7: ("immutableOwner", A, None),
    8: ("memoTransfer", A, (("requireIncomingTransferMemos", "bool"),)),
    9: ("nonTransferable", M, None),
    10: ("interestBearingConfig", M, _INTEREST),
    11: ("cpiGuard", A, (("lockCpi", "bool"),)),
    12: ("permanentDelegate", M, (("delegate", "key?"),)),
    13: ("nonTransferableAccount", A, None),
    14: ("transferHook", M, (_AUTHORITY, ("programId", "key?"))),
    15: ("transferHookAccount", A, (("transferring", "bool"),)),
    16: (  # its ElGamal key is not MaybeNull: shown even when all zeros
        "confidentialTransferFeeConfig",
        M,
        (
            _AUTHORITY,
            ("withdrawWithheldAuthorityElgamalPubkey", "elgamal"),
            ("harvestToMintEnabled", "bool"),
            ("withheldAmount", "cipher"),
        ),
    ),
    17: ("confidentialTransferFeeAmount", A, (("withheldAmount", "cipher"),)),
    18: ("metadataPointer", M, (_AUTHORITY, ("metadataAddress", "key?"))),
    19: ("tokenMetadata", M, VARIABLE),
    20: ("groupPointer", M, (_AUTHORITY, ("groupAddress", "key?"))),
    21: (
        "tokenGroup",
        M,
        (("updateAuthority", "key?"), ("mint", "key"), ("size", "u64"), ("maxSize", "u64")),
    ),
    22: ("groupMemberPointer", M, (_AUTHORITY, ("memberAddress", "key?"))),
    23: ("tokenGroupMember", M, (("mint", "key"), ("group", "key"), ("memberNumber", "u64"))),
    24: (
        "confidentialMintBurn",
        M,
        (
            ("confidentialSupply", "cipher"),
            ("decryptableSupply", "ae"),
            ("supplyElgamalPubkey", "elgamal"),
            ("pendingBurn", "cipher"),
        ),
    ),
    25: ("scaledUiAmountConfig", M, _SCALED),
    26: ("pausableConfig", M, (_AUTHORITY, ("paused", "bool"))),
    27: ("pausableAccount", A, None),
    28: ("permissionedBurnConfig", M, (_AUTHORITY,)),
}
INTEREST_BEARING, SCALED_UI_AMOUNT = 10, 25


def tlv_entries(tlv: bytes) -> list[tuple[int, bytes]] | None:
    """(type, value) of each entry up to the first uninitialized one, or None where agave's
    `get_extension_types` fails (an unknown type, a value past the end)."""
    out, at = [], 0
    while at < len(tlv):
        if at + 2 > len(tlv):
            break  # no room for another type: the end
        kind = int(struct.unpack_from("<H", tlv, at)[0])
        if kind == UNINITIALIZED:
            break
        if kind not in KINDS or at + 4 > len(tlv):
            return None
        end = at + 4 + int(struct.unpack_from("<H", tlv, at + 2)[0])
        if end > len(tlv):
            return None
        out.append((kind, tlv[at + 4 : end]))
        at = end
    return out


def extension_value(tlv: bytes, kind: int, account_type: int) -> bytes | None:
    """The value of `kind`'s first entry as `get_extension` finds it for an account of
    `account_type` (skipping other entries, known or not): None if absent, of the wrong size,
    or of the other account type."""
    _, belongs, layout = KINDS[kind]
    if belongs != account_type:
        return None
    at = 0
    while at < len(tlv):
        if at + 4 > len(tlv):
            return None
        found, length = struct.unpack_from("<HH", tlv, at)
        if found == UNINITIALIZED:
            return None
        if found == kind:
            value = tlv[at + 4 : at + 4 + length]
            ok = len(value) == length and (
                layout == VARIABLE or layout is None or length == layout_size(layout)
            )
            return value if ok else None
        at += 4 + length
    return None


def _ui_extension(kind: int, tlv: bytes, account_type: int) -> Json:
    name, _, layout = KINDS[kind]
    if layout is None:
        return {"extension": name}
    value = extension_value(tlv, kind, account_type)
    state = None
    if value is not None:
        state = token_metadata(value) if layout == VARIABLE else _read(layout, value)
    if state is None:
        return {"extension": "unparseableExtension"}
    return {"extension": name, "state": state}


def ui_extensions(tlv: bytes, account_type: int) -> list[Json]:
    """The `extensions` of a mint or token account whose TLV data is `tlv`."""
    entries = tlv_entries(tlv) or []
    return [_ui_extension(kind, tlv, account_type) for kind, _ in entries]
