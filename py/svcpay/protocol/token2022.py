"""SPL Token-2022 extensions, as payments meet them: what a mint or token account carries,
what a transfer of it costs, how to create such a mint, and which extra accounts a transfer
through a transfer hook needs.

A Token-2022 payment is not always "amount in, amount out": a transfer fee is withheld from
what the payee receives, a transfer hook needs extra accounts in the transaction (and CPIs
into a program the payee did not choose), a permanent delegate can move tokens out of any
account, and a paused or non-transferable mint cannot be paid with at all. The program
client, the CLI and the payment checks all read those facts here, from raw account data,
with the byte layouts of spl-token-2022-interface 3.1 and spl-tlv-account-resolution.

Pure: no RPC. Callers pass account data in, or a function that fetches it.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from functools import lru_cache
from typing import TYPE_CHECKING, ClassVar, TypeAlias

from solders.instruction import AccountMeta, Instruction
from solders.pubkey import Pubkey
from solders.system_program import ID as SYSTEM_PROGRAM
from solders.system_program import CreateAccountParams, create_account

from svcpay.protocol.programs import TOKEN_2022_PROGRAM, TOKEN_PROGRAM, TOKEN_PROGRAMS

if TYPE_CHECKING:
    from solders.transaction import VersionedTransaction

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


# -- typed extension values ---------------------------------------------------------------
@dataclass(frozen=True)
class TransferFee:
    """One transfer-fee schedule: from `epoch` on, `basis_points` of a transfer (rounded
    up), at most `maximum_fee`, is withheld from what the recipient gets."""

    epoch: int
    maximum_fee: int
    basis_points: int
    SIZE: ClassVar[int] = 18

    @classmethod
    def from_bytes(cls, raw: bytes) -> TransferFee:
        if len(raw) != cls.SIZE:
            raise ValueError(f"a TransferFee is {cls.SIZE} bytes, got {len(raw)}")
        return cls(_u64(raw, 0), _u64(raw, 8), _u16(raw, 16))

    def fee(self, amount: int) -> int:
        """The fee Token-2022 withholds from a transfer of `amount`: ceil(amount * bps /
        10_000), capped at maximum_fee (TransferFee::calculate_fee)."""
        _check_u64(amount, "amount")
        if self.basis_points == 0 or amount == 0:
            return 0
        raw = -(-amount * self.basis_points // MAX_FEE_BASIS_POINTS)
        return min(raw, self.maximum_fee)

    def gross_for_net(self, net: int) -> int:
        """The smallest transfer amount whose recipient receives exactly `net` (what a payer
        sends so the payee gets the price): TransferFee::calculate_pre_fee_amount. Raises
        ValueError when no u64 amount does."""
        _check_u64(net, "net amount")
        bps, cap = self.basis_points, self.maximum_fee
        if bps == 0 or net == 0:
            return net
        if bps == MAX_FEE_BASIS_POINTS:
            gross = net + cap
        else:
            raw = -(-net * MAX_FEE_BASIS_POINTS // (MAX_FEE_BASIS_POINTS - bps))
            gross = net + cap if raw - net >= cap else raw
        if gross > U64_MAX:
            raise ValueError(f"no u64 transfer nets {net} at {bps} bps")
        return gross


@dataclass(frozen=True)
class TransferFeeConfig:
    """A mint's TransferFeeConfig: its authorities, the fees withheld and moved to the
    mint, and two schedules (the newer applies from its epoch on)."""

    config_authority: Pubkey | None
    withdraw_withheld_authority: Pubkey | None
    withheld_amount: int
    older: TransferFee
    newer: TransferFee

    @classmethod
    def from_bytes(cls, raw: bytes) -> TransferFeeConfig:
        raw = _sized(raw, ET.TRANSFER_FEE_CONFIG)
        return cls(
            _maybe_pubkey(raw, 0),
            _maybe_pubkey(raw, 32),
            _u64(raw, 64),
            TransferFee.from_bytes(raw[72:90]),
            TransferFee.from_bytes(raw[90:108]),
        )

    def schedule(self, epoch: int) -> TransferFee:
        """The schedule in force at `epoch` (TransferFeeConfig::get_epoch_fee)."""
        return self.newer if epoch >= self.newer.epoch else self.older

    def fee_for(self, amount: int, epoch: int) -> int:
        """The fee withheld from a transfer of `amount` during `epoch`."""
        return self.schedule(epoch).fee(amount)

    def gross_for_net(self, net: int, epoch: int) -> int:
        """What to transfer during `epoch` so that the recipient receives `net`."""
        return self.schedule(epoch).gross_for_net(net)


@dataclass(frozen=True)
class TransferHookConfig:
    """A mint's TransferHook: the program every transfer CPIs into, and who may change it."""

    authority: Pubkey | None
    program_id: Pubkey | None

    @classmethod
    def from_bytes(cls, raw: bytes) -> TransferHookConfig:
        raw = _sized(raw, ET.TRANSFER_HOOK)
        return cls(_maybe_pubkey(raw, 0), _maybe_pubkey(raw, 32))


@dataclass(frozen=True)
class PausableConfig:
    """A mint's Pausable extension: while paused, no transfer, mint or burn succeeds."""

    authority: Pubkey | None
    paused: bool

    @classmethod
    def from_bytes(cls, raw: bytes) -> PausableConfig:
        raw = _sized(raw, ET.PAUSABLE)
        return cls(_maybe_pubkey(raw, 0), raw[32] != 0)


@dataclass(frozen=True)
class InterestBearingConfig:
    """A mint's InterestBearingConfig (rates in basis points, timestamps unix seconds): the
    UI amount grows, the raw amounts a payment moves do not."""

    rate_authority: Pubkey | None
    initialization_timestamp: int
    pre_update_average_rate: int
    last_update_timestamp: int
    current_rate: int

    @classmethod
    def from_bytes(cls, raw: bytes) -> InterestBearingConfig:
        raw = _sized(raw, ET.INTEREST_BEARING_CONFIG)
        return cls(
            _maybe_pubkey(raw, 0), _i64(raw, 32), _i16(raw, 40), _i64(raw, 42), _i16(raw, 50)
        )


