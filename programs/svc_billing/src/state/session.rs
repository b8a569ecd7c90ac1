use anchor_lang::prelude::*;

use crate::constants::{MAX_DISPUTE_SECS, MIN_DISPUTE_SECS};
use crate::errors::BillingError;

/// A payment session (a payment channel): the payer escrows `deposit` in the session's
/// vault, signs cumulative vouchers off chain, and the provider redeems the newest one
/// (recording its claim), then withdraws what was redeemed; what was never redeemed goes
/// back to the payer at close (docs/adr/0024, 0026).
///
/// PDA seeds: `[SESSION_SEED, payer, session_id.to_le_bytes()]`; its address is the
/// voucher's channel id. The vault is the token account at
/// `[VAULT_SEED, session]`, owned by this PDA. A closed session shrinks to a tombstone, an
/// empty account of this program, so its address, and so its vouchers, can never be reused
/// (docs/adr/0037); one whose recipient could not take its due at close keeps its data,
/// status `Closed`, until that is paid out.
#[account]
#[derive(InitSpace, Debug)]
pub struct Session {
    /// The wallet that opened and funds it; signs top-ups and a unilateral close.
    pub payer: Pubkey,
    /// Payer-chosen number, unique per payer.
    pub session_id: u64,
    /// The key whose Ed25519 signature makes a voucher (may differ from the payer's).
    pub signer: Pubkey,
    /// The provider: owner of `recipient`; may close cooperatively at any time.
    pub provider: Pubkey,
    /// Token account (of `mint`) that receives every redeemed amount.
    pub recipient: Pubkey,
    /// The payer's token account that receives what is left at close.
    pub refund: Pubkey,
    pub mint: Pubkey,
    /// Decimals of `mint`, for `transfer_checked`.
    pub decimals: u8,
    /// SPL Token or Token-2022: the mint's owner.
    pub token_program: Pubkey,
    /// The escrow: the token account at `[VAULT_SEED, session]`, owned by the session.
    pub vault: Pubkey,
    /// Base units escrowed so far: the ceiling of any voucher.
    pub deposit: u64,
    /// The highest cumulative amount redeemed; vouchers only ever increase it.
    pub redeemed: u64,
    /// Base units paid out of the vault to `recipient` so far (at most `redeemed`).
    pub withdrawn: u64,
    /// Price per call or unit the gate charges, base units (informational on chain).
    pub price: u64,
    /// Unix seconds after which no new use is sold; the payer may close
    /// `dispute_secs` later.
    pub expires_at: i64,
    /// Seconds between a payer's close request (or expiry) and the payer's close, during
    /// which the provider may still redeem.
    pub dispute_secs: i64,
    /// Unix seconds of the payer's close request; 0 when none.
    pub close_requested_at: i64,
    pub opened_at: i64,
    pub status: SessionStatus,
    pub bump: u8,
    pub vault_bump: u8,
}

#[derive(AnchorSerialize, AnchorDeserialize, Clone, Copy, PartialEq, Eq, InitSpace, Debug)]
pub enum SessionStatus {
    Open,
    /// The payer asked to close: the provider has until the dispute window ends.
    Closing,
    /// Refunded; what the recipient is still owed waits in the vault (`withdraw_session`),
    /// then a second close leaves the tombstone.
    Closed,
}

/// Where `redeem_session` reads and writes a session in place (borsh: no padding; the
/// discriminator first). A redeem touches four fields, so it skips deserializing all twenty
/// (about 1,000 compute units); `tests::offsets_match_the_layout` holds these to the struct.
pub mod layout {
    use anchor_lang::Space;

    pub const LEN: usize = 8 + super::Session::INIT_SPACE;
    pub const SIGNER: usize = 48;
    pub const DEPOSIT: usize = 273;
    pub const REDEEMED: usize = 281;
    pub const STATUS: usize = 337;
    /// `SessionStatus::Closed` as borsh writes it.
    pub const CLOSED: u8 = 2;
}

impl Session {
    pub fn validate_terms(
        deposit: u64,
        expires_at: i64,
        dispute_secs: i64,
        now: i64,
    ) -> Result<()> {
        require!(deposit > 0, BillingError::ZeroAmount);
        require!(expires_at > now, BillingError::InvalidExpiry);
        require!(
            (MIN_DISPUTE_SECS..=MAX_DISPUTE_SECS).contains(&dispute_secs),
            BillingError::InvalidDispute
        );
        Ok(())
    }

