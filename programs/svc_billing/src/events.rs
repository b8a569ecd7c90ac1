//! Every instruction that moves money or changes state emits one of these, with amounts
//! in base units and the resulting state. Webhooks and analytics are built from them.
use anchor_lang::prelude::*;

use crate::state::SubscriptionStatus;

#[event]
pub struct PlanCreated {
    pub plan: Pubkey,
    pub authority: Pubkey,
    pub plan_id: u64,
    pub mint: Pubkey,
    pub amount: u64,
    pub period_secs: i64,
    pub destination: Pubkey,
    pub billing_authority: Pubkey,
}

#[event]
pub struct SubscriptionCreated {
    pub subscription: Pubkey,
    pub plan: Pubkey,
    pub subscriber: Pubkey,
    /// First period's charge, already transferred.
    pub amount: u64,
    pub period_start: i64,
    pub period_end: i64,
    /// Metered allowance cap per cycle; 0 when the subscription has no allowance.
    pub max_overage: u64,
    pub status: SubscriptionStatus,
}

#[event]
pub struct AllowanceDeducted {
    pub subscription: Pubkey,
    pub allowance: Pubkey,
    pub amount: u64,
    /// Used in this cycle after the deduction.
    pub used: u64,
    pub cap: u64,
    pub remaining: u64,
    /// `used / cap` in basis points, for "nearly exhausted" alerts.
    pub used_bps: u16,
}
