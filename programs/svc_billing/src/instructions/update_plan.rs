//! update_plan: the provider changes the billing authority or the grace period. Nothing
//! here can change what existing subscribers pay: their terms are snapshotted in each
//! subscription. [`ManagePlan`] is also the accounts of `deprecate_plan`.
use anchor_lang::prelude::*;

use crate::constants::MAX_GRACE_SECS;
use crate::errors::BillingError;
use crate::events::PlanChanged;
use crate::state::Plan;

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

    /// `dup`: the only mutable account here, so it cannot alias another (docs/adr/0016).
    #[account(mut, dup, has_one = authority @ BillingError::Unauthorized)]
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
        PlanChanged::emit_for(plan);
        Ok(())
    }
}
