"""What a Token-2022 mint or token account carries, from its raw data: the typed extension
values (transfer hook, pausable, interest-bearing), `MintInfo` and `TokenAccountInfo` (and
their readers `mint_info`, `token_account_info`), and the space a mint or account with given
extensions needs."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from solders.pubkey import Pubkey

from svcpay.protocol.programs import TOKEN_PROGRAM, TOKEN_PROGRAMS
from svcpay.protocol.token2022.fees import MintAtEpoch, TransferFeeConfig
from svcpay.protocol.token2022.layout import (
    _REQUIRED_ACCOUNT_EXTENSIONS,
    ACCOUNT_LEN,
    ET,
    EXTENSION_SIZES,
    MINT_LEN,
    MULTISIG_LEN,
    TLV_OFFSET,
    AccountState,
    AccountType,
    Extensions,
    ExtensionType,
    _coption_pubkey,
    _i16,
    _i64,
    _maybe_pubkey,
    _sized,
    _u64,
    account_type,
    extensions,
)


# -- typed extension values ---------------------------------------------------------------
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
