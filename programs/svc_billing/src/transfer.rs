//! Moving a subscriber's tokens, and a session's escrow, under the program's rules. Every
//! pull and every payout goes through `transfer_checked` here, with SPL Token or Token-2022;
//! for Token-2022 the caller's remaining accounts (a transfer hook's extra accounts, its
//! program and its validation account) go along in the CPI, and the amount the destination
//! received is measured, so a transfer-fee mint's fee is known (docs/adr/0030).
use anchor_lang::prelude::*;
use anchor_lang::solana_program::instruction::{AccountMeta, Instruction};
use anchor_lang::solana_program::program::invoke_signed_unchecked;
use anchor_spl::token::spl_token;

use crate::constants::{DELEGATE_SEED, SESSION_SEED};
use crate::errors::BillingError;
use crate::token_view::{self, TokenAccountView};

/// SPL Token's and Token-2022's `TransferChecked` tag.
const TRANSFER_CHECKED: u8 = 12;

/// Refuses a pull the token program would refuse, with the program's own error: the
/// account must hold `amount` and still delegate at least `amount` to `delegate`.
pub fn check_can_pull(source: &TokenAccountView, delegate: &Pubkey, amount: u64) -> Result<()> {
    require!(source.amount >= amount, BillingError::InsufficientFunds);
    let delegated = match source.delegate {
        Some(d) if d == *delegate => source.delegated_amount,
        _ => 0,
    };
    require!(delegated >= amount, BillingError::DelegationMissing);
    Ok(())
}

/// Whether `source` delegates at least half of all possible tokens to `delegate`, as the
/// `u64::MAX` approval of `subscribe` does until pulls have used up half of it.
pub fn delegates_everything(source: &TokenAccountView, delegate: &Pubkey) -> bool {
    source.delegate == Some(*delegate) && source.delegated_amount >= u64::MAX / 2
}

/// What a transfer of `amount` moved: the fee is what a Token-2022 transfer-fee mint withheld
/// in the destination (0 for every other mint); `amount - fee` arrived.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Moved {
    pub amount: u64,
    pub fee: u64,
}

impl Moved {
    pub fn net(&self) -> u64 {
        self.amount - self.fee
    }
}

/// The accounts of one `transfer_checked`.
pub struct Transfer<'a, 'info> {
    pub token_program: &'a AccountInfo<'info>,
    pub source: &'a AccountInfo<'info>,
    pub mint: &'a AccountInfo<'info>,
    pub destination: &'a AccountInfo<'info>,
    pub authority: &'a AccountInfo<'info>,
    /// Forwarded to Token-2022 after the four accounts (a transfer hook's accounts).
    pub extra: &'a [AccountInfo<'info>],
}

impl<'info> Transfer<'_, 'info> {
    /// Transfers `amount` (`decimals` checked against the mint), signed by `signer` seeds
    /// when the authority is a PDA of this program. Kept out of line so each handler's stack
    /// frame stays small (the SBF stack frame is 4 KiB).
    #[inline(never)]
    pub fn run(&self, amount: u64, decimals: u8, signer: &[&[&[u8]]]) -> Result<Moved> {
        let classic = *self.token_program.key == spl_token::ID;
        let mut data = [0u8; 10];
        data[0] = TRANSFER_CHECKED;
        data[1..9].copy_from_slice(&amount.to_le_bytes());
        data[9] = decimals;
        let mut accounts = Vec::with_capacity(4 + self.extra.len());
        accounts.push(AccountMeta::new(*self.source.key, false));
        accounts.push(AccountMeta::new_readonly(*self.mint.key, false));
        accounts.push(AccountMeta::new(*self.destination.key, false));
        accounts.push(AccountMeta::new_readonly(*self.authority.key, true));
        let base = [
            self.source.clone(),
            self.mint.clone(),
            self.destination.clone(),
            self.authority.clone(),
        ];
        // No account data is borrowed across these calls (each read above and below
        // borrows and releases), which is what the checked `invoke_signed` verifies.
        if classic {
            let ix = Instruction {
                program_id: *self.token_program.key,
                accounts,
                data: data.to_vec(),
            };
            invoke_signed_unchecked(&ix, &base, signer)?;
            return Ok(Moved { amount, fee: 0 });
        }
        let mut infos = Vec::with_capacity(4 + self.extra.len());
        infos.extend(base);
        for info in self.extra {
            accounts.push(AccountMeta {
                pubkey: *info.key,
                is_signer: info.is_signer,
                is_writable: info.is_writable,
            });
            infos.push(info.clone());
        }
        let ix = Instruction {
            program_id: *self.token_program.key,
            accounts,
            data: data.to_vec(),
        };
        let before = token_view::amount(self.destination)?;
        invoke_signed_unchecked(&ix, &infos, signer)?;
        let received = token_view::amount(self.destination)?
            .checked_sub(before)
            .ok_or(BillingError::MathOverflow)?;
        let fee = amount
            .checked_sub(received)
            .ok_or(BillingError::MathOverflow)?;
        Ok(Moved { amount, fee })
    }

    /// Transfers `amount` from a subscriber's account, signed by the subscriber's delegate PDA.
    pub fn pull(&self, subscriber: &Pubkey, bump: u8, amount: u64, decimals: u8) -> Result<Moved> {
        let bump = [bump];
        let seeds: &[&[u8]] = &[DELEGATE_SEED, subscriber.as_ref(), &bump];
        self.run(amount, decimals, &[seeds])
    }

    /// Transfers `amount` from a session's vault, signed by the session PDA
    /// (`[SESSION_SEED, payer, session_id, bump]`).
    pub fn from_vault(
        &self,
        seeds: (&Pubkey, u64, u8),
        amount: u64,
        decimals: u8,
    ) -> Result<Moved> {
        let (payer, session_id, bump) = seeds;
        let id = session_id.to_le_bytes();
        let bump = [bump];
        let seeds: &[&[u8]] = &[SESSION_SEED, payer.as_ref(), &id, &bump];
        self.run(amount, decimals, &[seeds])
    }
}
