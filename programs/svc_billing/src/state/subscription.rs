use anchor_lang::prelude::*;

use crate::errors::BillingError;

/// One subscriber's subscription to one plan. Its address is the subscription id.
///
/// PDA seeds: `[SUBSCRIPTION_SEED, plan, subscriber]`.
#[account]
#[derive(InitSpace, Debug)]
pub struct Subscription {
    pub plan: Pubkey,
    pub subscriber: Pubkey,
    /// The subscriber's token account that pays (its delegate is the delegate PDA).
    pub token_account: Pubkey,
    /// The plan's terms at subscribe time; later plan changes never reach them.
    pub terms: Terms,
    pub status: SubscriptionStatus,
    /// Ends at `current_period_end` instead of renewing.
    pub cancel_at_period_end: bool,
    /// Unix seconds.
    pub created_at: i64,
    /// Start of the period paid for, unix seconds.
    pub current_period_start: i64,
    /// End of the period paid for; the next renewal is due from here. Unix seconds.
    pub current_period_end: i64,
    /// When a renewal first failed; 0 unless past due. Unix seconds.
    pub past_due_since: i64,
    /// Periods paid for, the first included.
    pub cycles_billed: u64,
    /// Base units paid, periods and metered usage.
    pub total_paid: u64,
    pub has_allowance: bool,
    pub bump: u8,
    /// Bump of the subscriber's delegate PDA.
    pub delegate_bump: u8,
}

#[derive(AnchorSerialize, AnchorDeserialize, Clone, Copy, PartialEq, Eq, InitSpace, Debug)]
pub struct Terms {
    pub mint: Pubkey,
    pub decimals: u8,
    /// Base units per period.
    pub amount: u64,
    pub period_secs: i64,
    pub destination: Pubkey,
}

#[derive(AnchorSerialize, AnchorDeserialize, Clone, Copy, PartialEq, Eq, InitSpace, Debug)]
pub enum SubscriptionStatus {
    Active,
    /// A renewal failed; access stops, the subscription waits for funds until grace ends.
    PastDue,
    Paused,
    Cancelled,
    /// Grace ran out without payment.
    Expired,
}

impl Subscription {
    /// End of a period that starts at `start`.
    pub fn period_end(start: i64, period_secs: i64) -> Result<i64> {
        start
            .checked_add(period_secs)
            .ok_or_else(|| error!(BillingError::MathOverflow))
    }

    pub fn record_payment(&mut self, amount: u64) -> Result<()> {
        self.total_paid = self
            .total_paid
            .checked_add(amount)
            .ok_or(BillingError::MathOverflow)?;
        Ok(())
    }
}
