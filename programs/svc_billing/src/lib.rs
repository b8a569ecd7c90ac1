//! svc_billing: plans, subscriptions and metered allowances for svcpay.
//!
//! A provider publishes a [`state::Plan`]; a subscriber's [`state::Subscription`] pays the
//! first period at once and is renewed by the plan's billing authority (the facilitator);
//! an optional [`state::Allowance`] caps metered usage per cycle. Funds stay in the
//! subscriber's token account, delegated to a per-subscriber PDA, until a rule of this
//! program moves them. `lib.rs` only dispatches; each instruction lives in its own file.
// The registry-only build defines the i128 builtins with rustc's internal "unadjusted" ABI.
#![cfg_attr(target_arch = "bpf", feature(abi_unadjusted))]

use anchor_lang::prelude::*;

pub mod constants;
pub mod errors;
pub mod events;
pub mod instructions;
pub mod state;
pub mod token_view;
pub mod transfer;
pub mod voucher;

#[cfg(target_arch = "bpf")]
mod sbf_builtins;

use instructions::*;

// Upstream LLVM's BPF target (the registry-only build) takes memcpy/memset (as syscalls)
// and soft-float helpers from this crate; platform-tools builds (arch "sbf") have their
// own. Its i128 helpers are weak and lose to `sbf_builtins`.
#[cfg(target_arch = "bpf")]
use solana_compiler_builtins as _;

declare_id!("E9RiTLt2qicJA6eaG4vWPmVAdPGmZQENekQCsxebZWAj");

// Who to tell about a vulnerability, readable from the deployed binary (`query-security-txt`,
// explorers). The policy is SECURITY.md.
#[cfg(not(feature = "no-entrypoint"))]
solana_security_txt::security_txt! {
    name: "svcpay svc_billing",
    project_url: "https://svcpay.dev",
    contacts: "email:security@svcpay.dev",
    policy: "https://svcpay.dev/security (SECURITY.md in the source)",
    preferred_languages: "en",
    source_code: "https://svcpay.dev/source",
    auditors: "None"
}

#[program]
pub mod svc_billing {
    use super::*;

    /// Publishes a plan: `amount` of `mint` every `period_secs`, paid to `destination`.
    #[access_control(ctx.accounts.validate(&args))]
    pub fn create_plan(ctx: Context<CreatePlan>, args: CreatePlanArgs) -> Result<()> {
        CreatePlan::handler(ctx, args)
    }

    /// Changes the billing authority or the grace period (provider). Never the terms.
    #[access_control(ctx.accounts.validate_update(&args))]
    pub fn update_plan(ctx: Context<ManagePlan>, args: UpdatePlanArgs) -> Result<()> {
        ManagePlan::update(ctx, args)
    }

    /// Stops new subscriptions (provider); existing ones continue.
    pub fn deprecate_plan(ctx: Context<ManagePlan>) -> Result<()> {
        ManagePlan::deprecate(ctx)
    }

    /// Closes a plan without live subscriptions; rent back to the provider.
    pub fn close_plan(ctx: Context<ClosePlan>) -> Result<()> {
        ClosePlan::handler(ctx)
    }

