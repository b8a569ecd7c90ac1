//! Seeds and limits. Each seed is defined once here; `#[constant]` puts it in the IDL so
//! clients derive the same addresses (the Python toolkit checks itself against the IDL).
use anchor_lang::prelude::*;

/// Plan PDA: `[PLAN_SEED, authority, plan_id (u64 LE)]`.
#[constant]
pub const PLAN_SEED: &[u8] = b"plan";

/// Subscription PDA: `[SUBSCRIPTION_SEED, plan, subscriber]`. Its address is the
/// subscription id clients send in `X-Svc-Sub`.
#[constant]
pub const SUBSCRIPTION_SEED: &[u8] = b"subscription";

/// Allowance PDA: `[ALLOWANCE_SEED, subscription]`.
#[constant]
pub const ALLOWANCE_SEED: &[u8] = b"allowance";

/// Delegate PDA: `[DELEGATE_SEED, subscriber]`. The single SPL delegate of a subscriber's
/// token accounts; the program alone decides what it may pull (see docs/adr/0003).
#[constant]
pub const DELEGATE_SEED: &[u8] = b"delegate";

/// Session PDA: `[SESSION_SEED, payer, session_id (u64 LE)]`; its address is the channel id
/// its vouchers name.
#[constant]
pub const SESSION_SEED: &[u8] = b"session";

/// A session's vault (a token account it owns): `[VAULT_SEED, session]`.
#[constant]
pub const VAULT_SEED: &[u8] = b"vault";

/// Shortest dispute window of a session, in seconds (short so tests run on a real
/// validator; gates refuse sessions whose window is too short for them to redeem).
#[constant]
pub const MIN_DISPUTE_SECS: i64 = 1;

/// Longest dispute window of a session, in seconds (30 days).
#[constant]
pub const MAX_DISPUTE_SECS: i64 = 30 * 24 * 60 * 60;

/// Shortest billing period, in seconds. Short periods let tests renew on a real validator.
#[constant]
pub const MIN_PERIOD_SECS: i64 = 1;

/// Longest billing period, in seconds (366 days).
#[constant]
pub const MAX_PERIOD_SECS: i64 = 366 * 24 * 60 * 60;

/// Longest grace period after a failed renewal, in seconds (90 days).
#[constant]
pub const MAX_GRACE_SECS: i64 = 90 * 24 * 60 * 60;

/// Basis points in one whole (100%).
pub const BPS_DENOMINATOR: u64 = 10_000;
