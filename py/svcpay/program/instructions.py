"""svc_billing instructions with every account filled in (PDAs derived from the seeds).

Thin wrappers over the generated client; amounts are integers in the mint's base units.
The instructions that move tokens take the mint's `token_program` (SPL Token by default, or
Token-2022) and `extra`: the accounts a Token-2022 transfer hook needs (its extra accounts,
its program and its validation account, svcpay.program.tokens resolves them), which the
program forwards to the token program.
"""

from __future__ import annotations

from collections.abc import Sequence

from solders.instruction import AccountMeta, Instruction
from solders.pubkey import Pubkey
from spl.token.constants import TOKEN_PROGRAM_ID

from svcpay.program import pda
from svcpay.program.generated import instructions as gen
from svcpay.program.generated.accounts.subscription import Subscription
from svcpay.program.generated.types.create_plan_args import CreatePlanArgs
from svcpay.program.generated.types.subscribe_args import SubscribeArgs
from svcpay.program.generated.types.update_plan_args import UpdatePlanArgs


def with_token_program(
    ix: Instruction, token_program: Pubkey, extra: Sequence[AccountMeta] = ()
) -> Instruction:
    """`ix` with `token_program` where the generated client put SPL Token (it fills every
    account named token_program with it), and `extra` appended as remaining accounts."""
    metas = list(ix.accounts)
    if token_program != TOKEN_PROGRAM_ID:
        metas = [
            AccountMeta(token_program, m.is_signer, m.is_writable)
            if m.pubkey == TOKEN_PROGRAM_ID
            else m
            for m in metas
        ]
    return Instruction(ix.program_id, ix.data, [*metas, *extra])


def create_plan(
    authority: Pubkey,
    plan_id: int,
    mint: Pubkey,
    destination: Pubkey,
    billing_authority: Pubkey,
    amount: int,
    period_secs: int,
    grace_secs: int,
    *,
    token_program: Pubkey = TOKEN_PROGRAM_ID,
) -> Instruction:
    """Publishes plan `plan_id` of `authority`: `amount` every `period_secs` to `destination`
    (a token account of `mint`, a mint of `token_program`)."""
    args = CreatePlanArgs(
        plan_id=plan_id,
        amount=amount,
        period_secs=period_secs,
        grace_secs=grace_secs,
        billing_authority=billing_authority,
    )
    ix = gen.create_plan(
        {"args": args},
        {
            "authority": authority,
            "plan": pda.plan_address(authority, plan_id),
            "mint": mint,
            "destination": destination,
        },
    )
    return with_token_program(ix, token_program)


def subscribe(
    plan: Pubkey,
    subscriber: Pubkey,
    subscriber_token: Pubkey,
    mint: Pubkey,
    destination: Pubkey,
    max_overage: int | None = None,
    previous_allowance: bool = False,
    *,
    token_program: Pubkey = TOKEN_PROGRAM_ID,
    extra: Sequence[AccountMeta] = (),
) -> Instruction:
    """Subscribes `subscriber` to `plan`, paying the first period from `subscriber_token`.

    After the subscriber's earlier subscription to `plan` ended, this starts a new one at
    the same address; pass `previous_allowance` when the ended one had an allowance (it is
    reset, or closed when `max_overage` is None)."""
    subscription = pda.subscription_address(plan, subscriber)
    wants_allowance = max_overage is not None or previous_allowance
    allowance = pda.allowance_address(subscription) if wants_allowance else None
    ix = gen.subscribe(
        {"args": SubscribeArgs(max_overage=max_overage)},
        {
            "subscriber": subscriber,
            "plan": plan,
            "subscription": subscription,
            "allowance": allowance,
            "subscriber_token": subscriber_token,
            "destination": destination,
            "mint": mint,
            "delegate": pda.delegate_address(subscriber),
        },
    )
    return with_token_program(ix, token_program, extra)


def deduct_allowance(
    authority: Pubkey,
    plan: Pubkey,
    subscriber: Pubkey,
    subscriber_token: Pubkey,
    mint: Pubkey,
    destination: Pubkey,
    amount: int,
    *,
    token_program: Pubkey = TOKEN_PROGRAM_ID,
    extra: Sequence[AccountMeta] = (),
) -> Instruction:
    """Charges `amount` of metered usage to `subscriber`'s allowance, signed by `authority`."""
    subscription = pda.subscription_address(plan, subscriber)
    ix = gen.deduct_allowance(
        {"amount": amount},
        {
            "authority": authority,
            "plan": plan,
            "subscription": subscription,
            "allowance": pda.allowance_address(subscription),
            "subscriber_token": subscriber_token,
            "destination": destination,
            "mint": mint,
            "delegate": pda.delegate_address(subscriber),
        },
    )
    return with_token_program(ix, token_program, extra)


