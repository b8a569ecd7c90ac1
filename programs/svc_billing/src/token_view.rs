//! Reading SPL Token and Token-2022 accounts in place. Both programs share the base layout
//! (a mint's first 82 bytes, a token account's first 165), so the session instructions read
//! what they need from it instead of deserializing whole accounts, which keeps Token-2022's
//! extension parsing out of the program.
use anchor_lang::prelude::*;

use crate::errors::BillingError;

const MINT_LEN: usize = 82;
const ACCOUNT_LEN: usize = 165;
/// Token-2022 tags a longer account after the base layout: 1 mint, 2 token account.
const ACCOUNT_TYPE_ACCOUNT: u8 = 2;
const ACCOUNT_INITIALIZED: u8 = 1;

pub struct TokenAccountView {
    pub mint: Pubkey,
    pub owner: Pubkey,
    pub amount: u64,
}

/// The token account `info`, owned by `token_program` and initialized (not frozen).
pub fn token_account(info: &AccountInfo, token_program: &Pubkey) -> Result<TokenAccountView> {
    require_keys_eq!(
        *info.owner,
        *token_program,
        BillingError::TokenAccountMismatch
    );
    let d = info.try_borrow_data()?;
    let tagged = d.len() == ACCOUNT_LEN || d.get(ACCOUNT_LEN) == Some(&ACCOUNT_TYPE_ACCOUNT);
    require!(
        d.len() >= ACCOUNT_LEN && tagged && d[108] == ACCOUNT_INITIALIZED,
        BillingError::TokenAccountMismatch
    );
    let key = |at: usize| Pubkey::new_from_array(d[at..at + 32].try_into().unwrap());
    Ok(TokenAccountView {
        mint: key(0),
        owner: key(32),
        amount: u64::from_le_bytes(d[64..72].try_into().unwrap()),
    })
}

/// The decimals of the mint `info`, owned by `token_program` and initialized.
pub fn mint_decimals(info: &AccountInfo, token_program: &Pubkey) -> Result<u8> {
    require_keys_eq!(*info.owner, *token_program, BillingError::MintMismatch);
    let d = info.try_borrow_data()?;
    let tagged = d.len() == MINT_LEN || (d.len() > ACCOUNT_LEN && d[ACCOUNT_LEN] == 1);
    require!(
        d.len() >= MINT_LEN && tagged && d[45] == 1,
        BillingError::MintMismatch
    );
    Ok(d[44])
}
