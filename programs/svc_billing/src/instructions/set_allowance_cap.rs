use anchor_lang::prelude::*;

use crate::errors::BillingError;
use crate::events::AllowanceCapChanged;
use crate::state::{Allowance, Subscription};

/// The subscriber sets the metered cap per cycle (raise it to be served again after
/// `AllowanceExhausted`, or lower it). Usage already deducted stays deducted.
#[derive(Accounts)]
pub struct SetAllowanceCap<'info> {
    pub subscriber: Signer<'info>,

    #[account(has_one = subscriber)]
    pub subscription: Account<'info, Subscription>,

    /// `dup`: the only mutable account here, so it cannot alias another (docs/adr/0016).
    #[account(mut, dup, has_one = subscription)]
    pub allowance: Account<'info, Allowance>,
}

impl SetAllowanceCap<'_> {
    pub fn validate(&self, cap: u64) -> Result<()> {
        require!(cap > 0, BillingError::ZeroAmount);
        require!(self.subscription.is_live(), BillingError::SubscriptionEnded);
        Ok(())
    }

    pub fn handler(ctx: Context<Self>, cap: u64) -> Result<()> {
        let allowance = &mut ctx.accounts.allowance;
        let old_cap = allowance.cap;
        allowance.cap = cap;
        emit!(AllowanceCapChanged {
            subscription: allowance.subscription,
            allowance: allowance.key(),
            old_cap,
            new_cap: cap,
            used: allowance.used,
        });
        Ok(())
    }
}
