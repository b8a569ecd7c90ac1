use anchor_lang::prelude::*;
use anchor_lang::solana_program::instruction::{AccountMeta, Instruction};
use anchor_lang::solana_program::program::invoke;
use anchor_spl::token_interface::{self, CloseAccount};

use crate::constants::SESSION_SEED;
use crate::errors::BillingError;
use crate::events::{SessionCloseRequested, SessionClosed};
use crate::state::{Session, SessionStatus};
use crate::token_view;
use crate::transfer::Transfer;

/// Token-2022's `TransferFeeExtension` / `HarvestWithheldTokensToMint`: moves the fees a
/// transfer-fee mint withheld in an account to the mint, as anyone may. A vault holding
/// withheld fees cannot be closed.
const HARVEST_WITHHELD_TO_MINT: [u8; 2] = [26, 4];
const TRANSFER_FEE_AMOUNT: u16 = 2;

/// The payer asks to close: the provider keeps `dispute_secs` to redeem its last voucher,
/// then the payer may close alone.
#[derive(Accounts)]
pub struct RequestCloseSession<'info> {
    pub payer: Signer<'info>,

    #[account(mut, has_one = payer @ BillingError::Unauthorized)]
    pub session: Account<'info, Session>,
}

impl RequestCloseSession<'_> {
    pub fn handler(ctx: Context<Self>) -> Result<()> {
        let s = &mut ctx.accounts.session;
        require!(
            s.status == SessionStatus::Open,
            BillingError::SessionNotOpen
        );
        let now = Clock::get()?.unix_timestamp;
        s.status = SessionStatus::Closing;
        s.close_requested_at = now;
        emit!(SessionCloseRequested {
            session: s.key(),
            dispute_ends_at: now
                .checked_add(s.dispute_secs)
                .ok_or(BillingError::MathOverflow)?,
        });
        Ok(())
    }
}

/// Closes a session: what was redeemed and not yet paid out goes to the recipient, what the
/// vault holds beyond that goes back to the payer's token account, the vault is closed
/// (rent to the payer), and the session stays as a `Closed` tombstone. The provider may
/// close at any time (cooperative: redeem the final voucher first, in the same
/// transaction); the payer only after the dispute window.
#[derive(Accounts)]
pub struct CloseSession<'info> {
    /// The session's provider or payer.
    pub closer: Signer<'info>,

    #[account(mut, constraint = session.status != SessionStatus::Closed @ BillingError::SessionClosed)]
    pub session: Account<'info, Session>,

    /// CHECK: fixed by `address` to the session's vault; read in place. All it holds goes
    /// back (the unredeemed deposit, and anything sent to it directly), so it can always
    /// be closed.
    #[account(mut, address = session.vault @ BillingError::TokenAccountMismatch)]
    pub vault: UncheckedAccount<'info>,

    /// CHECK: fixed by `address` to the payer's refund token account.
    #[account(mut, address = session.refund @ BillingError::TokenAccountMismatch)]
    pub refund: UncheckedAccount<'info>,

    /// CHECK: fixed by `address` to the session's recipient, paid what it is owed.
    #[account(mut, address = session.recipient @ BillingError::DestinationMismatch)]
    pub recipient: UncheckedAccount<'info>,

    /// CHECK: fixed by `address` to the payer, who receives the vault's rent.
    #[account(mut, address = session.payer @ BillingError::Unauthorized)]
    pub payer: UncheckedAccount<'info>,

    /// CHECK: fixed by `address` to the session's mint. Passed writable for a Token-2022
    /// transfer-fee mint (the vault's withheld fees are harvested into it before the vault
    /// closes); read-only otherwise, so closes never write-lock a busy mint such as USDC.
    #[account(address = session.mint @ BillingError::MintMismatch)]
    pub mint: UncheckedAccount<'info>,

    /// CHECK: fixed by `address` to the token program of the session's mint.
    #[account(address = session.token_program @ BillingError::MintMismatch)]
    pub token_program: UncheckedAccount<'info>,
}

impl CloseSession<'_> {
    pub fn validate(&self) -> Result<()> {
        let closer = self.closer.key();
        let s = &self.session;
        if closer == s.provider {
            return Ok(());
        }
        require_keys_eq!(closer, s.payer, BillingError::Unauthorized);
        let now = Clock::get()?.unix_timestamp;
        require!(s.payer_may_close(now), BillingError::DisputeWindowOpen);
        Ok(())
    }

    pub fn handler<'info>(ctx: Context<'info, CloseSession<'info>>) -> Result<()> {
        let a = ctx.accounts;
        let s = &a.session;
        let held = token_view::token_account(&a.vault, &s.token_program)?.amount;
        let session_info = s.to_account_info();
        let signer = (&s.payer, s.session_id, s.bump);
        // The vault holds at least what is owed (deposits in, only `owed` out of what was
        // redeemed); `min` keeps a close possible whatever happened to it.
        let owed = s.owed().min(held);
        if owed > 0 {
            Transfer {
                token_program: &a.token_program,
                source: &a.vault,
                mint: &a.mint,
                destination: &a.recipient,
                authority: &session_info,
                extra: ctx.remaining_accounts,
            }
            .from_vault(signer, owed, s.decimals)?;
        }
        let refunded = held - owed;
        if refunded > 0 {
            Transfer {
                token_program: &a.token_program,
                source: &a.vault,
                mint: &a.mint,
                destination: &a.refund,
                authority: &session_info,
                extra: ctx.remaining_accounts,
            }
            .from_vault(signer, refunded, s.decimals)?;
        }
        harvest_withheld(&a.token_program, &a.mint, &a.vault)?;
        let id = s.session_id.to_le_bytes();
        let bump = [s.bump];
        let seeds: &[&[u8]] = &[SESSION_SEED, s.payer.as_ref(), &id, &bump];
        token_interface::close_account(CpiContext::new_with_signer(
            a.token_program.key(),
            CloseAccount {
                account: a.vault.to_account_info(),
                destination: a.payer.to_account_info(),
                authority: session_info,
            },
            &[seeds],
        ))?;
        let s = &mut a.session;
        s.withdrawn = s
            .withdrawn
            .checked_add(owed)
            .ok_or(BillingError::MathOverflow)?;
        s.status = SessionStatus::Closed;
        // Whatever was not redeemed is refunded: the deposit now equals what was paid out.
        s.deposit = s.redeemed;
        emit!(SessionClosed {
            session: s.key(),
            closed_by: a.closer.key(),
            redeemed: s.redeemed,
            refunded,
            status: s.status,
        });
        Ok(())
    }
}

/// Harvests the fees a Token-2022 transfer-fee mint withheld in the vault, so it can close.
#[inline(never)]
fn harvest_withheld<'info>(
    token_program: &AccountInfo<'info>,
    mint: &AccountInfo<'info>,
    vault: &AccountInfo<'info>,
) -> Result<()> {
    let withheld = {
        let data = vault.try_borrow_data()?;
        token_view::extension(&data, TRANSFER_FEE_AMOUNT)
            .and_then(|v| v.get(..8))
            .map_or(0, |v| u64::from_le_bytes(v.try_into().unwrap()))
    };
    if withheld == 0 {
        return Ok(());
    }
    let ix = Instruction {
        program_id: *token_program.key,
        accounts: vec![
            AccountMeta::new(*mint.key, false),
            AccountMeta::new(*vault.key, false),
        ],
        data: HARVEST_WITHHELD_TO_MINT.to_vec(),
    };
    invoke(&ix, &[mint.clone(), vault.clone()])?;
    Ok(())
}
