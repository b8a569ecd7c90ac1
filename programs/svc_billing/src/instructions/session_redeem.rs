use anchor_lang::compat::solana_instructions_sysvar::ID as INSTRUCTIONS_SYSVAR;
use anchor_lang::prelude::*;

use crate::errors::BillingError;
use crate::events::SessionRedeemed;
use crate::state::{Session, SessionStatus};
use crate::{transfer, voucher};

#[derive(AnchorSerialize, AnchorDeserialize, Clone, Debug)]
pub struct RedeemArgs {
    /// The voucher's cumulative amount, base units.
    pub cumulative: u64,
    /// The voucher's expiry, unix seconds; 0 for none.
    pub expiry: i64,
    /// Index in this transaction of the Ed25519 precompile instruction that verifies the
    /// voucher (one precompile instruction may carry the vouchers of several sessions).
    pub ed25519_index: u16,
}

/// Pays the provider the difference between a voucher's cumulative amount and what was
/// already redeemed. Anyone may send it: the money goes only to the session's recipient,
/// and only as far as the payer's own signature allows. Several sessions may be redeemed
/// in one transaction; a second redeem of one session in it finds nothing newer.
#[derive(Accounts)]
pub struct RedeemSession<'info> {
    #[account(mut, constraint = session.status != SessionStatus::Closed @ BillingError::SessionClosed)]
    pub session: Account<'info, Session>,

    /// CHECK: fixed by `address` to the session's vault; `transfer_checked` checks its
    /// mint and balance.
    #[account(mut, address = session.vault @ BillingError::TokenAccountMismatch)]
    pub vault: UncheckedAccount<'info>,

    /// CHECK: fixed by `address` to the session's recipient; `transfer_checked` checks it
    /// is a token account of the mint.
    #[account(mut, address = session.recipient @ BillingError::DestinationMismatch)]
    pub recipient: UncheckedAccount<'info>,

    /// CHECK: fixed by `address` to the session's mint; `transfer_checked` checks it against
    /// both token accounts and the decimals.
    #[account(address = session.mint @ BillingError::MintMismatch)]
    pub mint: UncheckedAccount<'info>,

    /// CHECK: fixed by `address` to the instructions sysvar, read for the voucher's
    /// signature (voucher::require_signed).
    #[account(address = INSTRUCTIONS_SYSVAR)]
    pub instructions: UncheckedAccount<'info>,

    /// CHECK: fixed by `address` to the token program of the session's mint.
    #[account(address = session.token_program @ BillingError::MintMismatch)]
    pub token_program: UncheckedAccount<'info>,
}

impl RedeemSession<'_> {
    pub fn validate(&self, args: &RedeemArgs) -> Result<()> {
        if args.expiry != 0 {
            let now = Clock::get()?.unix_timestamp;
            require!(now <= args.expiry, BillingError::VoucherExpired);
        }
        let message = voucher::message(&self.session.key(), args.cumulative, args.expiry);
        voucher::require_signed(
            &self.instructions,
            args.ed25519_index,
            &self.session.signer,
            &message,
        )
    }

    pub fn handler(ctx: Context<Self>, args: RedeemArgs) -> Result<()> {
        let a = ctx.accounts;
        let amount = a.session.payout(args.cumulative)?;
        let s = &a.session;
        transfer::pay_from_vault(
            &a.token_program,
            &a.vault,
            &a.mint,
            &a.recipient,
            &s.to_account_info(),
            (&s.payer, s.session_id, s.bump),
            amount,
            s.decimals,
        )?;
        let s = &mut a.session;
        s.redeemed = args.cumulative;
        emit!(SessionRedeemed {
            session: s.key(),
            amount,
            cumulative: args.cumulative,
            deposit: s.deposit,
        });
        Ok(())
    }
}
