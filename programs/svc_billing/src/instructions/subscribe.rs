use anchor_lang::prelude::*;
use anchor_spl::token_interface::{self, Approve, TokenInterface};

use crate::constants::{ALLOWANCE_SEED, DELEGATE_SEED, SUBSCRIPTION_SEED};
use crate::errors::BillingError;
use crate::events::SubscriptionCreated;
use crate::state::{Allowance, Plan, PlanStatus, Subscription, SubscriptionStatus, Terms};
use crate::token_view::{self, ext};
use crate::transfer::{self, Transfer};

#[derive(AnchorSerialize, AnchorDeserialize, Clone, Debug)]
pub struct SubscribeArgs {
    /// Metered allowance cap per cycle, base units. `Some` requires the allowance account.
    pub max_overage: Option<u64>,
}

#[derive(Accounts)]
pub struct Subscribe<'info> {
    /// Pays the first period and the rent, and authorises the delegation.
    #[account(mut)]
    pub subscriber: Signer<'info>,

    /// `dup` on the plan, the subscription and the allowance: accounts of three different
    /// types (discriminators) cannot alias; the token accounts are checked apart below
    /// (docs/adr/0016).
    #[account(
        mut,
        dup,
        has_one = mint @ BillingError::MintMismatch,
        has_one = destination @ BillingError::DestinationMismatch,
    )]
    pub plan: Account<'info, Plan>,

    /// Created, or (when the subscriber's previous subscription to this plan has ended)
    /// started again in place: `validate` refuses a live one (docs/adr/0015).
    #[account(
        init_if_needed,
        dup,
        payer = subscriber,
        space = 8 + Subscription::INIT_SPACE,
        seeds = [SUBSCRIPTION_SEED, plan.key().as_ref(), subscriber.key().as_ref()],
        bump,
    )]
    pub subscription: Account<'info, Subscription>,

    /// Present when `max_overage` is given (created, or reset), and when an ended
    /// subscription being started again had one (closed if `max_overage` is not given).
    #[account(
        init_if_needed,
        dup,
        payer = subscriber,
        space = 8 + Allowance::INIT_SPACE,
        seeds = [ALLOWANCE_SEED, subscription.key().as_ref()],
        bump,
    )]
    pub allowance: Option<Account<'info, Allowance>>,

    /// CHECK: the subscriber's account that pays, now and at each renewal; read in place by
    /// `validate` (`token_view::token_account`: of `token_program`, initialized, not frozen;
    /// its mint the plan's, its owner the subscriber).
    #[account(
        mut,
        dup,
        constraint = subscriber_token.key() != destination.key() @ BillingError::DuplicateAccount,
    )]
    pub subscriber_token: UncheckedAccount<'info>,

    /// CHECK: the plan's destination, pinned by `has_one` on the plan; `create_plan` checked
    /// it is a token account of the mint and `transfer_checked` checks again.
    #[account(mut)]
    pub destination: UncheckedAccount<'info>,

    /// CHECK: the plan's mint, pinned by `has_one` on the plan; its owner must be
    /// `token_program` (`constraint`), and `transfer_checked` checks it again.
    #[account(owner = token_program.key() @ BillingError::MintMismatch)]
    pub mint: UncheckedAccount<'info>,

    /// CHECK: a PDA that only signs transfers and holds no data; its address is fixed by
    /// the seeds constraint, so no other account can stand in for it.
    #[account(seeds = [DELEGATE_SEED, subscriber.key().as_ref()], bump)]
    pub delegate: UncheckedAccount<'info>,

    /// SPL Token or Token-2022, the one that owns the plan's mint. A hooked mint's extra
    /// accounts, the hook program and its validation account follow as remaining accounts.
    pub token_program: Interface<'info, TokenInterface>,
    pub system_program: Program<'info, System>,
}

