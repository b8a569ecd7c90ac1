use anchor_lang::prelude::*;

use crate::constants::BPS_DENOMINATOR;
use crate::errors::BillingError;

/// Metered overage budget of one subscription, reset at each successful renewal.
///
/// PDA seeds: `[ALLOWANCE_SEED, subscription]`.
#[account]
#[derive(InitSpace, Debug)]
pub struct Allowance {
    pub subscription: Pubkey,
    /// Most that may be deducted per cycle, base units.
    pub cap: u64,
    /// Deducted in the current cycle, base units.
    pub used: u64,
    /// Deducted over the subscription's life, base units.
    pub total_deducted: u64,
    /// The subscription's `cycles_billed` when this cycle began.
    pub cycle: u64,
    pub bump: u8,
}

impl Allowance {
    pub fn remaining(&self) -> u64 {
        self.cap.saturating_sub(self.used)
    }

    /// Records a deduction of `amount`, refusing to pass the cap.
    pub fn deduct(&mut self, amount: u64) -> Result<()> {
        require!(amount > 0, BillingError::ZeroAmount);
        let used = self
            .used
            .checked_add(amount)
            .ok_or(BillingError::MathOverflow)?;
        require!(used <= self.cap, BillingError::AllowanceExhausted);
        self.used = used;
        self.total_deducted = self
            .total_deducted
            .checked_add(amount)
            .ok_or(BillingError::MathOverflow)?;
        Ok(())
    }

    /// Starts a new metered cycle (after a successful renewal).
    pub fn reset(&mut self, cycle: u64) {
        self.used = 0;
        self.cycle = cycle;
    }

    /// `used / cap` in basis points, rounded down. The product needs 128 bits.
    pub fn used_bps(&self) -> u16 {
        if self.cap == 0 {
            return BPS_DENOMINATOR as u16;
        }
        let bps = u128::from(self.used) * u128::from(BPS_DENOMINATOR) / u128::from(self.cap);
        bps.min(u128::from(BPS_DENOMINATOR)) as u16
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allowance(cap: u64, used: u64) -> Allowance {
        Allowance {
            subscription: Pubkey::default(),
            cap,
            used,
            total_deducted: used,
            cycle: 0,
            bump: 0,
        }
    }

    #[test]
    fn deduct_up_to_the_cap_then_refuse() {
        let mut a = allowance(100, 0);
        a.deduct(60).unwrap();
        a.deduct(40).unwrap();
        assert_eq!((a.used, a.remaining(), a.total_deducted), (100, 0, 100));
        assert!(a.deduct(1).is_err());
        assert_eq!(a.used, 100);
    }

    #[test]
    fn zero_and_overflowing_deductions_are_refused() {
        let mut a = allowance(u64::MAX, u64::MAX - 1);
        assert!(a.deduct(0).is_err());
        assert!(a.deduct(2).is_err());
        a.deduct(1).unwrap();
        assert_eq!(a.remaining(), 0);
    }

    #[test]
    fn used_bps_handles_huge_amounts() {
        assert_eq!(allowance(u64::MAX, u64::MAX / 2).used_bps(), 4_999);
        assert_eq!(allowance(3, 1).used_bps(), 3_333);
        assert_eq!(allowance(0, 0).used_bps(), 10_000);
    }
}
