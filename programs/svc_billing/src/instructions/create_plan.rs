use anchor_lang::prelude::*;
use anchor_spl::token_interface::TokenInterface;

use crate::constants::PLAN_SEED;
use crate::errors::BillingError;
use crate::events::PlanCreated;
use crate::state::{Plan, PlanStatus};
use crate::token_view::{self, ext};

#[derive(AnchorSerialize, AnchorDeserialize, Clone, Debug)]
pub struct CreatePlanArgs {
    /// Provider-chosen number, unique per authority (part of the plan's address).
    pub plan_id: u64,
    /// Price per period, base units of the mint.
    pub amount: u64,
    /// Billing period, seconds.
    pub period_secs: i64,
    /// Seconds a past-due subscription waits for funds before it expires.
    pub grace_secs: i64,
    /// Who may collect renewals and deduct usage (the facilitator's key).
    pub billing_authority: Pubkey,
}

#[derive(Accounts)]
#[instruction(args: CreatePlanArgs)]
pub struct CreatePlan<'info> {
    /// The provider; pays the plan's rent and manages it.
    #[account(mut)]
    pub authority: Signer<'info>,

    #[account(
        init,
        payer = authority,
        space = 8 + Plan::INIT_SPACE,
        seeds = [PLAN_SEED, authority.key().as_ref(), &args.plan_id.to_le_bytes()],
        bump,
    )]
    pub plan: Account<'info, Plan>,

    /// CHECK: read in place by `token_view::mint_decimals`, which requires an initialized
    /// mint owned by `token_program`; `validate` refuses the extensions payments cannot use.
    pub mint: UncheckedAccount<'info>,

    /// CHECK: receives every payment; read in place by `token_view::token_account`, which
    /// requires an initialized, unfrozen token account of `token_program`; `validate` checks
    /// its mint and that it accepts transfers without a memo.
    pub destination: UncheckedAccount<'info>,

    /// SPL Token or Token-2022: the program that owns the mint (docs/adr/0030).
    pub token_program: Interface<'info, TokenInterface>,

    pub system_program: Program<'info, System>,
}

impl CreatePlan<'_> {
    pub fn validate(&self, args: &CreatePlanArgs) -> Result<()> {
        Plan::validate_terms(args.amount, args.period_secs, args.grace_secs)?;
        let program = self.token_program.key();
        token_view::mint_decimals(&self.mint, &program)?;
        let destination = token_view::token_account(&self.destination, &program)?;
        require_keys_eq!(
            destination.mint,
            self.mint.key(),
            BillingError::MintMismatch
        );
        check_mint_extensions(&self.mint.try_borrow_data()?)?;
        let refuses_plain_transfers =
            token_view::extension(&self.destination.try_borrow_data()?, ext::MEMO_TRANSFER)
                .is_some_and(|v| v.first() == Some(&1));
        require!(
            !refuses_plain_transfers,
            BillingError::DestinationRequiresMemo
        );
        Ok(())
    }

    pub fn handler(ctx: Context<Self>, args: CreatePlanArgs) -> Result<()> {
        let now = Clock::get()?.unix_timestamp;
        let plan = &mut ctx.accounts.plan;
        plan.set_inner(Plan {
            authority: ctx.accounts.authority.key(),
            plan_id: args.plan_id,
            mint: ctx.accounts.mint.key(),
            decimals: token_view::mint_decimals(
                &ctx.accounts.mint,
                ctx.accounts.token_program.key,
            )?,
            amount: args.amount,
            period_secs: args.period_secs,
            destination: ctx.accounts.destination.key(),
            billing_authority: args.billing_authority,
            grace_secs: args.grace_secs,
            status: PlanStatus::Active,
            created_at: now,
            live_subscriptions: 0,
            total_subscriptions: 0,
            total_collected: 0,
            bump: ctx.bumps.plan,
        });
        emit!(PlanCreated {
            plan: plan.key(),
            authority: plan.authority,
            plan_id: plan.plan_id,
            mint: plan.mint,
            amount: plan.amount,
            period_secs: plan.period_secs,
            destination: plan.destination,
            billing_authority: plan.billing_authority,
        });
        Ok(())
    }
}

/// The Token-2022 extensions a plan's mint may carry (docs/adr/0030, the README's table).
/// Tokens that cannot move (non-transferable) are refused, and so are extension types newer
/// than the program knows; everything else is accepted, and `svcpay plan create` warns about
/// the ones that change what a payment means (fees, hooks, a permanent delegate, pausing,
/// default-frozen accounts, interest or a UI multiplier).
fn check_mint_extensions(mint: &[u8]) -> Result<()> {
    for (kind, _) in token_view::extensions(mint) {
        require!(
            kind != ext::NON_TRANSFERABLE,
            BillingError::MintNonTransferable
        );
        require!(
            kind <= ext::LAST_KNOWN,
            BillingError::UnsupportedMintExtension
        );
    }
    Ok(())
}
