use anchor_lang::prelude::*;

use crate::constants::{MAX_GRACE_SECS, MAX_PERIOD_SECS, MIN_PERIOD_SECS};
use crate::errors::BillingError;

/// A provider's offer: `amount` of `mint` every `period_secs`, paid to `destination`.
///
/// PDA seeds: `[PLAN_SEED, authority, plan_id.to_le_bytes()]`. The terms (mint, amount,
/// period, destination) never change after creation; each subscription also snapshots them.
#[account]
#[derive(InitSpace, Debug)]
pub struct Plan {
    /// The provider; signs plan management.
    pub authority: Pubkey,
    /// Provider-chosen number, unique per authority.
    pub plan_id: u64,
    /// SPL Token mint of payments.
    pub mint: Pubkey,
    /// Decimals of `mint`, copied at creation for `transfer_checked`.
    pub decimals: u8,
    /// Price per period, in base units of `mint`.
    pub amount: u64,
    /// Billing period, in seconds.
    pub period_secs: i64,
    /// Token account (of `mint`) that receives every payment.
    pub destination: Pubkey,
    /// Who may collect renewals and deduct metered usage (the facilitator).
    pub billing_authority: Pubkey,
    /// Seconds a past-due subscription keeps its place before it expires.
    pub grace_secs: i64,
    pub status: PlanStatus,
    /// Unix seconds.
    pub created_at: i64,
    /// Subscriptions that are not cancelled or expired.
    pub live_subscriptions: u64,
    /// Subscriptions ever created.
    pub total_subscriptions: u64,
    /// Base units ever collected under this plan (periods and metered usage).
    pub total_collected: u64,
    pub bump: u8,
}

#[derive(AnchorSerialize, AnchorDeserialize, Clone, Copy, PartialEq, Eq, InitSpace, Debug)]
pub enum PlanStatus {
    Active,
    /// No new subscribers; existing subscriptions continue.
    Deprecated,
}

impl Plan {
    pub fn validate_terms(amount: u64, period_secs: i64, grace_secs: i64) -> Result<()> {
        require!(amount > 0, BillingError::ZeroAmount);
        require!(
            (MIN_PERIOD_SECS..=MAX_PERIOD_SECS).contains(&period_secs),
            BillingError::InvalidPeriod
        );
        require!(
            (0..=MAX_GRACE_SECS).contains(&grace_secs),
            BillingError::InvalidGrace
        );
        Ok(())
    }

    pub fn record_payment(&mut self, amount: u64) -> Result<()> {
        self.total_collected = self
            .total_collected
            .checked_add(amount)
            .ok_or(BillingError::MathOverflow)?;
        Ok(())
    }
}