# -- mints and token accounts -------------------------------------------------------------
def _pubkey_extension(exts: Extensions, kind: ExtensionType) -> Pubkey | None:
    raw = exts.get(kind)
    return None if raw is None else _maybe_pubkey(_sized(raw, kind))


@dataclass(frozen=True)
class MintInfo:
    """An initialized mint of either token program, with what its extensions mean for a
    payment in it."""

    program: Pubkey
    decimals: int
    supply: int
    mint_authority: Pubkey | None
    freeze_authority: Pubkey | None
    extensions: Extensions = field(default_factory=dict)

    def has(self, kind: ExtensionType | int) -> bool:
        return kind in self.extensions

    @property
    def unknown_extensions(self) -> list[int]:
        """Extension numbers this module does not know (a newer Token-2022)."""
        return [k for k in self.extensions if not isinstance(k, ExtensionType)]

    @property
    def fee_config(self) -> TransferFeeConfig | None:
        raw = self.extensions.get(ET.TRANSFER_FEE_CONFIG)
        return None if raw is None else TransferFeeConfig.from_bytes(raw)

    def fee_for(self, amount: int, epoch: int) -> int:
        """The transfer fee withheld from `amount` during `epoch` (0 without the extension)."""
        config = self.fee_config
        return 0 if config is None else config.fee_for(amount, epoch)

    def gross_for_net(self, net: int, epoch: int) -> int:
        """What to transfer during `epoch` so the recipient receives `net`."""
        config = self.fee_config
        return net if config is None else config.gross_for_net(net, epoch)

    @property
    def transfer_hook(self) -> TransferHookConfig | None:
        raw = self.extensions.get(ET.TRANSFER_HOOK)
        return None if raw is None else TransferHookConfig.from_bytes(raw)

    @property
    def hook_program(self) -> Pubkey | None:
        """The transfer-hook program every transfer CPIs into; None when unset or zero."""
        hook = self.transfer_hook
        return None if hook is None else hook.program_id

    @property
    def pausable(self) -> PausableConfig | None:
        raw = self.extensions.get(ET.PAUSABLE)
        return None if raw is None else PausableConfig.from_bytes(raw)

    @property
    def paused(self) -> bool:
        config = self.pausable
        return config is not None and config.paused

    @property
    def permanent_delegate(self) -> Pubkey | None:
        """Who may transfer or burn from any account of this mint, the payee's included."""
        return _pubkey_extension(self.extensions, ET.PERMANENT_DELEGATE)

    @property
    def close_authority(self) -> Pubkey | None:
        return _pubkey_extension(self.extensions, ET.MINT_CLOSE_AUTHORITY)

    @property
    def default_account_state(self) -> AccountState:
        """The state new token accounts start in (Initialized without the extension)."""
        raw = self.extensions.get(ET.DEFAULT_ACCOUNT_STATE)
        if raw is None:
            return AccountState.INITIALIZED
        state = _sized(raw, ET.DEFAULT_ACCOUNT_STATE)[0]
        if state not in AccountState._value2member_map_:
            raise ValueError(f"invalid default account state {state}")
        return AccountState(state)

    @property
    def default_frozen(self) -> bool:
        """New accounts start frozen: a fresh recipient account cannot receive until thawed."""
        return self.default_account_state == AccountState.FROZEN

    @property
    def non_transferable(self) -> bool:
        return ET.NON_TRANSFERABLE in self.extensions

    @property
    def interest_bearing(self) -> InterestBearingConfig | None:
        raw = self.extensions.get(ET.INTEREST_BEARING_CONFIG)
        return None if raw is None else InterestBearingConfig.from_bytes(raw)

    def at(self, epoch: int) -> MintAtEpoch:
        """What a payment in this mint reckons with during `epoch` (docs/adr/0031)."""
        config = self.fee_config
        schedule = None if config is None else config.schedule(epoch)
        return MintAtEpoch(self.program, schedule, self.hook_program)


def _check_token_owner(owner: Pubkey) -> None:
    if owner not in TOKEN_PROGRAMS:
        raise ValueError(f"account owned by {owner}, not a token program")


def _check_layout(owner: Pubkey, data: bytes, base: int, expected: AccountType) -> None:
    """Data of `base` bytes, or (Token-2022 only) extended data of the expected type."""
    if len(data) == base:
        return
    if owner == TOKEN_PROGRAM or len(data) <= ACCOUNT_LEN:
        raise ValueError(f"{len(data)} bytes is not a {expected.name.lower()} of {owner}")
    if account_type(data) != expected:
        raise ValueError(f"extended data is not a {expected.name.lower()}")


def mint_info(owner: Pubkey, data: bytes) -> MintInfo:
    """The mint in `data`, an account owned by `owner`. ValueError unless it is an
    initialized mint of SPL Token or Token-2022 (a token account, multisig, short or
    malformed data, or another owner)."""
    _check_token_owner(owner)
    _check_layout(owner, data, MINT_LEN, AccountType.MINT)
    initialized = data[45]
    if initialized != 1:
        raise ValueError("not an initialized mint" if initialized == 0 else "bad mint flag")
    return MintInfo(
        program=owner,
        decimals=data[44],
        supply=_u64(data, 36),
        mint_authority=_coption_pubkey(data, 0),
        freeze_authority=_coption_pubkey(data, 46),
        extensions=extensions(data),
    )


