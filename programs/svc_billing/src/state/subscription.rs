use anchor_lang::prelude::*;

use crate::errors::BillingError;

/// One subscriber's subscription to one plan. Its address is the subscription id.
///
/// PDA seeds: `[SUBSCRIPTION_SEED, plan, subscriber]`. One address per (plan, subscriber):
/// subscribing again after the subscription ended starts a new one in place (docs/adr/0015).
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
    /// Who asked for `cancel_at_period_end`; only they can withdraw it (docs/adr/0014).
    pub cancel_requested_by: Option<Party>,
    /// Who paused; only they can resume. `None` unless paused.
    pub paused_by: Option<Party>,
    /// Unix seconds.
    pub created_at: i64,
    /// Start of the period paid for, unix seconds.
    pub current_period_start: i64,
    /// End of the period paid for; the next renewal is due from here. Unix seconds.
    pub current_period_end: i64,
    /// When a renewal first failed; 0 unless past due. Unix seconds.
    pub past_due_since: i64,
    /// When the subscription was paused; 0 unless paused. Unix seconds.
    pub paused_at: i64,
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

/// Which side of a subscription made a decision that the other side cannot undo.
#[derive(AnchorSerialize, AnchorDeserialize, Clone, Copy, PartialEq, Eq, InitSpace, Debug)]
pub enum Party {
    Subscriber,
    /// The plan's authority.
    Provider,
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

    /// Start of the period that a successful renewal at `now` pays for.
    ///
    /// On time, or less than one whole period late: the due date, so the cadence holds.
    /// Later than that, or when recovering from past due (access was refused meanwhile):
    /// `now`. Periods nobody renewed are never charged.
    pub fn renewal_start(period_end: i64, period_secs: i64, now: i64, was_past_due: bool) -> i64 {
        if was_past_due || now.saturating_sub(period_end) >= period_secs {
            now
        } else {
            period_end
        }
    }

    /// When a past-due subscription expires: `grace_secs` after the first failed renewal.
    pub fn grace_deadline(&self, grace_secs: i64) -> Result<i64> {
        self.past_due_since
            .checked_add(grace_secs)
            .ok_or_else(|| error!(BillingError::MathOverflow))
    }

    /// End of the current period after a resume at `now`: the paid time left when it was
    /// paused is credited from `now` (a pause never eats paid time). Already due: `now`.
    pub fn resumed_period_end(period_end: i64, paused_at: i64, now: i64) -> Result<i64> {
        let remaining = period_end.saturating_sub(paused_at).max(0);
        now.checked_add(remaining)
            .ok_or_else(|| error!(BillingError::MathOverflow))
    }

    /// Which party `signer` is: the subscriber (who wins when they are also the provider),
    /// the plan's authority, or neither.
    pub fn party_of(&self, signer: &Pubkey, plan_authority: &Pubkey) -> Option<Party> {
        if signer == &self.subscriber {
            Some(Party::Subscriber)
        } else if signer == plan_authority {
            Some(Party::Provider)
        } else {
            None
        }
    }

    /// Whether the subscription still counts as live (not cancelled or expired).
    pub fn is_live(&self) -> bool {
        !matches!(
            self.status,
            SubscriptionStatus::Cancelled | SubscriptionStatus::Expired
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: i64 = 86_400;

    #[test]
    fn renewal_on_time_or_slightly_late_keeps_the_cadence() {
        let end = 1_000 * DAY;
        assert_eq!(Subscription::renewal_start(end, 30 * DAY, end, false), end);
        assert_eq!(
            Subscription::renewal_start(end, 30 * DAY, end + 29 * DAY, false),
            end
        );
    }

    #[test]
    fn renewal_a_whole_period_late_starts_now() {
        let end = 1_000 * DAY;
        let now = end + 30 * DAY;
        assert_eq!(Subscription::renewal_start(end, 30 * DAY, now, false), now);
        assert_eq!(
            Subscription::renewal_start(end, 30 * DAY, end + 95 * DAY, false),
            end + 95 * DAY
        );
    }

    #[test]
    fn recovery_from_past_due_starts_now() {
        let end = 1_000 * DAY;
        assert_eq!(
            Subscription::renewal_start(end, 30 * DAY, end + DAY, true),
            end + DAY
        );
    }

    #[test]
    fn resume_credits_the_paid_time_left_at_pause() {
        let end = 1_000 * DAY;
        // Paused with 10 days left, resumed 40 days later: 10 days from the resume.
        let resumed = Subscription::resumed_period_end(end, end - 10 * DAY, end + 30 * DAY);
        assert_eq!(resumed.unwrap(), end + 40 * DAY);
        // Paused when already due: due at once on resume.
        let resumed = Subscription::resumed_period_end(end, end + DAY, end + 5 * DAY);
        assert_eq!(resumed.unwrap(), end + 5 * DAY);
        assert!(Subscription::resumed_period_end(i64::MAX, 0, i64::MAX).is_err());
    }

    #[test]
    fn the_subscriber_is_the_subscriber_even_as_the_provider() {
        let (subscriber, provider) = (Pubkey::new_unique(), Pubkey::new_unique());
        let sub = Subscription {
            plan: Pubkey::default(),
            subscriber,
            token_account: Pubkey::default(),
            terms: Terms {
                mint: Pubkey::default(),
                decimals: 6,
                amount: 1,
                period_secs: DAY,
                destination: Pubkey::default(),
            },
            status: SubscriptionStatus::Active,
            cancel_at_period_end: false,
            cancel_requested_by: None,
            paused_by: None,
            created_at: 0,
            current_period_start: 0,
            current_period_end: DAY,
            past_due_since: 0,
            paused_at: 0,
            cycles_billed: 1,
            total_paid: 1,
            has_allowance: false,
            bump: 255,
            delegate_bump: 255,
        };
        assert_eq!(
            sub.party_of(&subscriber, &provider),
            Some(Party::Subscriber)
        );
        assert_eq!(sub.party_of(&provider, &provider), Some(Party::Provider));
        assert_eq!(
            sub.party_of(&subscriber, &subscriber),
            Some(Party::Subscriber)
        );
        assert_eq!(sub.party_of(&Pubkey::new_unique(), &provider), None);
    }

    #[test]
    fn renewal_start_survives_extreme_times() {
        assert_eq!(
            Subscription::renewal_start(i64::MAX, 1, i64::MIN, false),
            i64::MAX
        );
        assert_eq!(
            Subscription::renewal_start(i64::MIN, 1, i64::MAX, false),
            i64::MAX
        );
    }
}
