//! cancel: the subscriber or the provider ends a subscription now or at the period's end.
//! Its accounts are [`ChangeSubscription`] (in `pause.rs`).
use anchor_lang::prelude::*;

use crate::errors::BillingError;
use crate::events::SubscriptionStatusChanged;
use crate::instructions::ChangeSubscription;
use crate::state::{Party, SubscriptionStatus};

impl ChangeSubscription<'_> {
    pub fn validate_cancel(&self) -> Result<()> {
        require!(self.subscription.is_live(), BillingError::SubscriptionEnded);
        Ok(())
    }

    /// Either party may cancel now. At the period's end (ACTIVE only) `collect` ends it
    /// instead of renewing; the request is recorded as the subscriber's as soon as the
    /// subscriber makes it, so only the subscriber can withdraw it (docs/adr/0014).
    pub fn cancel(ctx: Context<Self>, at_period_end: bool) -> Result<()> {
        let a = ctx.accounts;
        let party = a.party()?;
        let sub = &mut a.subscription;
        if at_period_end && sub.status == SubscriptionStatus::Active {
            if sub.cancel_requested_by != Some(Party::Subscriber) {
                sub.cancel_requested_by = Some(party);
            }
            sub.cancel_at_period_end = true;
        } else {
            sub.status = SubscriptionStatus::Cancelled;
            sub.cancel_at_period_end = false;
            sub.cancel_requested_by = None;
            sub.paused_by = None;
            a.plan.live_subscriptions = a.plan.live_subscriptions.saturating_sub(1);
        }
        SubscriptionStatusChanged::emit_for(sub, &a.authority.key());
        Ok(())
    }
}