@dataclass(frozen=True)
class TokenAccountInfo:
    """An initialized token account of either token program."""

    program: Pubkey
    mint: Pubkey
    owner: Pubkey
    amount: int
    delegate: Pubkey | None
    state: AccountState
    delegated_amount: int
    close_authority: Pubkey | None
    extensions: Extensions = field(default_factory=dict)

    @property
    def frozen(self) -> bool:
        return self.state == AccountState.FROZEN

    @property
    def memo_required(self) -> bool:
        """MemoTransfer's require_incoming_transfer_memos: a transfer into this account
        fails unless a memo instruction precedes it."""
        raw = self.extensions.get(ET.MEMO_TRANSFER)
        return raw is not None and _sized(raw, ET.MEMO_TRANSFER)[0] != 0

    @property
    def withheld_amount(self) -> int:
        """Transfer fees withheld in this account (TransferFeeAmount), not yet harvested."""
        raw = self.extensions.get(ET.TRANSFER_FEE_AMOUNT)
        return 0 if raw is None else _u64(_sized(raw, ET.TRANSFER_FEE_AMOUNT), 0)

    @property
    def cpi_guard(self) -> bool:
        raw = self.extensions.get(ET.CPI_GUARD)
        return raw is not None and _sized(raw, ET.CPI_GUARD)[0] != 0


def token_account_info(owner: Pubkey, data: bytes) -> TokenAccountInfo:
    """The token account in `data`, owned by `owner`; ValueError unless it is an
    initialized token account of SPL Token or Token-2022."""
    _check_token_owner(owner)
    _check_layout(owner, data, ACCOUNT_LEN, AccountType.ACCOUNT)
    state = data[108]
    if state not in (AccountState.INITIALIZED, AccountState.FROZEN):
        raise ValueError(f"not an initialized token account (state {state})")
    return TokenAccountInfo(
        program=owner,
        mint=Pubkey.from_bytes(data[0:32]),
        owner=Pubkey.from_bytes(data[32:64]),
        amount=_u64(data, 64),
        delegate=_coption_pubkey(data, 72),
        state=AccountState(state),
        delegated_amount=_u64(data, 121),
        close_authority=_coption_pubkey(data, 129),
        extensions=extensions(data),
    )


# -- account sizes ------------------------------------------------------------------------
def _space(base: int, extension_types: Iterable[ExtensionType]) -> int:
    """ExtensionType::try_calculate_account_len: each distinct type once; none is the bare
    base; otherwise 165 + 1 + sum(4 + size), and 2 more where that would be a multisig's
    355 bytes (so the two can never be confused)."""
    kinds = set(extension_types)
    if not kinds:
        return base
    unsized = [k.name for k in kinds if k not in EXTENSION_SIZES]
    if unsized:
        raise ValueError(f"variable-length extensions have no fixed space: {unsized}")
    total = TLV_OFFSET + sum(4 + EXTENSION_SIZES[k] for k in kinds)
    return total + 2 if total == MULTISIG_LEN else total


def mint_space(extension_types: Iterable[ExtensionType]) -> int:
    """The data length of a Token-2022 mint with these (fixed-size) extensions."""
    return _space(MINT_LEN, extension_types)


def account_space(extension_types: Iterable[ExtensionType]) -> int:
    """The data length of a Token-2022 token account with these extensions."""
    return _space(ACCOUNT_LEN, extension_types)


def required_account_extensions(mint_types: Iterable[ExtensionType]) -> list[ExtensionType]:
    """The account extensions InitializeAccount adds for a mint with `mint_types`."""
    required: list[ExtensionType] = []
    for kind in mint_types:
        for needed in _REQUIRED_ACCOUNT_EXTENSIONS.get(kind, ()):
            if needed not in required:
                required.append(needed)
    return required


# -- instructions -------------------------------------------------------------------------
class TokenInstruction(IntEnum):
    """The Token-2022 instruction tags used here (the first data byte)."""

    INITIALIZE_MINT2 = 20
    INITIALIZE_MINT_CLOSE_AUTHORITY = 25
    TRANSFER_FEE_EXTENSION = 26
    DEFAULT_ACCOUNT_STATE_EXTENSION = 28
    REALLOCATE = 29
    MEMO_TRANSFER_EXTENSION = 30
    INITIALIZE_NON_TRANSFERABLE_MINT = 32
    CPI_GUARD_EXTENSION = 34
    INTEREST_BEARING_MINT_EXTENSION = 33
    INITIALIZE_PERMANENT_DELEGATE = 35
    TRANSFER_HOOK_EXTENSION = 36
    PAUSABLE_EXTENSION = 44


# Sub-instruction numbers (the second data byte) of the extension families above.
TRANSFER_FEE_INITIALIZE, TRANSFER_FEE_SET = 0, 5
SUB_INITIALIZE, SUB_UPDATE = 0, 1  # DefaultAccountState, InterestBearing, TransferHook
MEMO_ENABLE, MEMO_DISABLE = 0, 1
PAUSABLE_INITIALIZE, PAUSABLE_PAUSE, PAUSABLE_RESUME = 0, 1, 2


def _coption_arg(key: Pubkey | None) -> bytes:
    """A COption<Pubkey> in instruction data: [0], or [1] + 32 bytes (not the base-state
    4-byte-tag form)."""
    return b"\x00" if key is None else b"\x01" + bytes(key)


def _maybe_arg(key: Pubkey | None) -> bytes:
    """An OptionalNonZeroPubkey in Pod instruction data: always 32 bytes, zero for none."""
    return bytes(PUBKEY_LEN) if key is None else bytes(key)


def _ix(
    data: bytes, accounts: list[AccountMeta], program: Pubkey = TOKEN_2022_PROGRAM
) -> Instruction:
    return Instruction(program, data, accounts)


def _on_mint(mint: Pubkey, data: bytes) -> Instruction:
    """An initializer: the uninitialized mint, writable, is its only account."""
    return _ix(data, [AccountMeta(mint, is_signer=False, is_writable=True)])


def _by_authority(
    target: Pubkey, authority: Pubkey, signers: Sequence[Pubkey], data: bytes
) -> Instruction:
    """An authority-signed change to `target`: the authority signs, or is a multisig whose
    `signers` do."""
    accounts = [
        AccountMeta(target, is_signer=False, is_writable=True),
        AccountMeta(authority, is_signer=not signers, is_writable=False),
    ]
    accounts += [AccountMeta(s, is_signer=True, is_writable=False) for s in signers]
    return _ix(data, accounts)


def _bps(basis_points: int) -> int:
    if not 0 <= basis_points <= MAX_FEE_BASIS_POINTS:
        raise ValueError(f"transfer fee {basis_points} bps is outside 0..{MAX_FEE_BASIS_POINTS}")
    return basis_points


