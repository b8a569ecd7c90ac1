//! One error enum; each message states the rule that was broken. The first names are the
//! specification's; clients map codes (6000 + index) to exceptions of the same name. Append
//! new errors at the end: a code, once released, never changes meaning.
use anchor_lang::prelude::*;

#[error_code]
pub enum BillingError {
    #[msg("the subscriber's token account holds less than the amount due")]
    InsufficientFunds,
    #[msg("the subscription must be ACTIVE for this operation")]
    SubscriptionNotActive,
    #[msg("this deduction would take usage past the allowance cap for the cycle")]
    AllowanceExhausted,
    #[msg("the plan accepts no new subscribers")]
    PlanDeprecated,
    #[msg("amounts must be greater than zero")]
    ZeroAmount,
    #[msg("period_secs must lie between MIN_PERIOD_SECS and MAX_PERIOD_SECS")]
    InvalidPeriod,
    #[msg("grace_secs must lie between 0 and MAX_GRACE_SECS")]
    InvalidGrace,
    #[msg("an amount or timestamp left its numeric range")]
    MathOverflow,
    #[msg("the signer is not allowed to perform this operation")]
    Unauthorized,
    #[msg("the current period has not ended yet")]
    NotDue,
    #[msg("this subscription has no allowance; set_allowance_cap adds one")]
    NoAllowance,
    #[msg("the token account or mint does not match the plan's mint")]
    MintMismatch,
    #[msg("payments may only go to the plan's destination account")]
    DestinationMismatch,
    #[msg("the token account no longer delegates enough to the program; subscribe again to restore it")]
    DelegationMissing,
    #[msg("the token account is not the subscription's funding account")]
    TokenAccountMismatch,
    #[msg("the subscription is not paused")]
    NotPaused,
    #[msg("the subscription has already ended (cancelled or expired)")]
    SubscriptionEnded,
    #[msg("the plan still has live subscriptions; they must end before it closes")]
    PlanHasSubscribers,
    #[msg("only a cancelled or expired subscription can be closed")]
    SubscriptionStillLive,
    #[msg("only the party who paused or scheduled the cancel can withdraw it")]
    NotYourDecision,
    #[msg("the subscriber already holds a live subscription to this plan")]
    AlreadySubscribed,
    #[msg("the delegate is not the subscriber's delegate PDA")]
    WrongDelegate,
    #[msg("the same account was passed where two different accounts are required")]
    DuplicateAccount,
    #[msg("the transaction carries no Ed25519 signature by the session key over this voucher")]
    VoucherNotSigned,
    #[msg("a voucher's cumulative amount must exceed what was already redeemed")]
    VoucherNotNewer,
    #[msg("a voucher's cumulative amount must not exceed the session's deposit")]
    VoucherOverDeposit,
    #[msg("the voucher has expired")]
    VoucherExpired,
    #[msg("the session's expiry must be later than now and never earlier than before")]
    InvalidExpiry,
    #[msg("dispute_secs must lie between MIN_DISPUTE_SECS and MAX_DISPUTE_SECS")]
    InvalidDispute,
    #[msg("the session is closed")]
    SessionClosed,
    #[msg("the payer may close alone only after the dispute window")]
    DisputeWindowOpen,
    #[msg("the session must be open (not closing) for this operation")]
    SessionNotOpen,
    #[msg("the mint is non-transferable: its tokens cannot pay a plan")]
    MintNonTransferable,
    #[msg("the mint has a Token-2022 extension this program does not know")]
    UnsupportedMintExtension,
    #[msg("the destination requires a memo on incoming transfers: turn memo-required off")]
    DestinationRequiresMemo,
    #[msg("the token account's CPI guard is on: turn it off to let the program take payments")]
    CpiGuardEnabled,
    #[msg("the session key must be a usable Ed25519 key other than the provider's")]
    InvalidSessionKey,
}
