"""Token-2022's byte layout, below the rest of `svcpay.protocol.token2022`: the base
lengths, the extension, account-type and account-state numbers, each fixed extension's size,
the small little-endian readers, and the TLV parsing (`account_type`, `extensions`) every
reader of a mint or token account starts from."""

from __future__ import annotations

from collections.abc import Mapping
from enum import IntEnum
from typing import TypeAlias

from solders.pubkey import Pubkey

MINT_LEN = 82
ACCOUNT_LEN = 165
MULTISIG_LEN = 355
ACCOUNT_TYPE_OFFSET = ACCOUNT_LEN  # both bases are padded to an account's length
TLV_OFFSET = ACCOUNT_TYPE_OFFSET + 1
MAX_FEE_BASIS_POINTS = 10_000
U64_MAX = 2**64 - 1
PUBKEY_LEN = 32


class ExtensionType(IntEnum):
    """Token-2022's extension numbers (the `type` of each TLV entry), as of interface 3.1."""

    UNINITIALIZED = 0
    TRANSFER_FEE_CONFIG = 1
    TRANSFER_FEE_AMOUNT = 2
    MINT_CLOSE_AUTHORITY = 3
    CONFIDENTIAL_TRANSFER_MINT = 4
    CONFIDENTIAL_TRANSFER_ACCOUNT = 5
    DEFAULT_ACCOUNT_STATE = 6
    IMMUTABLE_OWNER = 7
    MEMO_TRANSFER = 8
    NON_TRANSFERABLE = 9
    INTEREST_BEARING_CONFIG = 10
    CPI_GUARD = 11
    PERMANENT_DELEGATE = 12
    NON_TRANSFERABLE_ACCOUNT = 13
    TRANSFER_HOOK = 14
    TRANSFER_HOOK_ACCOUNT = 15
    CONFIDENTIAL_TRANSFER_FEE_CONFIG = 16
    CONFIDENTIAL_TRANSFER_FEE_AMOUNT = 17
    METADATA_POINTER = 18
    TOKEN_METADATA = 19
    GROUP_POINTER = 20
    TOKEN_GROUP = 21
    GROUP_MEMBER_POINTER = 22
    TOKEN_GROUP_MEMBER = 23
    CONFIDENTIAL_MINT_BURN = 24
    SCALED_UI_AMOUNT = 25
    PAUSABLE = 26
    PAUSABLE_ACCOUNT = 27
    PERMISSIONED_BURN = 28


class AccountType(IntEnum):
    """The byte after the padded base that says whether extended data is a mint or account."""

    UNINITIALIZED = 0
    MINT = 1
    ACCOUNT = 2


class AccountState(IntEnum):
    """A token account's state byte (also the value of DefaultAccountState)."""

    UNINITIALIZED = 0
    INITIALIZED = 1
    FROZEN = 2


ET = ExtensionType
# The value length of every fixed-size extension (TokenMetadata is variable, so absent):
# what mint_space/account_space add up, and what each TLV value must measure.
EXTENSION_SIZES: Mapping[ExtensionType, int] = {
    ET.UNINITIALIZED: 0,
    ET.TRANSFER_FEE_CONFIG: 108,
    ET.TRANSFER_FEE_AMOUNT: 8,
    ET.MINT_CLOSE_AUTHORITY: 32,
    ET.CONFIDENTIAL_TRANSFER_MINT: 65,
    ET.CONFIDENTIAL_TRANSFER_ACCOUNT: 295,
    ET.DEFAULT_ACCOUNT_STATE: 1,
    ET.IMMUTABLE_OWNER: 0,
    ET.MEMO_TRANSFER: 1,
    ET.NON_TRANSFERABLE: 0,
    ET.INTEREST_BEARING_CONFIG: 52,
    ET.CPI_GUARD: 1,
    ET.PERMANENT_DELEGATE: 32,
    ET.NON_TRANSFERABLE_ACCOUNT: 0,
    ET.TRANSFER_HOOK: 64,
    ET.TRANSFER_HOOK_ACCOUNT: 1,
    ET.CONFIDENTIAL_TRANSFER_FEE_CONFIG: 129,
    ET.CONFIDENTIAL_TRANSFER_FEE_AMOUNT: 64,
    ET.METADATA_POINTER: 64,
    ET.GROUP_POINTER: 64,
    ET.TOKEN_GROUP: 80,
    ET.GROUP_MEMBER_POINTER: 64,
    ET.TOKEN_GROUP_MEMBER: 72,
    ET.CONFIDENTIAL_MINT_BURN: 196,
    ET.SCALED_UI_AMOUNT: 56,
    ET.PAUSABLE: 33,
    ET.PAUSABLE_ACCOUNT: 0,
    ET.PERMISSIONED_BURN: 32,
}

