//! pause, resume and cancel: the subscriber or the provider changes a subscription's status.
use anchor_lang::prelude::*;

use crate::errors::BillingError;
use crate::events::SubscriptionStatusChanged;
use crate::state::{Plan, Subscription, SubscriptionStatus};

#[derive(Accounts)]
pub struct ChangeSubscription<'info> {
    /// The subscriber or the plan's authority (checked in `validate`).
    pub authority: Signer<'info>,

    #[account(mut)]
    pub plan: Account<'info, Plan>,

    #[account(mut, has_one = plan)]
    pub subscription: Account<'info, Subscription>,
}

impl ChangeSubscription<'_> {
    pub fn validate(&self) -> Result<()> {
        let signer = self.authority.key();
        require!(
            signer == self.subscription.subscriber || signer == self.plan.authority,
            BillingError::Unauthorized
        );
        require!(self.subscription.is_live(), BillingError::SubscriptionEnded);
        Ok(())
    }

    /// Stops access and renewals; only an ACTIVE subscription can pause (a past-due one
    /// must not stop its grace clock). Paid time left is credited on resume.
    pub fn pause(ctx: Context<Self>) -> Result<()> {
        let a = ctx.accounts;
        require!(
            a.subscription.status == SubscriptionStatus::Active,
            BillingError::SubscriptionNotActive
        );
        a.subscription.status = SubscriptionStatus::Paused;
        a.subscription.paused_at = Clock::get()?.unix_timestamp;
        a.emit_changed();
        Ok(())
    }

    /// Resumes a paused subscription (the paid time left at pause runs from now), or
    /// withdraws a pending cancel-at-period-end.
    pub fn resume(ctx: Context<Self>) -> Result<()> {
        let a = ctx.accounts;
        let sub = &mut a.subscription;
        match sub.status {
            SubscriptionStatus::Paused => {
                let now = Clock::get()?.unix_timestamp;
                sub.current_period_end =
                    Subscription::resumed_period_end(sub.current_period_end, sub.paused_at, now)?;
                sub.status = SubscriptionStatus::Active;
                sub.paused_at = 0;
            }
            SubscriptionStatus::Active if sub.cancel_at_period_end => {
                sub.cancel_at_period_end = false;
            }
            _ => return err!(BillingError::NotPaused),
        }
        a.emit_changed();
        Ok(())
    }

    /// Cancels now, or (ACTIVE only) at the end of the paid period: `collect` then ends it
    /// instead of renewing.
    pub fn cancel(ctx: Context<Self>, at_period_end: bool) -> Result<()> {
        let a = ctx.accounts;
        if at_period_end && a.subscription.status == SubscriptionStatus::Active {
            a.subscription.cancel_at_period_end = true;
        } else {
            a.subscription.status = SubscriptionStatus::Cancelled;
            a.subscription.cancel_at_period_end = false;
            a.plan.live_subscriptions = a.plan.live_subscriptions.saturating_sub(1);
        }
        a.emit_changed();
        Ok(())
    }

    fn emit_changed(&self) {
        emit!(SubscriptionStatusChanged {
            subscription: self.subscription.key(),
            plan: self.plan.key(),
            by: self.authority.key(),
            status: self.subscription.status,
            cancel_at_period_end: self.subscription.cancel_at_period_end,
            current_period_end: self.subscription.current_period_end,
        });
    }
}
