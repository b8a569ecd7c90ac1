//! Reading SPL Token and Token-2022 accounts in place. Both programs share the base layout
//! (a mint's first 82 bytes, a token account's first 165); Token-2022 appends an account type
//! byte and TLV extensions. The program reads what it needs from the bytes instead of
//! deserializing whole accounts: cheaper for SPL Token, and no extension parser on chain.
use anchor_lang::prelude::*;

use crate::errors::BillingError;

const MINT_LEN: usize = 82;
const ACCOUNT_LEN: usize = 165;
/// Token-2022 tags a longer account after the base layout: 1 mint, 2 token account.
const ACCOUNT_TYPE_MINT: u8 = 1;
const ACCOUNT_TYPE_ACCOUNT: u8 = 2;
const STATE_INITIALIZED: u8 = 1;
const STATE_FROZEN: u8 = 2;

/// Token-2022 extension types (spl-token-2022-interface's `ExtensionType`) the program acts on.
pub mod ext {
    pub const CONFIDENTIAL_TRANSFER_ACCOUNT: u16 = 5;
    pub const MEMO_TRANSFER: u16 = 8;
    pub const NON_TRANSFERABLE: u16 = 9;
    pub const CPI_GUARD: u16 = 11;
    pub const PAUSABLE: u16 = 26;
    /// The newest type the program knows (PermissionedBurn); a mint with a later one is
    /// refused at `create_plan` until someone has looked at what it does to payments.
    pub const LAST_KNOWN: u16 = 28;
}

pub struct TokenAccountView {
    pub mint: Pubkey,
    pub owner: Pubkey,
    pub amount: u64,
    pub delegate: Option<Pubkey>,
    pub delegated_amount: u64,
    pub frozen: bool,
}

fn key(d: &[u8], at: usize) -> Pubkey {
    Pubkey::new_from_array(d[at..at + 32].try_into().unwrap())
}

fn u64_at(d: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(d[at..at + 8].try_into().unwrap())
}

/// The token account `info`, owned by `token_program` and initialized (frozen or not).
pub fn read_token_account(info: &AccountInfo, token_program: &Pubkey) -> Result<TokenAccountView> {
    require_keys_eq!(
        *info.owner,
        *token_program,
        BillingError::TokenAccountMismatch
    );
    let d = info.try_borrow_data()?;
    let tagged = d.len() == ACCOUNT_LEN || d.get(ACCOUNT_LEN) == Some(&ACCOUNT_TYPE_ACCOUNT);
    require!(
        d.len() >= ACCOUNT_LEN && tagged && (d[108] == STATE_INITIALIZED || d[108] == STATE_FROZEN),
        BillingError::TokenAccountMismatch
    );
    let delegate = (d[72..76] == [1, 0, 0, 0]).then(|| key(&d, 76));
    Ok(TokenAccountView {
        mint: key(&d, 0),
        owner: key(&d, 32),
        amount: u64_at(&d, 64),
        delegate,
        delegated_amount: u64_at(&d, 121),
        frozen: d[108] == STATE_FROZEN,
    })
}

/// The token account `info`, owned by `token_program`, initialized and not frozen.
pub fn token_account(info: &AccountInfo, token_program: &Pubkey) -> Result<TokenAccountView> {
    let view = read_token_account(info, token_program)?;
    require!(!view.frozen, BillingError::TokenAccountMismatch);
    Ok(view)
}

/// `ConfidentialTransferAccount.allow_non_confidential_credits`: after approved (1), the
/// ElGamal key (32), three ciphertexts (64 each) and the decryptable balance (36), and
/// `allow_confidential_credits` (1).
const ALLOW_NON_CONFIDENTIAL_CREDITS: usize = 262;

/// Whether `info` takes a plain transfer of `mint` from this program: a token account of
/// `mint` owned by `token_program`, not frozen, not requiring a memo, not refusing
/// non-confidential credits. What its owner or the mint's freeze authority can turn off at
/// will; `close_session` leaves a recipient's due in the vault rather than fail on it.
pub fn can_receive(info: &AccountInfo, mint: &Pubkey, token_program: &Pubkey) -> bool {
    if info.owner != token_program {
        return false;
    }
    let Ok(d) = info.try_borrow_data() else {
        return false;
    };
    let tagged = d.len() == ACCOUNT_LEN || d.get(ACCOUNT_LEN) == Some(&ACCOUNT_TYPE_ACCOUNT);
    if d.len() < ACCOUNT_LEN || !tagged || d[108] != STATE_INITIALIZED || key(&d, 0) != *mint {
        return false;
    }
    let refuses = extensions(&d).any(|(kind, value)| match kind {
        ext::MEMO_TRANSFER => value.first() == Some(&1),
        ext::CONFIDENTIAL_TRANSFER_ACCOUNT => value.get(ALLOW_NON_CONFIDENTIAL_CREDITS) == Some(&0),
        _ => false,
    });
    !refuses
}

/// The balance of a token account already checked (or about to be checked by a transfer).
pub fn amount(info: &AccountInfo) -> Result<u64> {
    let d = info.try_borrow_data()?;
    require!(d.len() >= ACCOUNT_LEN, BillingError::TokenAccountMismatch);
    Ok(u64_at(&d, 64))
}

/// The decimals of the mint `info`, owned by `token_program` and initialized.
pub fn mint_decimals(info: &AccountInfo, token_program: &Pubkey) -> Result<u8> {
    require_keys_eq!(*info.owner, *token_program, BillingError::MintMismatch);
    let d = info.try_borrow_data()?;
    let tagged =
        d.len() == MINT_LEN || (d.len() > ACCOUNT_LEN && d[ACCOUNT_LEN] == ACCOUNT_TYPE_MINT);
    require!(
        d.len() >= MINT_LEN && tagged && d[45] == 1,
        BillingError::MintMismatch
    );
    Ok(d[44])
}

/// The Token-2022 extensions of an account's data, in order: `(type, value)`. Empty for an
/// account of the base length (every SPL Token account). Stops at the first malformed entry,
/// which `extensions_well_formed` reports.
pub fn extensions(d: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    let mut at = if d.len() > ACCOUNT_LEN {
        ACCOUNT_LEN + 1
    } else {
        d.len()
    };
    core::iter::from_fn(move || {
        let header = d.get(at..at + 4)?;
        let kind = u16::from_le_bytes([header[0], header[1]]);
        let len = u16::from_le_bytes([header[2], header[3]]) as usize;
        if kind == 0 {
            return None; // uninitialized space: the end of the list
        }
        let value = d.get(at + 4..at + 4 + len)?;
        at += 4 + len;
        Some((kind, value))
    })
}

/// The value of extension `kind` in `d`, if present.
pub fn extension(d: &[u8], kind: u16) -> Option<&[u8]> {
    extensions(d).find(|(k, _)| *k == kind).map(|(_, v)| v)
}

/// Whether the mint `d` (Token-2022) is paused (the Pausable extension: authority, paused).
pub fn mint_paused(d: &[u8]) -> bool {
    extension(d, ext::PAUSABLE).is_some_and(|v| v.get(32) == Some(&1))
}