def collect(
    plan: Pubkey,
    subscriber: Pubkey,
    subscriber_token: Pubkey,
    mint: Pubkey,
    destination: Pubkey,
    has_allowance: bool,
    *,
    token_program: Pubkey = TOKEN_PROGRAM_ID,
    extra: Sequence[AccountMeta] = (),
) -> Instruction:
    """Renews `subscriber`'s subscription to `plan` if due (anyone may send it)."""
    subscription = pda.subscription_address(plan, subscriber)
    ix = gen.collect(
        {
            "plan": plan,
            "subscription": subscription,
            "allowance": pda.allowance_address(subscription) if has_allowance else None,
            "subscriber_token": subscriber_token,
            "destination": destination,
            "mint": mint,
            "delegate": pda.delegate_address(subscriber),
        },
    )
    return with_token_program(ix, token_program, extra)


def collect_subscription(
    subscription: Subscription,
    *,
    token_program: Pubkey = TOKEN_PROGRAM_ID,
    extra: Sequence[AccountMeta] = (),
) -> Instruction:
    """`collect` for a fetched subscription account (every account taken from it)."""
    return collect(
        subscription.plan,
        subscription.subscriber,
        subscription.token_account,
        subscription.terms.mint,
        subscription.terms.destination,
        subscription.has_allowance,
        token_program=token_program,
        extra=extra,
    )


def _change(authority: Pubkey, plan: Pubkey, subscriber: Pubkey) -> dict[str, Pubkey]:
    return {
        "authority": authority,
        "plan": plan,
        "subscription": pda.subscription_address(plan, subscriber),
    }


def pause(authority: Pubkey, plan: Pubkey, subscriber: Pubkey) -> Instruction:
    """Pauses `subscriber`'s subscription; `authority` is the subscriber or the provider."""
    return gen.pause(_change(authority, plan, subscriber))  # type: ignore[arg-type]


def resume(authority: Pubkey, plan: Pubkey, subscriber: Pubkey) -> Instruction:
    """Resumes a paused subscription, or withdraws a pending cancel-at-period-end."""
    return gen.resume(_change(authority, plan, subscriber))  # type: ignore[arg-type]


def cancel(authority: Pubkey, plan: Pubkey, subscriber: Pubkey, at_period_end: bool) -> Instruction:
    """Cancels now, or when the paid period ends."""
    return gen.cancel({"at_period_end": at_period_end}, _change(authority, plan, subscriber))  # type: ignore[arg-type]


def set_allowance_cap(subscriber: Pubkey, plan: Pubkey, cap: int) -> Instruction:
    """Sets the metered cap per cycle of `subscriber`'s subscription to `plan`, adding the
    allowance when it has none (the subscriber pays its rent)."""
    subscription = pda.subscription_address(plan, subscriber)
    return gen.set_allowance_cap(
        {"cap": cap},
        {
            "subscriber": subscriber,
            "subscription": subscription,
            "allowance": pda.allowance_address(subscription),
        },
    )


def update_plan(
    authority: Pubkey,
    plan: Pubkey,
    billing_authority: Pubkey | None = None,
    grace_secs: int | None = None,
) -> Instruction:
    """Changes the billing authority and/or grace period of `plan` (never its terms)."""
    args = UpdatePlanArgs(billing_authority=billing_authority, grace_secs=grace_secs)
    return gen.update_plan({"args": args}, {"authority": authority, "plan": plan})


def deprecate_plan(authority: Pubkey, plan: Pubkey) -> Instruction:
    """Stops new subscriptions to `plan`; existing ones continue."""
    return gen.deprecate_plan({"authority": authority, "plan": plan})


def close_plan(authority: Pubkey, plan: Pubkey) -> Instruction:
    """Closes `plan` (no live subscriptions left); rent goes back to `authority`."""
    return gen.close_plan({"authority": authority, "plan": plan})


def close_subscription(subscriber: Pubkey, plan: Pubkey, has_allowance: bool) -> Instruction:
    """Closes `subscriber`'s ended subscription to `plan` (and its allowance) for the rent."""
    subscription = pda.subscription_address(plan, subscriber)
    return gen.close_subscription(
        {
            "subscriber": subscriber,
            "subscription": subscription,
            "allowance": pda.allowance_address(subscription) if has_allowance else None,
        }
    )
