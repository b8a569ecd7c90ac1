"""Program-derived addresses of svc_billing.

The seeds mirror the program's `#[constant]`s; tests/program/test_pda.py checks them against
the IDL so the two can never drift apart.
"""

from __future__ import annotations

from solders.pubkey import Pubkey

from svcpay.program.generated.program_id import PROGRAM_ID

PLAN_SEED = b"plan"
SUBSCRIPTION_SEED = b"subscription"
ALLOWANCE_SEED = b"allowance"
DELEGATE_SEED = b"delegate"
SESSION_SEED = b"session"
VAULT_SEED = b"vault"


def plan_address(authority: Pubkey, plan_id: int, program_id: Pubkey = PROGRAM_ID) -> Pubkey:
    """Address of the plan `plan_id` (a u64) of `authority`."""
    if not 0 <= plan_id < 2**64:
        raise ValueError(f"plan_id must be a u64, got {plan_id}")
    return Pubkey.find_program_address(
        [PLAN_SEED, bytes(authority), plan_id.to_bytes(8, "little")], program_id
    )[0]


def subscription_address(
    plan: Pubkey, subscriber: Pubkey, program_id: Pubkey = PROGRAM_ID
) -> Pubkey:
    """Address of `subscriber`'s subscription to `plan`: the id sent in `X-Svc-Sub`."""
    return Pubkey.find_program_address(
        [SUBSCRIPTION_SEED, bytes(plan), bytes(subscriber)], program_id
    )[0]


def allowance_address(subscription: Pubkey, program_id: Pubkey = PROGRAM_ID) -> Pubkey:
    """Address of the metered allowance of `subscription`."""
    return Pubkey.find_program_address([ALLOWANCE_SEED, bytes(subscription)], program_id)[0]


def delegate_address(subscriber: Pubkey, program_id: Pubkey = PROGRAM_ID) -> Pubkey:
    """The PDA that `subscriber`'s paying token accounts delegate to."""
    return Pubkey.find_program_address([DELEGATE_SEED, bytes(subscriber)], program_id)[0]


def session_address(payer: Pubkey, session_id: int, program_id: Pubkey = PROGRAM_ID) -> Pubkey:
    """Address of `payer`'s session `session_id` (a u64): the channel id of its vouchers."""
    if not 0 <= session_id < 2**64:
        raise ValueError(f"session_id must be a u64, got {session_id}")
    return Pubkey.find_program_address(
        [SESSION_SEED, bytes(payer), session_id.to_bytes(8, "little")], program_id
    )[0]


def vault_address(session: Pubkey, program_id: Pubkey = PROGRAM_ID) -> Pubkey:
    """The token account that escrows `session`'s deposit."""
    return Pubkey.find_program_address([VAULT_SEED, bytes(session)], program_id)[0]
