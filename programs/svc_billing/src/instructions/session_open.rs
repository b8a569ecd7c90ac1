use anchor_lang::prelude::*;
use anchor_lang::solana_program::instruction::{AccountMeta, Instruction};
use anchor_lang::solana_program::program::{get_return_data, invoke};
use anchor_lang::system_program::{self, Allocate, Assign, CreateAccount, Transfer};
use anchor_spl::token::spl_token;
use anchor_spl::token_interface::{self, InitializeAccount3, TokenInterface};

use crate::constants::{SESSION_SEED, VAULT_SEED};
use crate::errors::BillingError;
use crate::events::SessionOpened;
use crate::state::{Session, SessionStatus};
use crate::token_view;
use crate::transfer::Transfer as TokenTransfer;
use crate::voucher;

/// A token account without extensions, in both token programs.
const VAULT_LEN: u64 = 165;
/// Token-2022's `GetAccountDataSize`: the length an account of a mint needs, with the account
/// extensions the mint's extensions require (a fee mint's withheld amount, a hooked mint's
/// transferring flag, a pausable mint's marker).
const GET_ACCOUNT_DATA_SIZE: u8 = 21;

#[derive(AnchorSerialize, AnchorDeserialize, Clone, Debug)]
pub struct OpenSessionArgs {
    /// Payer-chosen number, unique per payer (a closed session's id cannot be reused).
    pub session_id: u64,
    /// The key that signs vouchers (a session key may differ from the payer's wallet).
    pub signer: Pubkey,
    /// Base units escrowed now: the ceiling of any voucher until a top-up.
    pub deposit: u64,
    /// The gate's price per call or unit, base units (recorded for clients and gates).
    pub price: u64,
    /// Unix seconds after which no new use is sold.
    pub expires_at: i64,
    /// Seconds the provider keeps to redeem after a close request or the expiry.
    pub dispute_secs: i64,
}

/// Opens a session: creates it and its vault, and escrows the deposit from the payer's
/// token account. Works with SPL Token and Token-2022 mints alike.
#[derive(Accounts)]
#[instruction(args: OpenSessionArgs)]
pub struct OpenSession<'info> {
    #[account(mut)]
    pub payer: Signer<'info>,

    #[account(
        init,
        payer = payer,
        space = 8 + Session::INIT_SPACE,
        seeds = [SESSION_SEED, payer.key().as_ref(), &args.session_id.to_le_bytes()],
        bump,
    )]
    pub session: Account<'info, Session>,

    /// CHECK: the session's escrow, at the PDA `[VAULT_SEED, session]` (checked by `seeds`);
    /// created here as a token account of `mint` owned by the session (a vault address
    /// funded beforehand is taken over, not refused).
    #[account(mut, seeds = [VAULT_SEED, session.key().as_ref()], bump)]
    pub vault: UncheckedAccount<'info>,

    /// CHECK: read in place by `token_view::mint_decimals`, which requires it to be an
    /// initialized mint of `token_program`.
    pub mint: UncheckedAccount<'info>,

    /// CHECK: the payer's token account, read in place (`validate`: of `mint`, owned by
    /// the payer, holding the deposit); funds the deposit, receives the refund at close.
    #[account(mut)]
    pub payer_token: UncheckedAccount<'info>,

    /// CHECK: the provider's token account (`validate`: of `mint`); redeemed amounts go
    /// to it, and its owner is the session's provider.
    #[account(constraint = recipient.key() != payer_token.key() @ BillingError::DuplicateAccount)]
    pub recipient: UncheckedAccount<'info>,

    pub token_program: Interface<'info, TokenInterface>,
    pub system_program: Program<'info, System>,
}

