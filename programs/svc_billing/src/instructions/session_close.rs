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

/// Closes a session. What the vault holds beyond what was redeemed goes back to the payer's
/// token account; what was redeemed and not yet paid out goes to the recipient if its
/// account takes it (`token_view::can_receive`). Then the vault is closed and the session
/// shrinks to an empty tombstone, both rents to the payer (docs/adr/0037). A recipient that
/// cannot take its due (its account closed, frozen, or requiring memos) never holds the
/// payer's refund: the due stays in the vault, the session stays `Closed` with its data,
/// `withdraw_session` pays the due out once the recipient can take it, and a second close
/// then returns the rents. The provider may close at any time (cooperative: redeem the
/// final voucher first, in the same transaction); the payer after the dispute window, or at
/// any time once closed.
#[derive(Accounts)]
pub struct CloseSession<'info> {
    /// The session's provider or payer.
    pub closer: Signer<'info>,

    /// CHECK: owned by this program (`owner`); `load` requires a `Session` (its
    /// discriminator) that is not yet a tombstone, and every account below to be the one it
    /// names. Unchecked because the handler shrinks it to a tombstone, which an
    /// `Account<Session>` would write back over on exit.
    #[account(mut, owner = crate::ID @ ErrorCode::AccountOwnedByWrongProgram)]
    pub session: UncheckedAccount<'info>,

    /// CHECK: the session's vault (`load`: `session.vault`); read in place. All it holds goes
    /// somewhere (the payer, the recipient), so it can always be closed.
    #[account(mut)]
    pub vault: UncheckedAccount<'info>,

    /// CHECK: the payer's refund token account (`load`: `session.refund`).
    #[account(mut)]
    pub refund: UncheckedAccount<'info>,

    /// CHECK: the session's recipient (`load`: `session.recipient`); paid its due only if
    /// `token_view::can_receive` says a transfer to it goes through.
    #[account(mut)]
    pub recipient: UncheckedAccount<'info>,

    /// CHECK: the payer (`load`: `session.payer`), who receives the vault's rent and the
    /// session's, less the tombstone's.
    #[account(mut)]
    pub payer: UncheckedAccount<'info>,

    /// CHECK: the session's mint (`load`: `session.mint`). Passed writable for a Token-2022
    /// transfer-fee mint (the vault's withheld fees are harvested into it before the vault
    /// closes); read-only otherwise, so closes never write-lock a busy mint such as USDC.
    pub mint: UncheckedAccount<'info>,

    /// CHECK: the token program of the session's mint (`load`: `session.token_program`).
    pub token_program: UncheckedAccount<'info>,
}

impl CloseSession<'_> {
    /// The session, checked: a live or pending-close `Session`, named by every other account,
    /// and a closer allowed to close it now.
    pub fn load(&self) -> Result<Session> {
        let s = {
            let data = self.session.try_borrow_data()?;
            require!(!data.is_empty(), BillingError::SessionClosed);
            Session::try_deserialize(&mut &data[..])?
        };
        // A closed session that still has data waits for its recipient's due to be paid.
        let pending = s.status == SessionStatus::Closed;
        require_keys_eq!(
            self.vault.key(),
            s.vault,
            BillingError::TokenAccountMismatch
        );
        require_keys_eq!(
            self.refund.key(),
            s.refund,
            BillingError::TokenAccountMismatch
        );
        require_keys_eq!(
            self.recipient.key(),
            s.recipient,
            BillingError::DestinationMismatch
        );
        require_keys_eq!(self.payer.key(), s.payer, BillingError::Unauthorized);
        require_keys_eq!(self.mint.key(), s.mint, BillingError::MintMismatch);
        require_keys_eq!(
            self.token_program.key(),
            s.token_program,
            BillingError::MintMismatch
        );
        let closer = self.closer.key();
        if closer != s.provider {
            require_keys_eq!(closer, s.payer, BillingError::Unauthorized);
            let now = Clock::get()?.unix_timestamp;
            require!(
                pending || s.payer_may_close(now),
                BillingError::DisputeWindowOpen
            );
        }
        Ok(s)
    }

    pub fn handler<'info>(ctx: Context<'info, CloseSession<'info>>) -> Result<()> {
        let a = ctx.accounts;
        let mut s = a.load()?;
        let held = token_view::token_account(&a.vault, &s.token_program)?.amount;
        let session_info = a.session.to_account_info();
        let signer = (&s.payer, s.session_id, s.bump);
        // The vault holds at least what is owed (deposits in, only `owed` out of what was
        // redeemed); `min` keeps a close possible whatever happened to it.
        let owed = s.owed().min(held);
        let refunded = held - owed;
        let vault_transfer = |destination: &AccountInfo<'info>, amount: u64| {
            Transfer {
                token_program: &a.token_program,
                source: &a.vault,
                mint: &a.mint,
                destination,
                authority: &session_info,
                extra: ctx.remaining_accounts,
            }
            .from_vault(signer, amount, s.decimals)
        };
        if refunded > 0 {
            vault_transfer(&a.refund, refunded)?;
        }
        let pay = owed > 0 && token_view::can_receive(&a.recipient, &s.mint, &s.token_program);
        if pay {
            vault_transfer(&a.recipient, owed)?;
            s.withdrawn = s
                .withdrawn
                .checked_add(owed)
                .ok_or(BillingError::MathOverflow)?;
        }
        s.status = SessionStatus::Closed;
        // Whatever was not redeemed is refunded: the deposit now equals what was paid out.
        s.deposit = s.redeemed;
        let unpaid = s.owed();
        emit!(SessionClosed {
            session: a.session.key(),
            closed_by: a.closer.key(),
            redeemed: s.redeemed,
            refunded,
            status: s.status,
            unpaid,
        });
        if unpaid > 0 {
            // The recipient's due waits in the vault; the session keeps what pays it out.
            let mut data = a.session.try_borrow_mut_data()?;
            return s.try_serialize(&mut &mut data[..]);
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
                authority: session_info.clone(),
            },
            &[seeds],
        ))?;
        bury(&session_info, &a.payer)
    }
}

/// Shrinks a closed session to an empty account of this program and returns the rent it no
/// longer needs to the payer. The tombstone keeps the address taken: `open_session` cannot
/// create a session there again, so the closed session's vouchers never become redeemable.
fn bury(session: &AccountInfo, payer: &AccountInfo) -> Result<()> {
    session.resize(0)?;
    let spare = session
        .lamports()
        .checked_sub(Rent::get()?.minimum_balance(0))
        .ok_or(BillingError::MathOverflow)?;
    **session.try_borrow_mut_lamports()? -= spare;
    **payer.try_borrow_mut_lamports()? += spare;
    Ok(())
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
