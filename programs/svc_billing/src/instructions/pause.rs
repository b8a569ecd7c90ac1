//! pause: the subscriber or the provider stops access and renewals of an ACTIVE subscription.
//! [`ChangeSubscription`] is also the accounts of `resume` and `cancel`: one struct keeps one
//! copy of its account checks in the binary.
use anchor_lang::prelude::*;

use crate::errors::BillingError;
use crate::events::SubscriptionStatusChanged;
use crate::state::{Party, Plan, Subscription, SubscriptionStatus};

#[derive(Accounts)]
pub struct ChangeSubscription<'info> {
    /// The subscriber or the plan's authority (checked by each handler).
    pub authority: Signer<'info>,

    /// Its authority decides who the provider is; `cancel` lowers its live count.
    #[account(mut, dup)]
    pub plan: Account<'info, Plan>,

    /// `dup` on both: a Plan and a Subscription cannot be one account (their discriminators
    /// differ), so no two mutable accounts here can alias (docs/adr/0016).
    #[account(mut, dup, has_one = plan)]
    pub subscription: Account<'info, Subscription>,
}

impl ChangeSubscription<'_> {
    /// The party `authority` is; neither the subscriber nor the provider is refused.
    pub fn party(&self) -> Result<Party> {
        self.subscription
            .party_of(&self.authority.key(), &self.plan.authority)
            .ok_or_else(|| error!(BillingError::Unauthorized))
    }

    pub fn validate_pause(&self) -> Result<()> {
        require!(self.subscription.is_live(), BillingError::SubscriptionEnded);
        require!(
            self.subscription.status == SubscriptionStatus::Active,
            BillingError::SubscriptionNotActive
        );
        Ok(())
    }

    /// Only an ACTIVE subscription can pause (a past-due one must not stop its grace clock).
    /// Paid time left is credited on resume; only the party who paused may resume
    /// (docs/adr/0014).
    pub fn pause(ctx: Context<Self>) -> Result<()> {
        let a = ctx.accounts;
        let party = a.party()?;
        let sub = &mut a.subscription;
        sub.status = SubscriptionStatus::Paused;
        sub.paused_at = Clock::get()?.unix_timestamp;
        sub.paused_by = Some(party);
        SubscriptionStatusChanged::emit_for(sub, &a.authority.key());
        Ok(())
    }
}
