use anchor_lang::compat::solana_instructions_sysvar::ID as INSTRUCTIONS_SYSVAR;
use anchor_lang::prelude::*;

use crate::errors::BillingError;
use crate::events::{SessionRedeemed, SessionWithdrawn};
use crate::state::session::layout;
use crate::state::Session;
use crate::transfer::Transfer;
use crate::voucher;

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

/// Records the provider's claim to a voucher's cumulative amount: the session's `redeemed`
/// becomes it, and that much of the deposit is the recipient's (`withdraw_session` pays
/// it out; the close pays what is left of it). No transfer here, so a redeem is cheap and
/// many fit in one transaction (docs/adr/0026). Anyone may send it: it moves no money, and
/// only as far as the payer's own signature allows; a second redeem of one session in a
/// transaction finds nothing newer.
#[derive(Accounts)]
pub struct RedeemSession<'info> {
    /// CHECK: owned by this program (`owner`) and a `Session` by its length and
    /// discriminator (checked first in the handler); read and written in place at the
    /// offsets of `state::session::layout` (a redeem touches four of its fields).
    #[account(mut, owner = crate::ID @ ErrorCode::AccountOwnedByWrongProgram)]
    pub session: UncheckedAccount<'info>,

    /// CHECK: fixed by `address` to the instructions sysvar, read for the voucher's
    /// signature (voucher::require_signed).
    #[account(address = INSTRUCTIONS_SYSVAR)]
    pub instructions: UncheckedAccount<'info>,
}

impl RedeemSession<'_> {
    pub fn handler(ctx: Context<Self>, args: RedeemArgs) -> Result<()> {
        let a = ctx.accounts;
        let mut data = a.session.try_borrow_mut_data()?;
        require!(!data.is_empty(), BillingError::SessionClosed); // a tombstone
        require!(
            data.len() == layout::LEN && data[..8] == *Session::DISCRIMINATOR,
            ErrorCode::AccountDiscriminatorMismatch
        );
        require!(
            data[layout::STATUS] != layout::CLOSED,
            BillingError::SessionClosed
        );
        if args.expiry != 0 {
            let now = Clock::get()?.unix_timestamp;
            require!(now <= args.expiry, BillingError::VoucherExpired);
        }
        let signer = Pubkey::new_from_array(read(&data, layout::SIGNER));
        let message = voucher::message(a.session.key, args.cumulative, args.expiry);
        voucher::require_signed(&a.instructions, args.ed25519_index, &signer, &message)?;
        let deposit = u64::from_le_bytes(read(&data, layout::DEPOSIT));
        let redeemed = u64::from_le_bytes(read(&data, layout::REDEEMED));
        require!(args.cumulative > redeemed, BillingError::VoucherNotNewer);
        require!(args.cumulative <= deposit, BillingError::VoucherOverDeposit);
        data[layout::REDEEMED..layout::REDEEMED + 8]
            .copy_from_slice(&args.cumulative.to_le_bytes());
        emit!(SessionRedeemed {
            session: a.session.key(),
            amount: args.cumulative - redeemed,
            cumulative: args.cumulative,
            deposit,
        });
        Ok(())
    }
}

fn read<const N: usize>(data: &[u8], at: usize) -> [u8; N] {
    let mut out = [0; N];
    out.copy_from_slice(&data[at..at + N]);
    out
}

/// Pays the recipient what was redeemed and not yet paid out. Anyone may send it: the
/// money goes only to the session's recipient. Nothing owed is a no-op, so it may follow
/// every redeem.
#[derive(Accounts)]
pub struct WithdrawSession<'info> {
    #[account(mut)]
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

    /// CHECK: fixed by `address` to the token program of the session's mint.
    #[account(address = session.token_program @ BillingError::MintMismatch)]
    pub token_program: UncheckedAccount<'info>,
}

impl WithdrawSession<'_> {
    pub fn handler<'info>(ctx: Context<'info, WithdrawSession<'info>>) -> Result<()> {
        let a = ctx.accounts;
        let amount = a.session.owed();
        if amount == 0 {
            return Ok(());
        }
        let s = &a.session;
        let moved = Transfer {
            token_program: &a.token_program.to_account_info(),
            source: &a.vault.to_account_info(),
            mint: &a.mint.to_account_info(),
            destination: &a.recipient.to_account_info(),
            authority: &s.to_account_info(),
            extra: ctx.remaining_accounts,
        }
        .from_vault((&s.payer, s.session_id, s.bump), amount, s.decimals)?;
        let s = &mut a.session;
        s.withdrawn = s.redeemed;
        emit!(SessionWithdrawn {
            session: s.key(),
            amount,
            fee: moved.fee,
            net: moved.net(),
            withdrawn: s.withdrawn,
        });
        Ok(())
    }
}