def initialize_mint2(
    mint: Pubkey,
    decimals: int,
    mint_authority: Pubkey,
    freeze_authority: Pubkey | None = None,
    *,
    program_id: Pubkey = TOKEN_2022_PROGRAM,
) -> Instruction:
    """InitializeMint2 (20): the last instruction of a mint's creation, after its extension
    initializers (it needs no rent sysvar account)."""
    if not 0 <= decimals <= 255:
        raise ValueError(f"decimals {decimals} is not a u8")
    data = bytes([TokenInstruction.INITIALIZE_MINT2, decimals]) + bytes(mint_authority)
    return _ix(data + _coption_arg(freeze_authority), [AccountMeta(mint, False, True)], program_id)


def initialize_transfer_fee_config(
    mint: Pubkey,
    basis_points: int,
    maximum_fee: int,
    *,
    config_authority: Pubkey | None,
    withdraw_withheld_authority: Pubkey | None,
) -> Instruction:
    """TransferFee InitializeTransferFeeConfig (26/0): both schedules start as this one."""
    data = bytes([TokenInstruction.TRANSFER_FEE_EXTENSION, TRANSFER_FEE_INITIALIZE])
    data += _coption_arg(config_authority) + _coption_arg(withdraw_withheld_authority)
    data += struct.pack("<HQ", _bps(basis_points), _check_u64(maximum_fee, "maximum fee"))
    return _on_mint(mint, data)


def set_transfer_fee(
    mint: Pubkey,
    authority: Pubkey,
    basis_points: int,
    maximum_fee: int,
    *,
    signers: Sequence[Pubkey] = (),
) -> Instruction:
    """TransferFee SetTransferFee (26/5): the new schedule applies from two epochs on."""
    data = bytes([TokenInstruction.TRANSFER_FEE_EXTENSION, TRANSFER_FEE_SET])
    data += struct.pack("<HQ", _bps(basis_points), _check_u64(maximum_fee, "maximum fee"))
    return _by_authority(mint, authority, signers, data)


def initialize_transfer_hook(
    mint: Pubkey, hook_program: Pubkey | None, authority: Pubkey | None
) -> Instruction:
    """TransferHook Initialize (36/0): authority then program id, 32 bytes each."""
    data = bytes([TokenInstruction.TRANSFER_HOOK_EXTENSION, SUB_INITIALIZE])
    return _on_mint(mint, data + _maybe_arg(authority) + _maybe_arg(hook_program))


def update_transfer_hook(
    mint: Pubkey,
    authority: Pubkey,
    hook_program: Pubkey | None,
    *,
    signers: Sequence[Pubkey] = (),
) -> Instruction:
    """TransferHook Update (36/1): a new hook program, or none."""
    data = bytes([TokenInstruction.TRANSFER_HOOK_EXTENSION, SUB_UPDATE]) + _maybe_arg(hook_program)
    return _by_authority(mint, authority, signers, data)


def initialize_mint_close_authority(mint: Pubkey, close_authority: Pubkey | None) -> Instruction:
    """InitializeMintCloseAuthority (25): who may close the mint once its supply is 0."""
    data = bytes([TokenInstruction.INITIALIZE_MINT_CLOSE_AUTHORITY]) + _coption_arg(close_authority)
    return _on_mint(mint, data)


def initialize_permanent_delegate(mint: Pubkey, delegate: Pubkey) -> Instruction:
    """InitializePermanentDelegate (35): a delegate over every account of the mint."""
    return _on_mint(mint, bytes([TokenInstruction.INITIALIZE_PERMANENT_DELEGATE]) + bytes(delegate))


def initialize_non_transferable_mint(mint: Pubkey) -> Instruction:
    """InitializeNonTransferableMint (32): tokens that can be minted and burned, never moved."""
    return _on_mint(mint, bytes([TokenInstruction.INITIALIZE_NON_TRANSFERABLE_MINT]))


def initialize_default_account_state(mint: Pubkey, state: AccountState) -> Instruction:
    """DefaultAccountState Initialize (28/0): the state new accounts start in."""
    if state == AccountState.UNINITIALIZED:
        raise ValueError("the default account state must be Initialized or Frozen")
    data = bytes([TokenInstruction.DEFAULT_ACCOUNT_STATE_EXTENSION, SUB_INITIALIZE, state])
    return _on_mint(mint, data)


def initialize_interest_bearing_mint(
    mint: Pubkey, rate_bps: int, rate_authority: Pubkey | None
) -> Instruction:
    """InterestBearingMint Initialize (33/0): rate authority (32 bytes), rate (i16 bps)."""
    if not -(2**15) <= rate_bps < 2**15:
        raise ValueError(f"interest rate {rate_bps} bps is not an i16")
    data = bytes([TokenInstruction.INTEREST_BEARING_MINT_EXTENSION, SUB_INITIALIZE])
    return _on_mint(mint, data + _maybe_arg(rate_authority) + struct.pack("<h", rate_bps))


def initialize_pausable(mint: Pubkey, authority: Pubkey) -> Instruction:
    """Pausable Initialize (44/0): the authority that may pause and resume (32 bytes, not
    optional)."""
    data = bytes([TokenInstruction.PAUSABLE_EXTENSION, PAUSABLE_INITIALIZE]) + bytes(authority)
    return _on_mint(mint, data)


def pause(mint: Pubkey, authority: Pubkey, *, signers: Sequence[Pubkey] = ()) -> Instruction:
    """Pausable Pause (44/1): stops every transfer, mint and burn of the mint."""
    data = bytes([TokenInstruction.PAUSABLE_EXTENSION, PAUSABLE_PAUSE])
    return _by_authority(mint, authority, signers, data)


def resume(mint: Pubkey, authority: Pubkey, *, signers: Sequence[Pubkey] = ()) -> Instruction:
    """Pausable Resume (44/2)."""
    data = bytes([TokenInstruction.PAUSABLE_EXTENSION, PAUSABLE_RESUME])
    return _by_authority(mint, authority, signers, data)