impl Subscribe<'_> {
    pub fn validate(&self, args: &SubscribeArgs) -> Result<()> {
        require!(
            self.plan.status == PlanStatus::Active,
            BillingError::PlanDeprecated
        );
        // A fresh account is all zeroes after `init_if_needed`; an earlier subscription
        // names its subscriber. Only an ended one may be started again.
        let previous = &self.subscription;
        let existed = previous.subscriber != Pubkey::default();
        require!(
            !existed || !previous.is_live(),
            BillingError::AlreadySubscribed
        );
        let had_allowance = existed && previous.has_allowance;
        match (args.max_overage, &self.allowance) {
            (Some(cap), Some(_)) => require!(cap > 0, BillingError::ZeroAmount),
            (None, Some(_)) => require!(had_allowance, BillingError::NoAllowance),
            (None, None) => require!(!had_allowance, BillingError::NoAllowance),
            (Some(_), None) => return err!(BillingError::NoAllowance),
        }
        let source = token_view::token_account(&self.subscriber_token, self.token_program.key)?;
        require_keys_eq!(source.mint, self.mint.key(), BillingError::MintMismatch);
        require_keys_eq!(
            source.owner,
            self.subscriber.key(),
            BillingError::TokenAccountMismatch
        );
        require!(
            source.amount >= self.plan.amount,
            BillingError::InsufficientFunds
        );
        // A CPI guard forbids the approval below in a CPI: say so rather than let
        // Token-2022 fail with its own code.
        let guarded =
            token_view::extension(&self.subscriber_token.try_borrow_data()?, ext::CPI_GUARD)
                .is_some_and(|v| v.first() == Some(&1));
        require!(!guarded, BillingError::CpiGuardEnabled);
        Ok(())
    }

    pub fn handler<'info>(
        ctx: Context<'info, Subscribe<'info>>,
        args: SubscribeArgs,
    ) -> Result<()> {
        let now = Clock::get()?.unix_timestamp;
        let a = ctx.accounts;
        let source = token_view::token_account(&a.subscriber_token, a.token_program.key)?;
        let terms = Terms {
            mint: a.plan.mint,
            decimals: a.plan.decimals,
            amount: a.plan.amount,
            period_secs: a.plan.period_secs,
            destination: a.plan.destination,
        };

        // One delegate per token account: the subscriber's delegate PDA, approved for
        // everything; each subscription's limits are enforced here (docs/adr/0003). A token
        // account that already delegates (nearly) everything to it, from another plan or
        // an ended subscription, keeps its approval: one CPI fewer.
        if !transfer::delegates_everything(&source, &a.delegate.key()) {
            token_interface::approve(
                CpiContext::new(
                    a.token_program.key(),
                    Approve {
                        to: a.subscriber_token.to_account_info(),
                        delegate: a.delegate.to_account_info(),
                        authority: a.subscriber.to_account_info(),
                    },
                ),
                u64::MAX,
            )?;
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
            &a.subscriber.key(),
            ctx.bumps.delegate,
            terms.amount,
            terms.decimals,
        )?;

        let period_end = Subscription::period_end(now, terms.period_secs)?;
        a.subscription.set_inner(Subscription {
            plan: a.plan.key(),
            subscriber: a.subscriber.key(),
            token_account: a.subscriber_token.key(),
            terms,
            status: SubscriptionStatus::Active,
            cancel_at_period_end: false,
            cancel_requested_by: None,
            paused_by: None,
            created_at: now,
            current_period_start: now,
            current_period_end: period_end,
            past_due_since: 0,
            paused_at: 0,
            cycles_billed: 1,
            total_paid: terms.amount,
            has_allowance: args.max_overage.is_some(),
            bump: ctx.bumps.subscription,
            delegate_bump: ctx.bumps.delegate,
        });
        if let Some(allowance) = a.allowance.as_mut() {
            match args.max_overage {
                Some(cap) => allowance.set_inner(Allowance {
                    subscription: a.subscription.key(),
                    cap,
                    used: 0,
                    total_deducted: 0,
                    cycle: 1,
                    bump: ctx.bumps.allowance.unwrap_or_default(),
                }),
                // The ended subscription's allowance, not wanted any more: rent back.
                None => allowance.close(a.subscriber.to_account_info())?,
            }
        }

        let plan = &mut a.plan;
        plan.record_payment(terms.amount)?;
        plan.live_subscriptions = plan
            .live_subscriptions
            .checked_add(1)
            .ok_or(BillingError::MathOverflow)?;
        plan.total_subscriptions = plan
            .total_subscriptions
            .checked_add(1)
            .ok_or(BillingError::MathOverflow)?;

        emit!(SubscriptionCreated {
            subscription: a.subscription.key(),
            plan: plan.key(),
            subscriber: a.subscriber.key(),
            amount: terms.amount,
            fee: moved.fee,
            net: moved.net(),
            period_start: now,
            period_end,
            max_overage: args.max_overage.unwrap_or(0),
            status: SubscriptionStatus::Active,
        });
        Ok(())
    }
}