impl OpenSession<'_> {
    pub fn validate(&self, args: &OpenSessionArgs) -> Result<()> {
        let now = Clock::get()?.unix_timestamp;
        Session::validate_terms(args.deposit, args.expires_at, args.dispute_secs, now)?;
        let program = self.token_program.key();
        token_view::mint_decimals(&self.mint, &program)?;
        let source = token_view::token_account(&self.payer_token, &program)?;
        require_keys_eq!(source.mint, self.mint.key(), BillingError::MintMismatch);
        require_keys_eq!(
            source.owner,
            self.payer.key(),
            BillingError::TokenAccountMismatch
        );
        require!(
            source.amount >= args.deposit,
            BillingError::InsufficientFunds
        );
        let recipient = token_view::token_account(&self.recipient, &program)?;
        require_keys_eq!(recipient.mint, self.mint.key(), BillingError::MintMismatch);
        // A provider holding the session key could sign a voucher for the whole deposit.
        require!(
            args.signer != recipient.owner && !voucher::small_order(&args.signer),
            BillingError::InvalidSessionKey
        );
        Ok(())
    }

    pub fn handler<'info>(
        ctx: Context<'info, OpenSession<'info>>,
        args: OpenSessionArgs,
    ) -> Result<()> {
        let a = ctx.accounts;
        let now = Clock::get()?.unix_timestamp;
        let program = a.token_program.key();
        let decimals = token_view::mint_decimals(&a.mint, &program)?;
        let provider = token_view::token_account(&a.recipient, &program)?.owner;
        create_vault(a, ctx.bumps.vault)?;
        a.session.set_inner(Session {
            payer: a.payer.key(),
            session_id: args.session_id,
            signer: args.signer,
            provider,
            recipient: a.recipient.key(),
            refund: a.payer_token.key(),
            mint: a.mint.key(),
            decimals,
            token_program: program,
            vault: a.vault.key(),
            deposit: args.deposit,
            redeemed: 0,
            withdrawn: 0,
            price: args.price,
            expires_at: args.expires_at,
            dispute_secs: args.dispute_secs,
            close_requested_at: 0,
            opened_at: now,
            status: SessionStatus::Open,
            bump: ctx.bumps.session,
            vault_bump: ctx.bumps.vault,
        });
        // A transfer-fee mint withholds part of the deposit in the vault: the deposit (the
        // ceiling of vouchers) is what the vault received.
        let moved = TokenTransfer {
            token_program: &a.token_program.to_account_info(),
            source: &a.payer_token.to_account_info(),
            mint: &a.mint.to_account_info(),
            destination: &a.vault.to_account_info(),
            authority: &a.payer.to_account_info(),
            extra: ctx.remaining_accounts,
        }
        .run(args.deposit, decimals, &[])?;
        a.session.deposit = moved.net();
        emit!(SessionOpened {
            session: a.session.key(),
            payer: a.payer.key(),
            signer: args.signer,
            recipient: a.recipient.key(),
            mint: a.mint.key(),
            deposit: moved.net(),
            fee: moved.fee,
            price: args.price,
            expires_at: args.expires_at,
            dispute_secs: args.dispute_secs,
        });
        Ok(())
    }
}

/// Creates the vault at its PDA as a token account of the mint owned by the session. An
/// address someone funded beforehand is topped up to rent, allocated and assigned instead
/// (creating it would fail), so prefunding cannot block a session.
#[inline(never)]
fn create_vault(a: &OpenSession, bump: u8) -> Result<()> {
    let session = a.session.key();
    let bump = [bump];
    let seeds: &[&[u8]] = &[VAULT_SEED, session.as_ref(), &bump];
    let signer = &[seeds];
    let system = a.system_program.key();
    let owner = a.token_program.key();
    let len = vault_len(
        &a.token_program.to_account_info(),
        &a.mint.to_account_info(),
    )?;
    let rent = Rent::get()?.minimum_balance(len as usize);
    let vault = a.vault.to_account_info();
    let payer = a.payer.to_account_info();
    let held = vault.lamports();
    if held == 0 {
        system_program::create_account(
            CpiContext::new_with_signer(
                system,
                CreateAccount {
                    from: payer,
                    to: vault.clone(),
                },
                signer,
            ),
            rent,
            len,
            &owner,
        )?;
    } else {
        if rent > held {
            let to = vault.clone();
            system_program::transfer(
                CpiContext::new(system, Transfer { from: payer, to }),
                rent - held,
            )?;
        }
        let account_to_allocate = vault.clone();
        system_program::allocate(
            CpiContext::new_with_signer(
                system,
                Allocate {
                    account_to_allocate,
                },
                signer,
            ),
            len,
        )?;
        let account_to_assign = vault.clone();
        system_program::assign(
            CpiContext::new_with_signer(system, Assign { account_to_assign }, signer),
            &owner,
        )?;
    }
    token_interface::initialize_account3(CpiContext::new(
        owner,
        InitializeAccount3 {
            account: vault,
            mint: a.mint.to_account_info(),
            authority: a.session.to_account_info(),
        },
    ))
}

/// The vault's length: the base account for SPL Token; for Token-2022 what the token program
/// says an account of this mint needs (extensions make it longer, and rent with it).
fn vault_len<'info>(token_program: &AccountInfo<'info>, mint: &AccountInfo<'info>) -> Result<u64> {
    if *token_program.key == spl_token::ID {
        return Ok(VAULT_LEN);
    }
    let ix = Instruction {
        program_id: *token_program.key,
        accounts: vec![AccountMeta::new_readonly(*mint.key, false)],
        data: vec![GET_ACCOUNT_DATA_SIZE],
    };
    invoke(&ix, core::slice::from_ref(mint))?;
    match get_return_data() {
        Some((program, data)) if program == *token_program.key && data.len() == 8 => {
            Ok(u64::from_le_bytes(data[..8].try_into().unwrap()))
        }
        _ => err!(BillingError::MintMismatch),
    }
}