def enable_required_memo_transfers(
    account: Pubkey, owner: Pubkey, *, signers: Sequence[Pubkey] = ()
) -> Instruction:
    """MemoTransfer Enable (30/0) on a token account (it needs room: see `reallocate`)."""
    data = bytes([TokenInstruction.MEMO_TRANSFER_EXTENSION, MEMO_ENABLE])
    return _by_authority(account, owner, signers, data)


def disable_required_memo_transfers(
    account: Pubkey, owner: Pubkey, *, signers: Sequence[Pubkey] = ()
) -> Instruction:
    """MemoTransfer Disable (30/1)."""
    data = bytes([TokenInstruction.MEMO_TRANSFER_EXTENSION, MEMO_DISABLE])
    return _by_authority(account, owner, signers, data)


def enable_cpi_guard(
    account: Pubkey, owner: Pubkey, *, signers: Sequence[Pubkey] = ()
) -> Instruction:
    """CpiGuard Enable (34/0) on a token account (it needs room: see `reallocate`): programs
    may no longer approve, transfer as the owner, or close it in a CPI."""
    return _by_authority(account, owner, signers, bytes([TokenInstruction.CPI_GUARD_EXTENSION, 0]))


def disable_cpi_guard(
    account: Pubkey, owner: Pubkey, *, signers: Sequence[Pubkey] = ()
) -> Instruction:
    """CpiGuard Disable (34/1)."""
    return _by_authority(account, owner, signers, bytes([TokenInstruction.CPI_GUARD_EXTENSION, 1]))


def reallocate(
    account: Pubkey,
    payer: Pubkey,
    owner: Pubkey,
    extension_types: Sequence[ExtensionType],
    *,
    signers: Sequence[Pubkey] = (),
) -> Instruction:
    """Reallocate (29): grows a token account for account extensions (e.g. MemoTransfer
    before enabling it), the payer funding the extra rent."""
    data = bytes([TokenInstruction.REALLOCATE]) + b"".join(
        struct.pack("<H", k) for k in extension_types
    )
    accounts = [
        AccountMeta(account, is_signer=False, is_writable=True),
        AccountMeta(payer, is_signer=True, is_writable=True),
        AccountMeta(SYSTEM_PROGRAM, is_signer=False, is_writable=False),
        AccountMeta(owner, is_signer=not signers, is_writable=False),
    ]
    accounts += [AccountMeta(s, is_signer=True, is_writable=False) for s in signers]
    return _ix(data, accounts)


def create_mint_instructions(
    payer: Pubkey,
    mint: Pubkey,
    decimals: int,
    mint_authority: Pubkey,
    *,
    transfer_fee: tuple[int, int] | None = None,
    transfer_hook: Pubkey | None = None,
    permanent_delegate: Pubkey | None = None,
    pausable: bool = False,
    non_transferable: bool = False,
    default_frozen: bool = False,
    interest_rate: int | None = None,
    close_authority: Pubkey | None = None,
    freeze_authority: Pubkey | None = None,
    rent_lamports: int | Callable[[int], int],
) -> list[Instruction]:
    """A Token-2022 mint's creation, in order: create_account (payer and mint sign), the
    extension initializers, InitializeMint2. The mint authority also holds every extension
    authority (fee config and withheld withdrawal, hook, pause, interest rate).

    `transfer_fee` is (basis points, maximum fee). `rent_lamports` is the rent-exempt
    balance for the mint's size, or a function from size to it (e.g.
    `Chain.minimum_balance`), since only this function knows the size."""
    if default_frozen and freeze_authority is None:
        raise ValueError("a mint whose accounts start frozen needs a freeze authority")
    inits: list[tuple[ExtensionType, Instruction]] = []
    if transfer_fee is not None:
        bps, max_fee = transfer_fee
        ix = initialize_transfer_fee_config(
            mint,
            bps,
            max_fee,
            config_authority=mint_authority,
            withdraw_withheld_authority=mint_authority,
        )
        inits.append((ET.TRANSFER_FEE_CONFIG, ix))
    if close_authority is not None:
        inits.append(
            (ET.MINT_CLOSE_AUTHORITY, initialize_mint_close_authority(mint, close_authority))
        )
    if default_frozen:
        ix = initialize_default_account_state(mint, AccountState.FROZEN)
        inits.append((ET.DEFAULT_ACCOUNT_STATE, ix))
    if non_transferable:
        inits.append((ET.NON_TRANSFERABLE, initialize_non_transferable_mint(mint)))
    if interest_rate is not None:
        ix = initialize_interest_bearing_mint(mint, interest_rate, mint_authority)
        inits.append((ET.INTEREST_BEARING_CONFIG, ix))
    if permanent_delegate is not None:
        inits.append(
            (ET.PERMANENT_DELEGATE, initialize_permanent_delegate(mint, permanent_delegate))
        )
    if transfer_hook is not None:
        ix = initialize_transfer_hook(mint, transfer_hook, mint_authority)
        inits.append((ET.TRANSFER_HOOK, ix))
    if pausable:
        inits.append((ET.PAUSABLE, initialize_pausable(mint, mint_authority)))
    space = mint_space(kind for kind, _ in inits)
    lamports = rent_lamports(space) if callable(rent_lamports) else rent_lamports
    create = create_account(
        CreateAccountParams(
            from_pubkey=payer,
            to_pubkey=mint,
            lamports=lamports,
            space=space,
            owner=TOKEN_2022_PROGRAM,
        )
    )
    init = initialize_mint2(mint, decimals, mint_authority, freeze_authority)
    return [create, *(ix for _, ix in inits), init]


# -- transfer-hook extra accounts ---------------------------------------------------------
EXECUTE_DISCRIMINATOR = hashlib.sha256(b"spl-transfer-hook-interface:execute").digest()[:8]
EXTRA_ACCOUNT_METAS_SEED = b"extra-account-metas"
EXTRA_ACCOUNT_META_LEN = 35
EXECUTE_ACCOUNTS = 5  # source, mint, destination, authority, validation account
MAX_SEED_LEN = 32
MAX_PDA_SEEDS = 15  # 16 with the bump