    /// Base units a voucher for `cumulative` adds to what was redeemed; refuses one that is
    /// not newer or exceeds the deposit.
    pub fn payout(&self, cumulative: u64) -> Result<u64> {
        require!(cumulative > self.redeemed, BillingError::VoucherNotNewer);
        require!(cumulative <= self.deposit, BillingError::VoucherOverDeposit);
        Ok(cumulative - self.redeemed)
    }

    /// What the vault holds for the payer: deposited and not redeemed.
    pub fn unredeemed(&self) -> u64 {
        self.deposit.saturating_sub(self.redeemed)
    }

    /// Redeemed and not yet paid out to the recipient.
    pub fn owed(&self) -> u64 {
        self.redeemed.saturating_sub(self.withdrawn)
    }

    /// Whether the payer may close alone at `now`: the dispute window after its close
    /// request, or after expiry, has passed.
    pub fn payer_may_close(&self, now: i64) -> bool {
        let after = |t: i64| {
            t.checked_add(self.dispute_secs)
                .is_some_and(|end| now >= end)
        };
        (self.status == SessionStatus::Closing && after(self.close_requested_at))
            || after(self.expires_at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session(deposit: u64, redeemed: u64) -> Session {
        Session {
            payer: Pubkey::default(),
            session_id: 1,
            signer: Pubkey::default(),
            provider: Pubkey::default(),
            recipient: Pubkey::default(),
            refund: Pubkey::default(),
            mint: Pubkey::default(),
            decimals: 6,
            token_program: Pubkey::default(),
            vault: Pubkey::default(),
            deposit,
            redeemed,
            withdrawn: 0,
            price: 1,
            expires_at: 1_000,
            dispute_secs: 100,
            close_requested_at: 0,
            opened_at: 0,
            status: SessionStatus::Open,
            bump: 255,
            vault_bump: 255,
        }
    }

    #[test]
    fn offsets_match_the_layout() {
        let mut s = session(0x0102_0304_0506_0708, 0x1112_1314_1516_1718);
        s.signer = Pubkey::new_from_array([7; 32]);
        s.status = SessionStatus::Closed;
        let mut bytes = Session::DISCRIMINATOR.to_vec();
        s.serialize(&mut bytes).unwrap();
        assert_eq!(bytes.len(), layout::LEN);
        let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
        assert_eq!(bytes[layout::SIGNER..layout::SIGNER + 32], [7; 32]);
        assert_eq!(u64_at(layout::DEPOSIT), s.deposit);
        assert_eq!(u64_at(layout::REDEEMED), s.redeemed);
        assert_eq!(bytes[layout::STATUS], layout::CLOSED);
    }

    #[test]
    fn a_voucher_pays_the_difference_once_and_never_past_the_deposit() {
        let s = session(100, 40);
        assert_eq!(s.payout(41).unwrap(), 1);
        assert_eq!(s.payout(100).unwrap(), 60);
        assert!(s.payout(40).is_err()); // a replay
        assert!(s.payout(39).is_err()); // a decrease
        assert!(s.payout(101).is_err()); // over the deposit
        assert_eq!(s.unredeemed(), 60);
    }

    #[test]
    fn the_payer_closes_alone_only_after_the_dispute_window() {
        let mut s = session(100, 0);
        assert!(!s.payer_may_close(1_099));
        assert!(s.payer_may_close(1_100)); // expiry + dispute
        s.status = SessionStatus::Closing;
        s.close_requested_at = 500;
        assert!(!s.payer_may_close(599));
        assert!(s.payer_may_close(600));
        s.expires_at = i64::MAX; // no overflow
        s.status = SessionStatus::Open;
        assert!(!s.payer_may_close(i64::MAX));
    }

    #[test]
    fn terms_are_checked() {
        assert!(Session::validate_terms(1, 11, MIN_DISPUTE_SECS, 10).is_ok());
        assert!(Session::validate_terms(0, 11, MIN_DISPUTE_SECS, 10).is_err());
        assert!(Session::validate_terms(1, 10, MIN_DISPUTE_SECS, 10).is_err());
        assert!(Session::validate_terms(1, 11, MAX_DISPUTE_SECS + 1, 10).is_err());
    }
}
