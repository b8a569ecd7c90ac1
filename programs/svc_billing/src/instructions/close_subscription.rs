use anchor_lang::prelude::*;

use crate::errors::BillingError;
use crate::events::SubscriptionClosed;
use crate::state::{Allowance, Subscription};

/// Closes an ended (cancelled or expired) subscription and its allowance; the rent goes
/// back to the subscriber. (Subscribing again does not need this: `subscribe` starts a new
/// subscription in place of an ended one, docs/adr/0015.) Anchor's
/// `close` wipes the discriminator, so a closed account cannot be passed off as live.
#[derive(Accounts)]
pub struct CloseSubscription<'info> {
    #[account(mut)]
    pub subscriber: Signer<'info>,

    /// `dup` here and on the allowance: a Subscription and an Allowance cannot be one
    /// account (their discriminators differ), so they cannot alias (docs/adr/0016).
    #[account(
        mut,
        dup,
        has_one = subscriber,
        constraint = !subscription.is_live() @ BillingError::SubscriptionStillLive,
        close = subscriber,
    )]
    pub subscription: Account<'info, Subscription>,

    /// Present exactly when the subscription has one.
    #[account(mut, dup, has_one = subscription, close = subscriber)]
    pub allowance: Option<Account<'info, Allowance>>,
}

impl CloseSubscription<'_> {
    pub fn validate(&self) -> Result<()> {
        require!(
            self.allowance.is_some() == self.subscription.has_allowance,
            BillingError::NoAllowance
        );
        Ok(())
    }

    pub fn handler(ctx: Context<Self>) -> Result<()> {
        let sub = &ctx.accounts.subscription;
        emit!(SubscriptionClosed {
            subscription: sub.key(),
            plan: sub.plan,
            subscriber: sub.subscriber,
            status: sub.status,
            total_paid: sub.total_paid,
        });
        Ok(())
    }
}