def validation_address(hook_program: Pubkey, mint: Pubkey) -> Pubkey:
    """The hook program's account listing the extra accounts its Execute needs for `mint`."""
    return Pubkey.find_program_address([EXTRA_ACCOUNT_METAS_SEED, bytes(mint)], hook_program)[0]


@dataclass(frozen=True)
class SeedLiteral:
    """Fixed seed bytes."""

    value: bytes


@dataclass(frozen=True)
class SeedInstructionData:
    """`length` bytes of the Execute instruction data from `index` (8.. is the amount)."""

    index: int
    length: int


@dataclass(frozen=True)
class SeedAccountKey:
    """The key of the Execute account at `index` (0 source .. 4 validation, 5.. extras)."""

    index: int


@dataclass(frozen=True)
class SeedAccountData:
    """`length` bytes of the data of the account at `account_index`, from `data_index`."""

    account_index: int
    data_index: int
    length: int


Seed: TypeAlias = SeedLiteral | SeedInstructionData | SeedAccountKey | SeedAccountData


@dataclass(frozen=True)
class KeyFromInstructionData:
    """A pubkey read from the Execute instruction data at `index`."""

    index: int


@dataclass(frozen=True)
class KeyFromAccountData:
    """A pubkey read from the data of the account at `account_index`, at `data_index`."""

    account_index: int
    data_index: int


PubkeyData: TypeAlias = KeyFromInstructionData | KeyFromAccountData


def _seed_bytes(seed: Seed) -> bytes:
    if isinstance(seed, SeedLiteral):
        if len(seed.value) > 255:
            raise ValueError("a literal seed is at most 255 bytes")
        return bytes([1, len(seed.value)]) + seed.value
    if isinstance(seed, SeedInstructionData):
        return bytes([2, seed.index, seed.length])
    if isinstance(seed, SeedAccountKey):
        return bytes([3, seed.index])
    return bytes([4, seed.account_index, seed.data_index, seed.length])


def pack_seeds(seeds: Sequence[Seed]) -> bytes:
    """Seeds packed into a 32-byte address_config, zero-padded."""
    packed = b"".join(_seed_bytes(s) for s in seeds)
    if len(packed) > 32:
        raise ValueError(f"seeds take {len(packed)} bytes, more than an address_config's 32")
    return packed.ljust(32, b"\x00")


def unpack_seeds(config: bytes) -> list[Seed]:
    """The seeds packed in an address_config, read until a 0 byte or its end."""
    seeds: list[Seed] = []
    at = 0
    while at < len(config) and config[at] != 0:
        kind, rest = config[at], config[at + 1 :]
        need = {1: 1, 2: 2, 3: 1, 4: 3}.get(kind)
        if need is None:
            raise ValueError(f"unknown seed type {kind} at address_config offset {at}")
        if len(rest) < need or (kind == 1 and len(rest) < 1 + rest[0]):
            raise ValueError(f"seed type {kind} at address_config offset {at} is truncated")
        seed: Seed
        if kind == 1:
            seed = SeedLiteral(bytes(rest[1 : 1 + rest[0]]))
        elif kind == 2:
            seed = SeedInstructionData(rest[0], rest[1])
        elif kind == 3:
            seed = SeedAccountKey(rest[0])
        else:
            seed = SeedAccountData(rest[0], rest[1], rest[2])
        seeds.append(seed)
        at += len(_seed_bytes(seed))
    return seeds


def _unpack_pubkey_data(config: bytes) -> PubkeyData:
    kind = config[0]
    if kind == 1:
        return KeyFromInstructionData(config[1])
    if kind == 2:
        return KeyFromAccountData(config[1], config[2])
    raise ValueError(f"invalid pubkey-data type {kind}")


@dataclass(frozen=True)
class ExtraAccountMeta:
    """One entry of a validation account: how to find one extra account, and its flags.

    discriminator 0: address_config is the pubkey; 1: a PDA of the hook program from the
    packed seeds; 2: a pubkey read from instruction or account data; 128 + i: a PDA, from
    the packed seeds, of the program whose key is Execute account i."""

    discriminator: int
    address_config: bytes
    is_signer: bool
    is_writable: bool

    def __post_init__(self) -> None:
        if len(self.address_config) != 32:
            raise ValueError("an address_config is 32 bytes")
        d = self.discriminator
        if d == 1 or d >= 128:
            unpack_seeds(self.address_config)
        elif d == 2:
            _unpack_pubkey_data(self.address_config)
        elif d != 0:
            raise ValueError(f"unknown extra-account-meta discriminator {d}")

    @classmethod
    def fixed(
        cls, key: Pubkey, *, signer: bool = False, writable: bool = False
    ) -> ExtraAccountMeta:
        return cls(0, bytes(key), signer, writable)

    @classmethod
    def pda(
        cls, seeds: Sequence[Seed], *, signer: bool = False, writable: bool = False
    ) -> ExtraAccountMeta:
        """A PDA of the hook program itself."""
        return cls(1, pack_seeds(seeds), signer, writable)

    @classmethod
    def external_pda(
        cls,
        program_index: int,
        seeds: Sequence[Seed],
        *,
        signer: bool = False,
        writable: bool = False,
    ) -> ExtraAccountMeta:
        """A PDA of the program whose key is Execute account `program_index`."""
        if not 0 <= program_index < 128:
            raise ValueError(f"program index {program_index} is outside 0..127")
        return cls(128 + program_index, pack_seeds(seeds), signer, writable)

    @classmethod
    def from_pubkey_data(
        cls, key_data: PubkeyData, *, signer: bool = False, writable: bool = False
    ) -> ExtraAccountMeta:
        if isinstance(key_data, KeyFromInstructionData):
            config = bytes([1, key_data.index])
        else:
            config = bytes([2, key_data.account_index, key_data.data_index])
        return cls(2, config.ljust(32, b"\x00"), signer, writable)

    @classmethod
    def from_bytes(cls, raw: bytes) -> ExtraAccountMeta:
        if len(raw) != EXTRA_ACCOUNT_META_LEN:
            raise ValueError(f"an ExtraAccountMeta is {EXTRA_ACCOUNT_META_LEN} bytes")
        return cls(raw[0], bytes(raw[1:33]), raw[33] != 0, raw[34] != 0)

    def __bytes__(self) -> bytes:
        return (
            bytes([self.discriminator])
            + self.address_config
            + bytes([self.is_signer, self.is_writable])
        )