    /// Creates a subscription (and, with `max_overage`, its allowance), delegates the
    /// subscriber's token account to the program and charges the first period. After the
    /// subscriber's previous subscription to the plan ended, starts a new one in its place.
    #[access_control(ctx.accounts.validate(&args))]
    pub fn subscribe<'info>(
        ctx: Context<'info, Subscribe<'info>>,
        args: SubscribeArgs,
    ) -> Result<()> {
        Subscribe::handler(ctx, args)
    }

    /// Renews a subscription whose period ended (anyone may call): charges one period and
    /// resets the allowance, or records the failure (past due, then expiry after grace),
    /// or ends a subscription cancelled at period end.
    #[access_control(ctx.accounts.validate())]
    pub fn collect<'info>(ctx: Context<'info, Collect<'info>>) -> Result<()> {
        Collect::handler(ctx)
    }

    /// Closes an ended subscription and its allowance; rent back to the subscriber.
    #[access_control(ctx.accounts.validate())]
    pub fn close_subscription(ctx: Context<CloseSubscription>) -> Result<()> {
        CloseSubscription::handler(ctx)
    }

    /// Pauses an ACTIVE subscription (subscriber or provider): no access, no renewals.
    #[access_control(ctx.accounts.validate_pause())]
    pub fn pause(ctx: Context<ChangeSubscription>) -> Result<()> {
        ChangeSubscription::pause(ctx)
    }

    /// Resumes a paused subscription, crediting the paid time left, or withdraws a pending
    /// cancel-at-period-end; only the party who paused or cancelled may.
    #[access_control(ctx.accounts.validate_resume())]
    pub fn resume(ctx: Context<ChangeSubscription>) -> Result<()> {
        ChangeSubscription::resume(ctx)
    }

    /// Cancels now (subscriber or provider), or at the end of the paid period.
    #[access_control(ctx.accounts.validate_cancel())]
    pub fn cancel(ctx: Context<ChangeSubscription>, at_period_end: bool) -> Result<()> {
        ChangeSubscription::cancel(ctx, at_period_end)
    }

    /// Sets the metered cap per cycle (subscriber), adding the allowance to a live
    /// subscription made without one.
    #[access_control(ctx.accounts.validate(cap))]
    pub fn set_allowance_cap(ctx: Context<SetAllowanceCap>, cap: u64) -> Result<()> {
        SetAllowanceCap::handler(ctx, cap)
    }

    /// Charges `amount` of metered usage against the allowance of an ACTIVE subscription.
    #[access_control(ctx.accounts.validate(amount))]
    pub fn deduct_allowance<'info>(
        ctx: Context<'info, DeductAllowance<'info>>,
        amount: u64,
    ) -> Result<()> {
        DeductAllowance::handler(ctx, amount)
    }

    /// Opens a payment session: escrows `deposit` in the session's vault for vouchers
    /// signed by `signer` (docs/adr/0024).
    #[access_control(ctx.accounts.validate(&args))]
    pub fn open_session<'info>(
        ctx: Context<'info, OpenSession<'info>>,
        args: OpenSessionArgs,
    ) -> Result<()> {
        OpenSession::handler(ctx, args)
    }

    /// Adds `amount` to an open session's deposit (payer); `expires_at` may extend it.
    #[access_control(ctx.accounts.validate(amount, expires_at))]
    pub fn top_up_session<'info>(
        ctx: Context<'info, TopUpSession<'info>>,
        amount: u64,
        expires_at: Option<i64>,
    ) -> Result<()> {
        TopUpSession::handler(ctx, amount, expires_at)
    }

    /// Records a voucher, verified by the Ed25519 precompile in the same transaction, as
    /// the recipient's claim (anyone may send it; no money moves).
    pub fn redeem_session(ctx: Context<RedeemSession>, args: RedeemArgs) -> Result<()> {
        RedeemSession::handler(ctx, args)
    }

    /// Pays the recipient what was redeemed and not yet paid out (anyone may send it).
    pub fn withdraw_session<'info>(ctx: Context<'info, WithdrawSession<'info>>) -> Result<()> {
        WithdrawSession::handler(ctx)
    }

    /// The payer asks to close: the dispute window starts.
    pub fn request_close_session(ctx: Context<RequestCloseSession>) -> Result<()> {
        RequestCloseSession::handler(ctx)
    }

    /// Refunds the rest, pays the recipient its due if its account takes it, closes the
    /// vault and shrinks the session to a tombstone (rents to the payer): the provider at
    /// any time, the payer after the dispute window. A due the recipient cannot take waits
    /// in the vault for `withdraw_session` and a second close (docs/adr/0037).
    pub fn close_session<'info>(ctx: Context<'info, CloseSession<'info>>) -> Result<()> {
        CloseSession::handler(ctx)
    }
}
