use anchor_lang::prelude::*;
use anchor_spl::token_interface::TokenInterface;

use crate::errors::BillingError;
use crate::events::AllowanceDeducted;
use crate::state::{Allowance, Plan, Subscription, SubscriptionStatus};
use crate::token_view;
use crate::transfer::{self, Transfer};

#[derive(Accounts)]
pub struct DeductAllowance<'info> {
    /// The plan's billing authority (the facilitator) or the provider.
    pub authority: Signer<'info>,

    /// `dup` on the plan, the subscription and the allowance: accounts of three different
    /// types (discriminators) cannot alias; the token accounts are checked apart below
    /// (docs/adr/0016).
    #[account(mut, dup)]
    pub plan: Account<'info, Plan>,

    #[account(mut, dup, has_one = plan)]
    pub subscription: Account<'info, Subscription>,

    /// Allowances are only ever created at their PDA (`init_if_needed` in subscribe and in
    /// set_allowance_cap, both with the seeds), so the owner and discriminator checks plus
    /// `has_one` pin this one without re-deriving the address.
    #[account(mut, dup, has_one = subscription)]
    pub allowance: Account<'info, Allowance>,

    /// CHECK: fixed by `address` to the subscription's funding account; read in place by
    /// `validate` (`token_view::token_account`: of `token_program`, initialized, unfrozen).
    #[account(
        mut,
        dup,
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

    /// CHECK: the subscriber's delegate PDA; signs the transfer and holds no data. Not
    /// re-derived here: `validate` requires it to be the token account's delegate, and the
    /// transfer CPI signs with the seeds `[DELEGATE_SEED, subscriber, delegate_bump]`, which
    /// the runtime only accepts for that exact address.
    pub delegate: UncheckedAccount<'info>,

    /// SPL Token or Token-2022, the one that owns the mint. A hooked mint's extra accounts,
    /// the hook program and its validation account follow as remaining accounts.
    pub token_program: Interface<'info, TokenInterface>,
}

impl DeductAllowance<'_> {
    pub fn validate(&self, amount: u64) -> Result<()> {
        let signer = self.authority.key();
        require!(
            signer == self.plan.billing_authority || signer == self.plan.authority,
            BillingError::Unauthorized
        );
        require!(amount > 0, BillingError::ZeroAmount);
        require!(
            self.subscription.status == SubscriptionStatus::Active,
            BillingError::SubscriptionNotActive
        );
        let source = token_view::token_account(&self.subscriber_token, self.token_program.key)?;
        transfer::check_can_pull(&source, &self.delegate.key(), amount)
    }

    pub fn handler<'info>(ctx: Context<'info, DeductAllowance<'info>>, amount: u64) -> Result<()> {
        let a = ctx.accounts;
        a.allowance.deduct(amount)?;
        let terms = a.subscription.terms;
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
            amount,
            terms.decimals,
        )?;
        a.subscription.record_payment(amount)?;
        a.plan.record_payment(amount)?;
        emit!(AllowanceDeducted {
            subscription: a.subscription.key(),
            allowance: a.allowance.key(),
            amount,
            fee: moved.fee,
            net: moved.net(),
            used: a.allowance.used,
            cap: a.allowance.cap,
            remaining: a.allowance.remaining(),
            used_bps: a.allowance.used_bps(),
        });
        Ok(())
    }
}
