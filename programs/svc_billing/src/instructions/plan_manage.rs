//! update_plan, deprecate_plan, close_plan: the provider manages a plan. Nothing here can
//! change what existing subscribers pay: their terms are snapshotted in each subscription.
use anchor_lang::prelude::*;

use crate::constants::MAX_GRACE_SECS;
use crate::errors::BillingError;
use crate::events::{PlanChanged, PlanClosed};
use crate::state::{Plan, PlanStatus};

#[derive(AnchorSerialize, AnchorDeserialize, Clone, Debug)]
pub struct UpdatePlanArgs {
    /// New billing authority (the facilitator's key), if it changes.
    pub billing_authority: Option<Pubkey>,
    /// New grace period in seconds, if it changes.
    pub grace_secs: Option<i64>,
}

#[derive(Accounts)]
pub struct ManagePlan<'info> {
    pub authority: Signer<'info>,

    #[account(mut, has_one = authority @ BillingError::Unauthorized)]
    pub plan: Account<'info, Plan>,
}

impl ManagePlan<'_> {
    pub fn validate_update(&self, args: &UpdatePlanArgs) -> Result<()> {
        if let Some(grace) = args.grace_secs {
            require!(
                (0..=MAX_GRACE_SECS).contains(&grace),
                BillingError::InvalidGrace
            );
        }
        Ok(())
    }

    pub fn update(ctx: Context<Self>, args: UpdatePlanArgs) -> Result<()> {
        let plan = &mut ctx.accounts.plan;
        if let Some(billing_authority) = args.billing_authority {
            plan.billing_authority = billing_authority;
        }
        if let Some(grace) = args.grace_secs {
            plan.grace_secs = grace;
        }
        emit_changed(plan);
        Ok(())
    }

    /// No new subscribers (`PlanDeprecated`); existing subscriptions renew as before.
    pub fn deprecate(ctx: Context<Self>) -> Result<()> {
        let plan = &mut ctx.accounts.plan;
        plan.status = PlanStatus::Deprecated;
        emit_changed(plan);
        Ok(())
    }
}

fn emit_changed(plan: &Account<Plan>) {
    emit!(PlanChanged {
        plan: plan.key(),
        status: plan.status,
        billing_authority: plan.billing_authority,
        grace_secs: plan.grace_secs,
        live_subscriptions: plan.live_subscriptions,
    });
}

/// Closes a plan with no live subscriptions; its rent goes back to the provider.
#[derive(Accounts)]
pub struct ClosePlan<'info> {
    #[account(mut)]
    pub authority: Signer<'info>,

    #[account(
        mut,
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
