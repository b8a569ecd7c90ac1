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

By concern, each module importing only those before it: `layout` (base lengths, extension
numbers, TLV parsing), `fees` (transfer-fee arithmetic, `MintAtEpoch`, `shortfall`), `state`
(`MintInfo`, `TokenAccountInfo`, account sizes), `instructions` (creating and operating
extended mints and accounts), `hooks` (transfer-hook extra accounts and what a payment's
transfer may carry). Every public name is importable from here, as it was from the single
module this package replaced.

Part of `svcpay.protocol` (layer 1, docs/adr/0041): it imports only `svcpay.protocol.programs`
and solders; the program client, the schemes, the facilitator, the gate, the drop-in
validator and the CLI import it.
"""

from __future__ import annotations

from svcpay.protocol.token2022.fees import (
    MintAtEpoch,
    TransferFee,
    TransferFeeConfig,
    shortfall,
)
from svcpay.protocol.token2022.hooks import (
    EXECUTE_ACCOUNTS,
    EXECUTE_DISCRIMINATOR,
    EXTRA_ACCOUNT_META_LEN,
    EXTRA_ACCOUNT_METAS_SEED,
    MAX_PDA_SEEDS,
    MAX_SEED_LEN,
    TRANSFER_CHECKED_ACCOUNTS,
    ExtraAccountMeta,
    KeyFromAccountData,
    KeyFromInstructionData,
    PubkeyData,
    Seed,
    SeedAccountData,
    SeedAccountKey,
    SeedInstructionData,
    SeedLiteral,
    names_token_2022,
    pack_extra_account_metas,
    pack_seeds,
    parse_extra_account_metas,
    resolve_extra_accounts,
    transfer_accounts_problem,
    transfer_hook_accounts,
    unpack_seeds,
    validation_address,
)
from svcpay.protocol.token2022.instructions import (
    TokenInstruction,
    create_mint_instructions,
    disable_cpi_guard,
    disable_required_memo_transfers,
    enable_cpi_guard,
    enable_required_memo_transfers,
    initialize_confidential_transfer_mint,
    initialize_default_account_state,
    initialize_interest_bearing_mint,
    initialize_mint2,
    initialize_mint_close_authority,
    initialize_non_transferable_mint,
    initialize_pausable,
    initialize_permanent_delegate,
    initialize_scaled_ui_amount,
    initialize_transfer_fee_config,
    initialize_transfer_hook,
    pause,
    reallocate,
    resume,
    set_transfer_fee,
    update_transfer_hook,
)
from svcpay.protocol.token2022.layout import (
    ACCOUNT_LEN,
    ACCOUNT_TYPE_OFFSET,
    ET,
    EXTENSION_SIZES,
    MAX_FEE_BASIS_POINTS,
    MINT_LEN,
    MULTISIG_LEN,
    PUBKEY_LEN,
    TLV_OFFSET,
    U64_MAX,
    AccountState,
    AccountType,
    Extensions,
    ExtensionType,
    account_type,
    extensions,
)
from svcpay.protocol.token2022.state import (
    InterestBearingConfig,
    MintInfo,
    PausableConfig,
    TokenAccountInfo,
    TransferHookConfig,
    account_space,
    mint_info,
    mint_space,
    required_account_extensions,
    token_account_info,
)

__all__ = [
    "ACCOUNT_LEN",
    "ACCOUNT_TYPE_OFFSET",
    "AccountState",
    "AccountType",
    "ET",
    "EXECUTE_ACCOUNTS",
    "EXECUTE_DISCRIMINATOR",
    "EXTENSION_SIZES",
    "EXTRA_ACCOUNT_METAS_SEED",
    "EXTRA_ACCOUNT_META_LEN",
    "ExtensionType",
    "Extensions",
    "ExtraAccountMeta",
    "InterestBearingConfig",
    "KeyFromAccountData",
    "KeyFromInstructionData",
    "MAX_FEE_BASIS_POINTS",
    "MAX_PDA_SEEDS",
    "MAX_SEED_LEN",
    "MINT_LEN",
    "MULTISIG_LEN",
    "MintAtEpoch",
    "MintInfo",
    "PUBKEY_LEN",
    "PausableConfig",
    "PubkeyData",
    "Seed",
    "SeedAccountData",
    "SeedAccountKey",
    "SeedInstructionData",
    "SeedLiteral",
    "TLV_OFFSET",
    "TRANSFER_CHECKED_ACCOUNTS",
    "TokenAccountInfo",
    "TokenInstruction",
    "TransferFee",
    "TransferFeeConfig",
    "TransferHookConfig",
    "U64_MAX",
    "account_space",
    "account_type",
    "create_mint_instructions",
    "disable_cpi_guard",
    "disable_required_memo_transfers",
    "enable_cpi_guard",
    "enable_required_memo_transfers",
    "extensions",
    "initialize_default_account_state",
    "initialize_confidential_transfer_mint",
    "initialize_interest_bearing_mint",
    "initialize_mint2",
    "initialize_mint_close_authority",
    "initialize_non_transferable_mint",
    "initialize_pausable",
    "initialize_scaled_ui_amount",
    "initialize_permanent_delegate",
    "initialize_transfer_fee_config",
    "initialize_transfer_hook",
    "mint_info",
    "mint_space",
    "names_token_2022",
    "pack_extra_account_metas",
    "pack_seeds",
    "parse_extra_account_metas",
    "pause",
    "reallocate",
    "required_account_extensions",
    "resolve_extra_accounts",
    "resume",
    "set_transfer_fee",
    "shortfall",
    "token_account_info",
    "transfer_accounts_problem",
    "transfer_hook_accounts",
    "unpack_seeds",
    "update_transfer_hook",
    "validation_address",
]