# The account extensions InitializeAccount adds for a mint's extensions: a token account of
# such a mint needs room for them.
_REQUIRED_ACCOUNT_EXTENSIONS: Mapping[ExtensionType, tuple[ExtensionType, ...]] = {
    ET.TRANSFER_FEE_CONFIG: (ET.TRANSFER_FEE_AMOUNT,),
    ET.NON_TRANSFERABLE: (ET.NON_TRANSFERABLE_ACCOUNT, ET.IMMUTABLE_OWNER),
    ET.TRANSFER_HOOK: (ET.TRANSFER_HOOK_ACCOUNT,),
    ET.PAUSABLE: (ET.PAUSABLE_ACCOUNT,),
}

Extensions: TypeAlias = dict[ExtensionType | int, bytes]


# -- small readers ------------------------------------------------------------------------
def _u16(data: bytes, at: int) -> int:
    return int.from_bytes(data[at : at + 2], "little")


def _u32(data: bytes, at: int) -> int:
    return int.from_bytes(data[at : at + 4], "little")


def _u64(data: bytes, at: int) -> int:
    return int.from_bytes(data[at : at + 8], "little")


def _i64(data: bytes, at: int) -> int:
    return int.from_bytes(data[at : at + 8], "little", signed=True)


def _i16(data: bytes, at: int) -> int:
    return int.from_bytes(data[at : at + 2], "little", signed=True)


def _maybe_pubkey(data: bytes, at: int = 0) -> Pubkey | None:
    """An OptionalNonZeroPubkey (Pod MaybeNull): 32 bytes, all zero meaning none."""
    raw = data[at : at + PUBKEY_LEN]
    return None if raw == bytes(PUBKEY_LEN) else Pubkey.from_bytes(raw)


def _coption_pubkey(data: bytes, at: int) -> Pubkey | None:
    """A base-state COption<Pubkey>: u32 tag (0 none, 1 some), then always 32 bytes."""
    tag = _u32(data, at)
    if tag not in (0, 1):
        raise ValueError(f"invalid COption tag {tag} at offset {at}")
    return Pubkey.from_bytes(data[at + 4 : at + 36]) if tag else None


def _sized(value: bytes, kind: ExtensionType) -> bytes:
    """`value`, checked to be exactly the extension's size (Token-2022 reads it as Pod)."""
    if len(value) != EXTENSION_SIZES[kind]:
        raise ValueError(f"{kind.name} is {len(value)} bytes, expected {EXTENSION_SIZES[kind]}")
    return value


def _check_u64(value: int, what: str) -> int:
    if not 0 <= value <= U64_MAX:
        raise ValueError(f"{what} {value} is not a u64")
    return value


# -- extension parsing --------------------------------------------------------------------
def _tlv_region(data: bytes) -> bytes:
    """The TLV bytes of mint or account data (empty for a base-only layout). Extended data
    is the base padded to 165 bytes, the AccountType byte, then TLV entries."""
    n = len(data)
    if n in (MINT_LEN, ACCOUNT_LEN):
        return b""
    if n == MULTISIG_LEN:
        raise ValueError("355 bytes is a multisig, not a mint or token account")
    if n < TLV_OFFSET:
        raise ValueError(f"{n} bytes is neither a mint, a token account nor extended data")
    kind = data[ACCOUNT_TYPE_OFFSET]
    if kind not in AccountType._value2member_map_:
        raise ValueError(f"unknown account type {kind} at offset {ACCOUNT_TYPE_OFFSET}")
    if kind == AccountType.MINT and any(data[MINT_LEN:ACCOUNT_LEN]):
        raise ValueError("a mint's padding between 82 and 165 bytes is not zero")
    return data[TLV_OFFSET:]


def account_type(data: bytes) -> AccountType | None:
    """The AccountType byte of extended data; None for a base-only (82/165-byte) layout."""
    _tlv_region(data)
    return AccountType(data[ACCOUNT_TYPE_OFFSET]) if len(data) > ACCOUNT_LEN else None


def extensions(data: bytes) -> Extensions:
    """The extensions in mint or token-account data of either token program: type -> value.

    Reads TLV entries (u16 type, u16 length, value) as Token-2022 does: the walk ends at an
    Uninitialized (0) type or when fewer than 2 bytes remain; a length past the end is an
    error. Types newer than this module are kept under their number, so a caller can still
    refuse a mint it does not understand."""
    tlv = _tlv_region(data)
    found: Extensions = {}
    at = 0
    while len(tlv) - at >= 2:
        number = _u16(tlv, at)
        if number == ExtensionType.UNINITIALIZED:
            break
        if len(tlv) - at < 4:
            raise ValueError(f"extension {number} at TLV offset {at} has no length")
        end = at + 4 + _u16(tlv, at + 2)
        if end > len(tlv):
            raise ValueError(f"extension {number} at TLV offset {at} runs past the data")
        key: ExtensionType | int = (
            ExtensionType(number) if number in ExtensionType._value2member_map_ else number
        )
        if key in found:
            raise ValueError(f"extension {number} appears twice")
        found[key] = tlv[at + 4 : end]
        at = end
    return found
