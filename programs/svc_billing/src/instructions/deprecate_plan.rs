//! deprecate_plan: the provider stops new subscriptions; existing ones renew as before.
//! Its accounts are [`ManagePlan`] (in `update_plan.rs`).
use anchor_lang::prelude::*;

use crate::events::PlanChanged;
use crate::instructions::ManagePlan;
use crate::state::PlanStatus;

impl ManagePlan<'_> {
    /// No new subscribers (`PlanDeprecated`) from now on.
    pub fn deprecate(ctx: Context<Self>) -> Result<()> {
        let plan = &mut ctx.accounts.plan;
        plan.status = PlanStatus::Deprecated;
        PlanChanged::emit_for(plan);
        Ok(())
    }
}
