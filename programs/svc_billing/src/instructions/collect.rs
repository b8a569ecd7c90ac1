use anchor_lang::prelude::*;
use anchor_spl::token_interface::TokenInterface;

use crate::constants::DELEGATE_SEED;
use crate::errors::BillingError;
use crate::events::{RenewalFailed, RenewalFailure, SubscriptionEnded, SubscriptionRenewed};
use crate::state::{Allowance, Plan, Subscription, SubscriptionStatus};
use crate::token_view;
use crate::transfer::{self, Transfer};

/// Renews a subscription whose period has ended. Anyone may call it (the facilitator's crank
/// normally does): the money can only go from the subscription's token account to the
/// plan's destination, one period per due date (docs/adr/0005).
#[derive(Accounts)]
pub struct Collect<'info> {
    /// `dup` on the plan, the subscription and the allowance: accounts of three different
    /// types (discriminators) cannot alias; the token accounts are checked apart below
    /// (docs/adr/0016).
    #[account(mut, dup)]
    pub plan: Account<'info, Plan>,

    #[account(mut, dup, has_one = plan)]
    pub subscription: Account<'info, Subscription>,

    /// Required when the subscription has one: its cycle resets at each renewal.
    #[account(mut, dup, has_one = subscription)]
    pub allowance: Option<Account<'info, Allowance>>,

    /// CHECK: the subscription's funding account, fixed by `address`. Parsed in the handler:
    /// if it was closed or frozen the renewal fails gracefully (past due) instead of the
    /// transaction failing.
    #[account(
        mut,
        address = subscription.token_account @ BillingError::TokenAccountMismatch,
        constraint = subscriber_token.key() != destination.key() @ BillingError::DuplicateAccount,
    )]
    pub subscriber_token: UncheckedAccount<'info>,

    /// CHECK: fixed by `address` to the destination of the subscription's terms, which
    /// `create_plan` checked is a token account of the mint; `transfer_checked` checks again.
    #[account(mut, address = subscription.terms.destination @ BillingError::DestinationMismatch)]
    pub destination: UncheckedAccount<'info>,

    /// CHECK: fixed by `address` to the mint of the subscription's terms, owned by
    /// `token_program`; `transfer_checked` checks it against both token accounts and the
    /// decimals.
    #[account(
        address = subscription.terms.mint @ BillingError::MintMismatch,
        owner = token_program.key() @ BillingError::MintMismatch,
    )]
    pub mint: UncheckedAccount<'info>,

    /// CHECK: the subscriber's delegate PDA. A successful pull proves it: the transfer CPI
    /// signs with `[DELEGATE_SEED, subscriber, delegate_bump]`, which the runtime accepts
    /// only for that address. Before a missing delegation is recorded as a failed renewal,
    /// the handler derives the address and refuses any other account (`WrongDelegate`), so
    /// a stranger cannot fake a failure (docs/adr/0005).
    pub delegate: UncheckedAccount<'info>,

    /// SPL Token or Token-2022, the one that owns the mint. A hooked mint's extra accounts,
    /// the hook program and its validation account follow as remaining accounts.
    pub token_program: Interface<'info, TokenInterface>,
}

