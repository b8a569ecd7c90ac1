//! resume: withdraws a pause or a pending cancel-at-period-end, by the party who made it.
//! Its accounts are [`ChangeSubscription`] (in `pause.rs`).
use anchor_lang::prelude::*;

use crate::errors::BillingError;
use crate::events::SubscriptionStatusChanged;
use crate::instructions::ChangeSubscription;
use crate::state::{Subscription, SubscriptionStatus};

impl ChangeSubscription<'_> {
    pub fn validate_resume(&self) -> Result<()> {
        require!(self.subscription.is_live(), BillingError::SubscriptionEnded);
        Ok(())
    }

    /// A paused subscription resumes (the paid time left at pause runs from now); an active
    /// one with a pending cancel-at-period-end renews again. Either only by the party who
    /// decided it: a provider cannot undo a subscriber's cancel or pause, nor the reverse.
    pub fn resume(ctx: Context<Self>) -> Result<()> {
        let a = ctx.accounts;
        let party = a.party()?;
        let sub = &mut a.subscription;
        match sub.status {
            SubscriptionStatus::Paused => {
                require!(sub.paused_by == Some(party), BillingError::NotYourDecision);
                let now = Clock::get()?.unix_timestamp;
                sub.current_period_end =
                    Subscription::resumed_period_end(sub.current_period_end, sub.paused_at, now)?;
                sub.status = SubscriptionStatus::Active;
                sub.paused_at = 0;
                sub.paused_by = None;
            }
            SubscriptionStatus::Active if sub.cancel_at_period_end => {
                require!(
                    sub.cancel_requested_by == Some(party),
                    BillingError::NotYourDecision
                );
                sub.cancel_at_period_end = false;
                sub.cancel_requested_by = None;
            }
            _ => return err!(BillingError::NotPaused),
        }
        SubscriptionStatusChanged::emit_for(sub, &a.authority.key());
        Ok(())
    }
}
