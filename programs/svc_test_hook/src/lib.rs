//! A Token-2022 transfer hook that svcpay's tests attach to mints, never deployed beyond a
//! local validator. Each transfer of a hooked mint bumps the mint's counter; when the counter
//! is told to refuse, every transfer of the mint fails with `Refused`, as a sanctions or
//! compliance hook (PYUSD's kind) would. The counter is the one extra account the hook asks
//! for, through the standard `ExtraAccountMetaList` at `["extra-account-metas", mint]`, so a
//! client must resolve it the way it resolves any real hook's accounts.
// The registry-only build defines the i128 builtins with rustc's internal "unadjusted" ABI.
#![cfg_attr(target_arch = "bpf", feature(abi_unadjusted))]

use anchor_lang::prelude::*;
use anchor_lang::system_program::{self, CreateAccount};

// The registry-only build (scripts/build-program) takes memcpy/memset from this crate, as
// svc_billing does.
#[cfg(target_arch = "bpf")]
use solana_compiler_builtins as _;

// svc_billing's i128 builtins for the registry-only build, shared rather than copied.
#[cfg(target_arch = "bpf")]
#[path = "../../svc_billing/src/sbf_builtins.rs"]
mod sbf_builtins;

declare_id!("85zuLQZ3X5VrmdsCqMYUPapaNwhMF7TrMBxg4GXEE1dG");

/// `sha256("spl-transfer-hook-interface:execute")[..8]`: the interface's Execute.
pub const EXECUTE: [u8; 8] = [105, 37, 101, 197, 75, 251, 102, 26];
pub const VALIDATION_SEED: &[u8] = b"extra-account-metas";
pub const COUNTER_SEED: &[u8] = b"counter";

/// The validation account's data: one TLV entry (Execute's discriminator, its length) holding
/// a list of one `ExtraAccountMeta` (35 bytes): the counter, a PDA of this program from the
/// seeds `[Literal "counter", AccountKey 1 (the mint)]`, writable.
fn extra_account_metas() -> [u8; 8 + 4 + 4 + 35] {
    let mut data = [0u8; 51];
    data[..8].copy_from_slice(&EXECUTE);
    data[8..12].copy_from_slice(&(4u32 + 35).to_le_bytes());
    data[12..16].copy_from_slice(&1u32.to_le_bytes());
    let meta = &mut data[16..];
    meta[0] = 1; // a PDA of the hook program
    let seeds = &mut meta[1..33];
    seeds[0] = 1; // Literal
    seeds[1] = COUNTER_SEED.len() as u8;
    seeds[2..2 + COUNTER_SEED.len()].copy_from_slice(COUNTER_SEED);
    let at = 2 + COUNTER_SEED.len();
    seeds[at] = 3; // AccountKey
    seeds[at + 1] = 1; // the mint
    meta[33] = 0; // not a signer
    meta[34] = 1; // writable
    data
}

#[program]
pub mod svc_test_hook {
    use super::*;

    /// Creates the mint's validation account and counter; `authority` may later tell the
    /// counter to refuse.
    pub fn initialize(ctx: Context<Initialize>) -> Result<()> {
        let a = ctx.accounts;
        let data = extra_account_metas();
        let mint = a.mint.key();
        let bump = [ctx.bumps.validation];
        let seeds: &[&[u8]] = &[VALIDATION_SEED, mint.as_ref(), &bump];
        system_program::create_account(
            CpiContext::new_with_signer(
                a.system_program.key(),
                CreateAccount {
                    from: a.payer.to_account_info(),
                    to: a.validation.to_account_info(),
                },
                &[seeds],
            ),
            Rent::get()?.minimum_balance(data.len()),
            data.len() as u64,
            &crate::ID,
        )?;
        a.validation.try_borrow_mut_data()?.copy_from_slice(&data);
        a.counter.set_inner(Counter {
            mint,
            authority: a.authority.key(),
            transfers: 0,
            refuse: false,
            last_amount: 0,
        });
        Ok(())
    }

    /// Makes every later transfer of the mint fail (`refuse`), or pass again.
    pub fn set_refuse(ctx: Context<SetRefuse>, refuse: bool) -> Result<()> {
        ctx.accounts.counter.refuse = refuse;
        Ok(())
    }

    /// Token-2022 calls this during every transfer of the mint.
    #[instruction(discriminator = &EXECUTE)]
    pub fn execute(ctx: Context<Execute>, amount: u64) -> Result<()> {
        let counter = &mut ctx.accounts.counter;
        require!(!counter.refuse, HookError::Refused);
        counter.transfers = counter
            .transfers
            .checked_add(1)
            .ok_or(HookError::Overflow)?;
        counter.last_amount = amount;
        Ok(())
    }
}

#[account]
#[derive(InitSpace)]
pub struct Counter {
    pub mint: Pubkey,
    pub authority: Pubkey,
    /// Transfers of the mint seen since `initialize`.
    pub transfers: u64,
    pub refuse: bool,
    pub last_amount: u64,
}

#[derive(Accounts)]
pub struct Initialize<'info> {
    #[account(mut)]
    pub payer: Signer<'info>,
    /// CHECK: any key; recorded as the one that may call `set_refuse`.
    pub authority: UncheckedAccount<'info>,
    /// CHECK: the hooked mint; only its address is used (as a seed). A counter for a mint
    /// that does not name this hook is never called.
    pub mint: UncheckedAccount<'info>,
    /// CHECK: created here at its PDA, with the extra-account-meta list written raw (it is
    /// the interface's format, not an Anchor account).
    #[account(mut, seeds = [VALIDATION_SEED, mint.key().as_ref()], bump)]
    pub validation: UncheckedAccount<'info>,
    #[account(
        init,
        payer = payer,
        space = 8 + Counter::INIT_SPACE,
        seeds = [COUNTER_SEED, mint.key().as_ref()],
        bump,
    )]
    pub counter: Account<'info, Counter>,
    pub system_program: Program<'info, System>,
}

#[derive(Accounts)]
pub struct SetRefuse<'info> {
    pub authority: Signer<'info>,
    #[account(mut, has_one = authority @ HookError::Unauthorized)]
    pub counter: Account<'info, Counter>,
}

/// The interface's Execute accounts: source, mint, destination, authority, the validation
/// account, then the extras it lists (here, the counter).
#[derive(Accounts)]
pub struct Execute<'info> {
    /// CHECK: the transfer's source token account, as Token-2022 passes it; not read.
    pub source: UncheckedAccount<'info>,
    /// CHECK: the transfer's mint; pins the counter and validation account by seeds.
    pub mint: UncheckedAccount<'info>,
    /// CHECK: the transfer's destination token account; not read.
    pub destination: UncheckedAccount<'info>,
    /// CHECK: the transfer's authority (owner or delegate); not read.
    pub authority: UncheckedAccount<'info>,
    /// CHECK: the validation account, fixed by seeds; Token-2022 resolved the extras from it.
    #[account(seeds = [VALIDATION_SEED, mint.key().as_ref()], bump)]
    pub validation: UncheckedAccount<'info>,
    #[account(mut, seeds = [COUNTER_SEED, mint.key().as_ref()], bump)]
    pub counter: Account<'info, Counter>,
}

#[error_code]
pub enum HookError {
    #[msg("the test hook refuses transfers of this mint")]
    Refused,
    #[msg("only the counter's authority may change it")]
    Unauthorized,
    #[msg("counter overflow")]
    Overflow,
}
