//! Moving a subscriber's tokens, and a session's escrow, under the program's rules. Every
//! pull and every payout goes through here.
use anchor_lang::prelude::*;
use anchor_spl::token::{self, TokenAccount, TransferChecked};
use anchor_spl::token_interface;

use crate::constants::{DELEGATE_SEED, SESSION_SEED};
use crate::errors::BillingError;

/// Refuses a pull the token program would refuse, with the program's own error: the
/// account must hold `amount` and still delegate at least `amount` to `delegate`.
pub fn check_can_pull(source: &TokenAccount, delegate: &Pubkey, amount: u64) -> Result<()> {
    require!(source.amount >= amount, BillingError::InsufficientFunds);
    let delegated = match source.delegate {
        anchor_lang::solana_program::program_option::COption::Some(d) if d == *delegate => {
            source.delegated_amount
        }
        _ => 0,
    };
    require!(delegated >= amount, BillingError::DelegationMissing);
    Ok(())
}

/// Whether `source` delegates at least half of all possible tokens to `delegate`, as the
/// `u64::MAX` approval of `subscribe` does until pulls have used up half of it.
pub fn delegates_everything(source: &TokenAccount, delegate: &Pubkey) -> bool {
    matches!(
        source.delegate,
        anchor_lang::solana_program::program_option::COption::Some(d) if d == *delegate
    ) && source.delegated_amount >= u64::MAX / 2
}

/// Transfers `amount` from the subscriber's `source` to `destination`, signed by the
/// subscriber's delegate PDA. Kept out of line so each handler's stack frame stays small
/// (the SBF stack frame is 4 KiB).
#[inline(never)]
#[allow(clippy::too_many_arguments)]
pub fn pull<'info>(
    token_program: &AccountInfo<'info>,
    source: &AccountInfo<'info>,
    mint: &AccountInfo<'info>,
    destination: &AccountInfo<'info>,
    delegate: &AccountInfo<'info>,
    subscriber: &Pubkey,
    delegate_bump: u8,
    amount: u64,
    decimals: u8,
) -> Result<()> {
    let bump = [delegate_bump];
    let seeds: &[&[u8]] = &[DELEGATE_SEED, subscriber.as_ref(), &bump];
    let signer = &[seeds];
    token::transfer_checked(
        CpiContext::new_with_signer(
            token_program.key(),
            TransferChecked {
                from: source.clone(),
                mint: mint.clone(),
                to: destination.clone(),
                authority: delegate.clone(),
            },
            signer,
        ),
        amount,
        decimals,
    )
}

/// Transfers `amount` from a session's vault to `destination`, signed by the session PDA
/// (`[SESSION_SEED, payer, session_id, bump]`), through SPL Token or Token-2022.
#[inline(never)]
#[allow(clippy::too_many_arguments)]
pub fn pay_from_vault<'info>(
    token_program: &AccountInfo<'info>,
    vault: &AccountInfo<'info>,
    mint: &AccountInfo<'info>,
    destination: &AccountInfo<'info>,
    session: &AccountInfo<'info>,
    seeds: (&Pubkey, u64, u8),
    amount: u64,
    decimals: u8,
) -> Result<()> {
    let (payer, session_id, bump) = seeds;
    let id = session_id.to_le_bytes();
    let bump = [bump];
    let seeds: &[&[u8]] = &[SESSION_SEED, payer.as_ref(), &id, &bump];
    token_interface::transfer_checked(
        CpiContext::new_with_signer(
            token_program.key(),
            token_interface::TransferChecked {
                from: vault.clone(),
                mint: mint.clone(),
                to: destination.clone(),
                authority: session.clone(),
            },
            &[seeds],
        ),
        amount,
        decimals,
    )
}