def pack_extra_account_metas(metas: Sequence[ExtraAccountMeta]) -> bytes:
    """Validation-account data listing `metas` for Execute: discriminator, u32 length, then
    a list (u32 count, entries), as ExtraAccountMetaList::init writes it."""
    value = struct.pack("<I", len(metas)) + b"".join(bytes(m) for m in metas)
    return EXECUTE_DISCRIMINATOR + struct.pack("<I", len(value)) + value


def _execute_entry(data: bytes) -> bytes:
    """The value of the TLV entry for Execute (8-byte discriminator, u32 length, value)."""
    at = 0
    while at < len(data):
        if len(data) - at < 12:
            raise ValueError(f"validation data is truncated at offset {at}")
        discriminator = data[at : at + 8]
        if discriminator == bytes(8):
            break
        end = at + 12 + _u32(data, at + 8)
        if end > len(data):
            raise ValueError(f"validation entry at offset {at} runs past the data")
        if discriminator == EXECUTE_DISCRIMINATOR:
            return data[at + 12 : end]
        at = end
    raise ValueError("validation data has no entry for the Execute instruction")


def parse_extra_account_metas(data: bytes | None) -> list[ExtraAccountMeta]:
    """The extra accounts a validation account lists for Execute; none for a missing or
    empty account. ValueError for anything malformed."""
    if not data:
        return []
    value = _execute_entry(data)
    if len(value) < 4 or (len(value) - 4) % EXTRA_ACCOUNT_META_LEN:
        raise ValueError(f"an Execute entry of {len(value)} bytes is not a list of metas")
    count = _u32(value, 0)
    if count > (len(value) - 4) // EXTRA_ACCOUNT_META_LEN:
        raise ValueError(f"the Execute entry claims {count} metas, more than it holds")
    size = EXTRA_ACCOUNT_META_LEN
    return [
        ExtraAccountMeta.from_bytes(value[4 + i * size : 4 + (i + 1) * size]) for i in range(count)
    ]


class _Accounts:
    """The Execute accounts resolved so far, with their data fetched once, on demand."""

    def __init__(self, keys: list[Pubkey], fetch: Callable[[Pubkey], bytes | None]) -> None:
        self.keys = keys
        self._fetch = fetch
        self._data: dict[Pubkey, bytes | None] = {}

    def key(self, index: int) -> Pubkey:
        if index >= len(self.keys):
            raise ValueError(f"extra account refers to account {index}, not yet resolved")
        return self.keys[index]

    def data(self, index: int, start: int, length: int) -> bytes:
        key = self.key(index)
        if key not in self._data:
            self._data[key] = self._fetch(key)
        data = self._data[key]
        if data is None:
            raise ValueError(f"extra account needs the data of {key}, which does not exist")
        if len(data) < start + length:
            raise ValueError(f"the data of {key} is too short for bytes {start}..{start + length}")
        return data[start : start + length]


def _seed_value(seed: Seed, ix_data: bytes, accounts: _Accounts) -> bytes:
    if isinstance(seed, SeedLiteral):
        return seed.value
    if isinstance(seed, SeedInstructionData):
        if seed.index + seed.length > len(ix_data):
            raise ValueError("a seed reads past the Execute instruction data")
        return ix_data[seed.index : seed.index + seed.length]
    if isinstance(seed, SeedAccountKey):
        return bytes(accounts.key(seed.index))
    return accounts.data(seed.account_index, seed.data_index, seed.length)


def _pda(seeds: list[Seed], program: Pubkey, ix_data: bytes, accounts: _Accounts) -> Pubkey:
    values = [_seed_value(s, ix_data, accounts) for s in seeds]
    if len(values) > MAX_PDA_SEEDS or any(len(v) > MAX_SEED_LEN for v in values):
        raise ValueError("extra account seeds exceed a PDA's limits (15 seeds of 32 bytes)")
    return Pubkey.find_program_address(values, program)[0]


def _resolve_key(
    meta: ExtraAccountMeta, hook_program: Pubkey, ix_data: bytes, accounts: _Accounts
) -> Pubkey:
    d = meta.discriminator
    if d == 0:
        return Pubkey.from_bytes(meta.address_config)
    if d == 1:
        return _pda(unpack_seeds(meta.address_config), hook_program, ix_data, accounts)
    if d >= 128:
        program = accounts.key(d - 128)
        return _pda(unpack_seeds(meta.address_config), program, ix_data, accounts)
    key_data = _unpack_pubkey_data(meta.address_config)
    if isinstance(key_data, KeyFromInstructionData):
        if key_data.index + PUBKEY_LEN > len(ix_data):
            raise ValueError("a pubkey reads past the Execute instruction data")
        return Pubkey.from_bytes(ix_data[key_data.index : key_data.index + PUBKEY_LEN])
    return Pubkey.from_bytes(accounts.data(key_data.account_index, key_data.data_index, PUBKEY_LEN))


