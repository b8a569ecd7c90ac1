use anchor_lang::prelude::*;
use anchor_spl::token_interface::TokenInterface;

use crate::errors::BillingError;
use crate::events::SessionToppedUp;
use crate::state::{Session, SessionStatus};
use crate::token_view;
use crate::transfer::Transfer;

/// Adds to an open session's deposit (payer), and optionally extends its expiry.
#[derive(Accounts)]
pub struct TopUpSession<'info> {
    pub payer: Signer<'info>,

    #[account(mut, has_one = payer @ BillingError::Unauthorized)]
    pub session: Account<'info, Session>,

    /// CHECK: fixed by `address` to the session's vault; `transfer_checked` checks it is a
    /// token account of the mint.
    #[account(mut, address = session.vault @ BillingError::TokenAccountMismatch)]
    pub vault: UncheckedAccount<'info>,

    /// CHECK: fixed by `address` to the session's mint; `transfer_checked` checks it.
    #[account(address = session.mint @ BillingError::MintMismatch)]
    pub mint: UncheckedAccount<'info>,

    /// CHECK: the payer's token account, read in place (`validate`: owned by the payer;
    /// `transfer_checked` checks its mint and balance).
    #[account(
        mut,
        constraint = payer_token.key() != vault.key() @ BillingError::DuplicateAccount,
    )]
    pub payer_token: UncheckedAccount<'info>,

    #[account(address = session.token_program @ BillingError::MintMismatch)]
    pub token_program: Interface<'info, TokenInterface>,
}

impl TopUpSession<'_> {
    pub fn validate(&self, amount: u64, expires_at: Option<i64>) -> Result<()> {
        require!(amount > 0, BillingError::ZeroAmount);
        require!(
            self.session.status == SessionStatus::Open,
            BillingError::SessionNotOpen
        );
        if let Some(t) = expires_at {
            require!(t >= self.session.expires_at, BillingError::InvalidExpiry);
        }
        let source = token_view::token_account(&self.payer_token, &self.session.token_program)?;
        require_keys_eq!(
            source.owner,
            self.payer.key(),
            BillingError::TokenAccountMismatch
        );
        require!(source.amount >= amount, BillingError::InsufficientFunds);
        Ok(())
    }

    pub fn handler<'info>(
        ctx: Context<'info, TopUpSession<'info>>,
        amount: u64,
        expires_at: Option<i64>,
    ) -> Result<()> {
        let a = ctx.accounts;
        // What the vault received: a transfer-fee mint withholds its fee there.
        let moved = Transfer {
            token_program: &a.token_program.to_account_info(),
            source: &a.payer_token.to_account_info(),
            mint: &a.mint.to_account_info(),
            destination: &a.vault.to_account_info(),
            authority: &a.payer.to_account_info(),
            extra: ctx.remaining_accounts,
        }
        .run(amount, a.session.decimals, &[])?;
        let s = &mut a.session;
        s.deposit = s
            .deposit
            .checked_add(moved.net())
            .ok_or(BillingError::MathOverflow)?;
        if let Some(t) = expires_at {
            s.expires_at = t;
        }
        emit!(SessionToppedUp {
            session: s.key(),
            amount: moved.net(),
            fee: moved.fee,
            deposit: s.deposit,
            expires_at: s.expires_at,
        });
        Ok(())
    }
}
