use anchor_lang::prelude::*;

use crate::constants::ALLOWANCE_SEED;
use crate::errors::BillingError;
use crate::events::AllowanceCapChanged;
use crate::state::{Allowance, Subscription};

/// The subscriber sets the metered cap per cycle (raise it to be served again after
/// `AllowanceExhausted`, or lower it). Usage already deducted stays deducted. A live
/// subscription made without an allowance gets one here, starting with this cycle (the
/// subscriber pays its rent; the delegation `subscribe` approved already covers metered
/// charges, docs/adr/0003).
#[derive(Accounts)]
pub struct SetAllowanceCap<'info> {
    /// Pays the rent of an allowance created here (returned when the subscription closes).
    #[account(mut)]
    pub subscriber: Signer<'info>,

    /// `dup` on the subscription and the allowance: accounts of two different types
    /// (discriminators) cannot alias (docs/adr/0016).
    #[account(mut, dup, has_one = subscriber)]
    pub subscription: Account<'info, Subscription>,

    /// The subscription's allowance, created if it has none (its seeds bind it to the
    /// subscription).
    #[account(
        init_if_needed,
        dup,
        payer = subscriber,
        space = 8 + Allowance::INIT_SPACE,
        seeds = [ALLOWANCE_SEED, subscription.key().as_ref()],
        bump,
    )]
    pub allowance: Account<'info, Allowance>,

    pub system_program: Program<'info, System>,
}

impl SetAllowanceCap<'_> {
    pub fn validate(&self, cap: u64) -> Result<()> {
        require!(cap > 0, BillingError::ZeroAmount);
        require!(self.subscription.is_live(), BillingError::SubscriptionEnded);
        Ok(())
    }

    pub fn handler(ctx: Context<Self>, cap: u64) -> Result<()> {
        let a = ctx.accounts;
        let old_cap = if a.subscription.has_allowance {
            a.allowance.cap
        } else {
            a.allowance.set_inner(Allowance {
                subscription: a.subscription.key(),
                cap,
                used: 0,
                total_deducted: 0,
                cycle: a.subscription.cycles_billed,
                bump: ctx.bumps.allowance,
            });
            a.subscription.has_allowance = true;
            0
        };
        a.allowance.cap = cap;
        emit!(AllowanceCapChanged {
            subscription: a.subscription.key(),
            allowance: a.allowance.key(),
            old_cap,
            new_cap: cap,
            used: a.allowance.used,
        });
        Ok(())
    }
}