impl Collect<'_> {
    pub fn validate(&self) -> Result<()> {
        let sub = &self.subscription;
        require!(
            matches!(
                sub.status,
                SubscriptionStatus::Active | SubscriptionStatus::PastDue
            ),
            BillingError::SubscriptionNotActive
        );
        require!(
            self.allowance.is_some() == sub.has_allowance,
            BillingError::NoAllowance
        );
        if sub.status == SubscriptionStatus::Active {
            let now = Clock::get()?.unix_timestamp;
            require!(now >= sub.current_period_end, BillingError::NotDue);
        }
        Ok(())
    }

    pub fn handler<'info>(ctx: Context<'info, Collect<'info>>) -> Result<()> {
        let now = Clock::get()?.unix_timestamp;
        let a = ctx.accounts;
        let sub_key = a.subscription.key();
        let plan_key = a.plan.key();
        let was_past_due = a.subscription.status == SubscriptionStatus::PastDue;

        let ending =
            if a.subscription.cancel_at_period_end && now >= a.subscription.current_period_end {
                Some(SubscriptionStatus::Cancelled)
            } else if was_past_due && now > a.subscription.grace_deadline(a.plan.grace_secs)? {
                Some(SubscriptionStatus::Expired)
            } else {
                None
            };
        if let Some(status) = ending {
            a.subscription.status = status;
            a.plan.live_subscriptions = a.plan.live_subscriptions.saturating_sub(1);
            emit!(SubscriptionEnded {
                subscription: sub_key,
                plan: plan_key,
                status,
                at: now
            });
            return Ok(());
        }

        let terms = a.subscription.terms;
        if let Some(reason) = pull_failure(
            &a.subscriber_token,
            &a.mint,
            a.token_program.key,
            &a.subscription.subscriber,
            &a.delegate.key(),
            terms.amount,
        ) {
            if reason == RenewalFailure::DelegationMissing {
                // Only the real delegate's missing delegation is the subscriber's failure;
                // any other account in its place is refused, never recorded.
                let real = Pubkey::create_program_address(
                    &[
                        DELEGATE_SEED,
                        a.subscription.subscriber.as_ref(),
                        &[a.subscription.delegate_bump],
                    ],
                    &crate::ID,
                )
                .map_err(|_| error!(BillingError::WrongDelegate))?;
                require_keys_eq!(a.delegate.key(), real, BillingError::WrongDelegate);
            }
            if !was_past_due {
                a.subscription.status = SubscriptionStatus::PastDue;
                a.subscription.past_due_since = now;
            }
            emit!(RenewalFailed {
                subscription: sub_key,
                plan: plan_key,
                amount: terms.amount,
                reason,
                past_due_since: a.subscription.past_due_since,
                grace_deadline: a.subscription.grace_deadline(a.plan.grace_secs)?,
            });
            return Ok(());
        }

        let moved = Transfer {
            token_program: &a.token_program.to_account_info(),
            source: &a.subscriber_token.to_account_info(),
            mint: &a.mint.to_account_info(),
            destination: &a.destination.to_account_info(),
            authority: &a.delegate.to_account_info(),
            extra: ctx.remaining_accounts,
        }
        .pull(
            &a.subscription.subscriber,
            a.subscription.delegate_bump,
            terms.amount,
            terms.decimals,
        )?;
        let sub = &mut a.subscription;
        let start = Subscription::renewal_start(
            sub.current_period_end,
            terms.period_secs,
            now,
            was_past_due,
        );
        sub.current_period_start = start;
        sub.current_period_end = Subscription::period_end(start, terms.period_secs)?;
        sub.cycles_billed = sub
            .cycles_billed
            .checked_add(1)
            .ok_or(BillingError::MathOverflow)?;
        sub.status = SubscriptionStatus::Active;
        sub.past_due_since = 0;
        sub.record_payment(terms.amount)?;
        a.plan.record_payment(terms.amount)?;
        if let Some(allowance) = a.allowance.as_mut() {
            allowance.reset(sub.cycles_billed);
        }
        emit!(SubscriptionRenewed {
            subscription: sub_key,
            plan: plan_key,
            amount: terms.amount,
            fee: moved.fee,
            net: moved.net(),
            period_start: sub.current_period_start,
            period_end: sub.current_period_end,
            cycles_billed: sub.cycles_billed,
            recovered: was_past_due,
        });
        Ok(())
    }
}

/// Why `amount` cannot be pulled from `source` now, if it cannot.
fn pull_failure(
    source: &AccountInfo,
    mint: &AccountInfo,
    token_program: &Pubkey,
    subscriber: &Pubkey,
    delegate: &Pubkey,
    amount: u64,
) -> Option<RenewalFailure> {
    let Ok(account) = token_view::read_token_account(source, token_program) else {
        return Some(RenewalFailure::TokenAccountUnusable);
    };
    if account.owner != *subscriber || account.frozen || account.mint != *mint.key {
        return Some(RenewalFailure::TokenAccountUnusable);
    }
    if token_view::mint_paused(&mint.try_borrow_data().ok()?) {
        return Some(RenewalFailure::MintPaused);
    }
    match transfer::check_can_pull(&account, delegate, amount) {
        Ok(()) => None,
        Err(e) if e == BillingError::InsufficientFunds.into() => {
            Some(RenewalFailure::InsufficientFunds)
        }
        Err(_) => Some(RenewalFailure::DelegationMissing),
    }
}
