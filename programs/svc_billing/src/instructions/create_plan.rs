use anchor_lang::prelude::*;
use anchor_spl::token::{Mint, TokenAccount};

use crate::constants::PLAN_SEED;
use crate::errors::BillingError;
use crate::events::PlanCreated;
use crate::state::{Plan, PlanStatus};

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

    pub mint: Account<'info, Mint>,

    /// Receives every payment; any token account of the plan's mint.
    #[account(constraint = destination.mint == mint.key() @ BillingError::MintMismatch)]
    pub destination: Account<'info, TokenAccount>,

    pub system_program: Program<'info, System>,
}

impl CreatePlan<'_> {
    pub fn validate(&self, args: &CreatePlanArgs) -> Result<()> {
        Plan::validate_terms(args.amount, args.period_secs, args.grace_secs)
    }

    pub fn handler(ctx: Context<Self>, args: CreatePlanArgs) -> Result<()> {
        let now = Clock::get()?.unix_timestamp;
        let plan = &mut ctx.accounts.plan;
        plan.set_inner(Plan {
            authority: ctx.accounts.authority.key(),
            plan_id: args.plan_id,
            mint: ctx.accounts.mint.key(),
            decimals: ctx.accounts.mint.decimals,
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
