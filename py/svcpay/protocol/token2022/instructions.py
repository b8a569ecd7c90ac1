"""Token-2022 instructions that set up and operate extended mints and accounts: initialising
each extension, pausing, memo and CPI-guard toggles, reallocation, and
`create_mint_instructions` (a whole extended mint in one transaction)."""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from enum import IntEnum

from solders.instruction import AccountMeta, Instruction
from solders.pubkey import Pubkey
from solders.system_program import ID as SYSTEM_PROGRAM
from solders.system_program import CreateAccountParams, create_account

from svcpay.protocol.programs import TOKEN_2022_PROGRAM
from svcpay.protocol.token2022.layout import (
    ET,
    MAX_FEE_BASIS_POINTS,
    PUBKEY_LEN,
    AccountState,
    ExtensionType,
    _check_u64,
)
from svcpay.protocol.token2022.state import mint_space


# -- instructions -------------------------------------------------------------------------
class TokenInstruction(IntEnum):
    """The Token-2022 instruction tags used here (the first data byte)."""

    INITIALIZE_MINT2 = 20
    INITIALIZE_MINT_CLOSE_AUTHORITY = 25
    TRANSFER_FEE_EXTENSION = 26
    CONFIDENTIAL_TRANSFER_EXTENSION = 27
    DEFAULT_ACCOUNT_STATE_EXTENSION = 28
    REALLOCATE = 29
    MEMO_TRANSFER_EXTENSION = 30
    INITIALIZE_NON_TRANSFERABLE_MINT = 32
    CPI_GUARD_EXTENSION = 34
    INTEREST_BEARING_MINT_EXTENSION = 33
    INITIALIZE_PERMANENT_DELEGATE = 35
    TRANSFER_HOOK_EXTENSION = 36
    SCALED_UI_AMOUNT_EXTENSION = 43
    PAUSABLE_EXTENSION = 44


# Sub-instruction numbers (the second data byte) of the extension families above.
TRANSFER_FEE_INITIALIZE, TRANSFER_FEE_SET = 0, 5
# DefaultAccountState, InterestBearing, TransferHook, ConfidentialTransfer, ScaledUiAmount
SUB_INITIALIZE, SUB_UPDATE = 0, 1
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


def initialize_confidential_transfer_mint(
    mint: Pubkey, authority: Pubkey | None, *, auto_approve: bool = True
) -> Instruction:
    """ConfidentialTransfer InitializeMint (27/0): authority (32 bytes, zero for none),
    whether new accounts are approved at once (a bool byte), no auditor (32 zero bytes).
    Public balances and `transfer_checked` work as on any mint; an account takes
    confidential credits only once it is configured for them."""
    data = bytes([TokenInstruction.CONFIDENTIAL_TRANSFER_EXTENSION, SUB_INITIALIZE])
    return _on_mint(mint, data + _maybe_arg(authority) + bytes([auto_approve]) + bytes(32))


def initialize_scaled_ui_amount(
    mint: Pubkey, authority: Pubkey | None, multiplier: float
) -> Instruction:
    """ScaledUiAmount Initialize (43/0): authority (32 bytes, zero for none), multiplier
    (f64): what wallets show is the raw amount times it; transfers move raw amounts."""
    if not multiplier > 0 or multiplier == float("inf"):
        raise ValueError(f"a scaled UI amount's multiplier must be positive, got {multiplier}")
    data = bytes([TokenInstruction.SCALED_UI_AMOUNT_EXTENSION, SUB_INITIALIZE])
    return _on_mint(mint, data + _maybe_arg(authority) + struct.pack("<d", multiplier))


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
    confidential_transfers: bool = False,
    scaled_ui_multiplier: float | None = None,
    close_authority: Pubkey | None = None,
    freeze_authority: Pubkey | None = None,
    rent_lamports: int | Callable[[int], int],
) -> list[Instruction]:
    """A Token-2022 mint's creation, in order: create_account (payer and mint sign), the
    extension initializers, InitializeMint2. The mint authority also holds every extension
    authority (fee config and withheld withdrawal, hook, pause, interest rate, confidential
    transfers, UI multiplier).

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
    if confidential_transfers:
        ix = initialize_confidential_transfer_mint(mint, mint_authority)
        inits.append((ET.CONFIDENTIAL_TRANSFER_MINT, ix))
    if scaled_ui_multiplier is not None:
        ix = initialize_scaled_ui_amount(mint, mint_authority, scaled_ui_multiplier)
        inits.append((ET.SCALED_UI_AMOUNT, ix))
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
