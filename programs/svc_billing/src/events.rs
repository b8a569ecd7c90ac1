//! Every instruction that moves money or changes state emits one of these, with amounts
//! in base units and the resulting state. Webhooks and analytics are built from them.
use anchor_lang::prelude::*;

use crate::state::{Plan, PlanStatus, SessionStatus, Subscription, SubscriptionStatus};

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
    /// First period's charge, already transferred (gross: what the subscriber paid).
    pub amount: u64,
    /// Withheld by a Token-2022 transfer-fee mint (0 otherwise); `net` reached the provider.
    pub fee: u64,
    pub net: u64,
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
    /// Deducted from the allowance and paid (gross); `fee` withheld by a transfer-fee mint,
    /// `net` received.
    pub amount: u64,
    pub fee: u64,
    pub net: u64,
    /// Used in this cycle after the deduction.
    pub used: u64,
    pub cap: u64,
    pub remaining: u64,
    /// `used / cap` in basis points, for "nearly exhausted" alerts.
    pub used_bps: u16,
}

#[event]
pub struct SubscriptionRenewed {
    pub subscription: Pubkey,
    pub plan: Pubkey,
    /// Charged for the new period, already transferred (gross); `fee` withheld by a
    /// transfer-fee mint, `net` received.
    pub amount: u64,
    pub fee: u64,
    pub net: u64,
    pub period_start: i64,
    pub period_end: i64,
    pub cycles_billed: u64,
    /// True when this renewal ended a past-due spell.
    pub recovered: bool,
}

#[event]
pub struct RenewalFailed {
    pub subscription: Pubkey,
    pub plan: Pubkey,
    /// The amount that could not be collected.
    pub amount: u64,
    pub reason: RenewalFailure,
    pub past_due_since: i64,
    /// The subscription expires if still unpaid after this time (unix seconds).
    pub grace_deadline: i64,
}

#[event]
pub struct SubscriptionEnded {
    pub subscription: Pubkey,
    pub plan: Pubkey,
    /// Cancelled (at period end) or Expired (grace ran out).
    pub status: SubscriptionStatus,
    pub at: i64,
}

/// Why a renewal could not be collected.
#[derive(AnchorSerialize, AnchorDeserialize, Clone, Copy, PartialEq, Eq, Debug)]
pub enum RenewalFailure {
    InsufficientFunds,
    /// The subscriber revoked or replaced the program's delegation.
    DelegationMissing,
    /// The funding token account is closed, frozen or no longer the subscriber's.
    TokenAccountUnusable,
    /// The mint's pause authority paused all transfers (Token-2022 Pausable).
    MintPaused,
}

#[event]
pub struct SubscriptionStatusChanged {
    pub subscription: Pubkey,
    pub plan: Pubkey,
    /// Who asked: the subscriber or the plan's authority.
    pub by: Pubkey,
    pub status: SubscriptionStatus,
    pub cancel_at_period_end: bool,
    pub current_period_end: i64,
}

impl SubscriptionStatusChanged {
    /// Emits the subscription's new status, as changed by `by`.
    pub fn emit_for(sub: &Account<Subscription>, by: &Pubkey) {
        emit!(SubscriptionStatusChanged {
            subscription: sub.key(),
            plan: sub.plan,
            by: *by,
            status: sub.status,
            cancel_at_period_end: sub.cancel_at_period_end,
            current_period_end: sub.current_period_end,
        });
    }
}

#[event]
pub struct AllowanceCapChanged {
    pub subscription: Pubkey,
    pub allowance: Pubkey,
    pub old_cap: u64,
    pub new_cap: u64,
    pub used: u64,
}

#[event]
pub struct PlanChanged {
    pub plan: Pubkey,
    pub status: PlanStatus,
    pub billing_authority: Pubkey,
    pub grace_secs: i64,
    pub live_subscriptions: u64,
}

impl PlanChanged {
    /// Emits the plan's state after a change.
    pub fn emit_for(plan: &Account<Plan>) {
        emit!(PlanChanged {
            plan: plan.key(),
            status: plan.status,
            billing_authority: plan.billing_authority,
            grace_secs: plan.grace_secs,
            live_subscriptions: plan.live_subscriptions,
        });
    }
}

#[event]
pub struct PlanClosed {
    pub plan: Pubkey,
    pub authority: Pubkey,
    pub total_collected: u64,
}

#[event]
pub struct SubscriptionClosed {
    pub subscription: Pubkey,
    pub plan: Pubkey,
    pub subscriber: Pubkey,
    /// Cancelled or Expired.
    pub status: SubscriptionStatus,
    pub total_paid: u64,
}

#[event]
pub struct SessionOpened {
    pub session: Pubkey,
    pub payer: Pubkey,
    pub signer: Pubkey,
    pub recipient: Pubkey,
    pub mint: Pubkey,
    /// What the vault received: the ceiling of vouchers.
    pub deposit: u64,
    /// Withheld by a Token-2022 transfer-fee mint on the way in (0 otherwise).
    pub fee: u64,
    pub price: u64,
    pub expires_at: i64,
    pub dispute_secs: i64,
}

#[event]
pub struct SessionToppedUp {
    pub session: Pubkey,
    /// What the vault received; `fee` was withheld on the way in by a transfer-fee mint.
    pub amount: u64,
    pub fee: u64,
    /// The deposit after the top-up.
    pub deposit: u64,
    pub expires_at: i64,
}

#[event]
pub struct SessionRedeemed {
    pub session: Pubkey,
    /// Base units this redeem adds to the recipient's claim (paid by `withdraw_session`).
    pub amount: u64,
    /// The voucher's cumulative amount, now the session's `redeemed`.
    pub cumulative: u64,
    pub deposit: u64,
}

#[event]
pub struct SessionWithdrawn {
    pub session: Pubkey,
    /// Base units paid out of the vault by this withdrawal (gross); `fee` withheld by a
    /// transfer-fee mint, `net` received.
    pub amount: u64,
    pub fee: u64,
    pub net: u64,
    /// Paid out in all, now equal to `redeemed`.
    pub withdrawn: u64,
}

#[event]
pub struct SessionCloseRequested {
    pub session: Pubkey,
    /// The provider may redeem until this time; then the payer may close.
    pub dispute_ends_at: i64,
}

#[event]
pub struct SessionClosed {
    pub session: Pubkey,
    /// Who closed it: the provider (cooperative) or the payer (after the dispute window).
    pub closed_by: Pubkey,
    pub redeemed: u64,
    /// Base units returned to the payer.
    pub refunded: u64,
    pub status: SessionStatus,
    /// Redeemed base units the recipient could not take at close (its account closed,
    /// frozen or requiring memos): they stay in the vault for `withdraw_session`, and the
    /// rent comes back at the close that follows. 0 when the session is gone (docs/adr/0037).
    pub unpaid: u64,
}
