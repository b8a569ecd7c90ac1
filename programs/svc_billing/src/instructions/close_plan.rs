//! close_plan: the provider closes a plan with no live subscriptions.
use anchor_lang::prelude::*;

use crate::errors::BillingError;
use crate::events::PlanClosed;
use crate::state::Plan;

/// Closes a plan with no live subscriptions; its rent goes back to the provider.
#[derive(Accounts)]
pub struct ClosePlan<'info> {
    #[account(mut)]
    pub authority: Signer<'info>,

    /// `dup`: the only mutable program account here (docs/adr/0016).
    #[account(
        mut,
        dup,
        has_one = authority @ BillingError::Unauthorized,
        constraint = plan.live_subscriptions == 0 @ BillingError::PlanHasSubscribers,
        close = authority,
    )]
    pub plan: Account<'info, Plan>,
}

impl ClosePlan<'_> {
    pub fn handler(ctx: Context<Self>) -> Result<()> {
        emit!(PlanClosed {
            plan: ctx.accounts.plan.key(),
            authority: ctx.accounts.authority.key(),
            total_collected: ctx.accounts.plan.total_collected,
        });
        Ok(())
    }
}