def resolve_extra_accounts(
    hook_program: Pubkey,
    metas: Sequence[ExtraAccountMeta],
    *,
    source: Pubkey,
    mint: Pubkey,
    destination: Pubkey,
    authority: Pubkey,
    amount: int,
    account_data: Callable[[Pubkey], bytes | None],
) -> list[AccountMeta]:
    """The accounts to append to a transfer of a hooked mint (or to an instruction that
    forwards them to Token-2022 in a CPI): the resolved extras, then the hook program and
    the validation account, both read-only.

    Resolved against the Execute instruction Token-2022 builds (accounts source, mint,
    destination, authority, validation, then each extra in turn, so later metas may refer
    to earlier ones; data = discriminator + amount). As spl-transfer-hook-interface's
    offchain helper does, an extra is never a signer (Token-2022 invokes the hook without
    signer privileges, so a signer flag could only demand a signature the hook cannot
    use), and is read-only when it repeats a read-only Execute account.
    `account_data(key)` returns an account's data, None when it does not exist."""
    validation = validation_address(hook_program, mint)
    ix_data = EXECUTE_DISCRIMINATOR + _check_u64(amount, "amount").to_bytes(8, "little")
    accounts = _Accounts([source, mint, destination, authority, validation], account_data)
    writable = [False] * EXECUTE_ACCOUNTS
    extras: list[AccountMeta] = []
    for meta in metas:
        key = _resolve_key(meta, hook_program, ix_data, accounts)
        seen = [w for k, w in zip(accounts.keys, writable, strict=True) if k == key]
        is_writable = meta.is_writable and (not seen or any(seen))
        extras.append(AccountMeta(key, is_signer=False, is_writable=is_writable))
        accounts.keys.append(key)
        writable.append(is_writable)
    return [
        *extras,
        AccountMeta(hook_program, is_signer=False, is_writable=False),
        AccountMeta(validation, is_signer=False, is_writable=False),
    ]


def transfer_hook_accounts(
    mint: MintInfo,
    *,
    mint_address: Pubkey,
    source: Pubkey,
    destination: Pubkey,
    authority: Pubkey,
    amount: int,
    account_data: Callable[[Pubkey], bytes | None],
) -> list[AccountMeta]:
    """Everything a transfer of `mint` must append for its transfer hook: nothing without
    one, else its validation account's extras (fetched through `account_data`), the hook
    program and the validation account."""
    hook = mint.hook_program
    if hook is None:
        return []
    metas = parse_extra_account_metas(account_data(validation_address(hook, mint_address)))
    return resolve_extra_accounts(
        hook,
        metas,
        source=source,
        mint=mint_address,
        destination=destination,
        authority=authority,
        amount=amount,
        account_data=account_data,
    )


# -- one-time payments in a mint (docs/adr/0031) ------------------------------------------
@dataclass(frozen=True)
class MintAtEpoch:
    """What a one-time payment in a mint reckons with now: the token program that moves it,
    the transfer-fee schedule in force this epoch (None: the mint has no TransferFeeConfig)
    and its transfer-hook program (None: none). `MintInfo.at(epoch)` makes one; the
    payment checks take it as given (pure), the facilitator and the gate read it over RPC
    (`svcpay.protocol.mints`) for Token-2022 mints only."""

    program: Pubkey
    fee: TransferFee | None = None
    hook_program: Pubkey | None = None

    @property
    def has_fee(self) -> bool:
        """The mint has a TransferFeeConfig: a payment is judged by what it nets."""
        return self.fee is not None

    def fee_for(self, amount: int) -> int:
        """What Token-2022 withholds from a transfer of `amount` now (in the destination)."""
        return 0 if self.fee is None else self.fee.fee(amount)

    def received(self, amount: int) -> int:
        """What the recipient of a transfer of `amount` receives now."""
        return amount - self.fee_for(amount)

    def gross_for_net(self, net: int) -> int:
        """The smallest transfer whose recipient receives `net` now (what a payer sends so
        the payee gets the price)."""
        return net if self.fee is None else self.fee.gross_for_net(net)


def shortfall(mint: MintAtEpoch, paid: int, price: int) -> str | None:
    """None when a transfer of `paid` leaves its recipient at least `price` now; else what
    happens to it, for a refusal: "of which the fee withholds F: N arrives, short of P (send
    G)"."""
    fee = mint.fee_for(paid)
    if paid - fee >= price:
        return None
    try:
        send = str(mint.gross_for_net(price))
    except ValueError:
        send = "more than a u64 can hold"
    return (
        f"of which the mint's transfer fee withholds {fee}: {paid - fee} arrives, short of "
        f"{price} (send {send})"
    )


TRANSFER_CHECKED_ACCOUNTS = 4  # source, mint, destination, authority


@lru_cache(maxsize=1024)  # a PDA search; a gate or facilitator sees a few hooked mints
def _validation_of(hook_program: Pubkey, mint: Pubkey) -> Pubkey:
    return validation_address(hook_program, mint)


def transfer_accounts_problem(
    accounts: Sequence[Pubkey], mint: Pubkey, terms: MintAtEpoch | None
) -> str | None:
    """Why the accounts of a payment's TransferChecked of `mint` are not acceptable, or None.

    They are source, mint, destination and authority. A transfer of a mint with a transfer
    hook (`terms.hook_program`) goes on with the hook's extra accounts, ending with the hook
    program and its validation account, as `transfer_hook_accounts` resolves them: Token-2022
    checks the extras against the hook's ExtraAccountMetaList (one it cannot find fails the
    transfer) and passes the hook only those the list names. Any other account past the
    fourth is refused: SPL Token and Token-2022 read those as multisig signers."""
    if len(accounts) < TRANSFER_CHECKED_ACCOUNTS:
        return "a TransferChecked names source, mint, destination and authority"
    extra = accounts[TRANSFER_CHECKED_ACCOUNTS:]
    if not extra:
        return None
    hook = None if terms is None else terms.hook_program
    if hook is None:
        return (
            f"the TransferChecked carries {len(extra)} accounts past its four; only a "
            "transfer-hook mint's transfer may (its hook's accounts)"
        )
    validation = _validation_of(hook, mint)
    if len(extra) < 2 or extra[-2] != hook or extra[-1] != validation:
        return (
            f"a transfer of {mint} ends its accounts with the hook program {hook} and its "
            f"validation account {validation}, and carries nothing else"
        )
    return None


def names_token_2022(tx: VersionedTransaction) -> bool:
    """Whether an instruction of `tx` is Token-2022's: the one case in which a payment check
    needs the mint (SPL Token mints have no fee and no hook, so no RPC call for them)."""
    msg = tx.message
    keys = msg.account_keys
    return any(
        ix.program_id_index < len(keys) and keys[ix.program_id_index] == TOKEN_2022_PROGRAM
        for ix in msg.instructions
    )
