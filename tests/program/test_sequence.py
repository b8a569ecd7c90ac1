"""Seeded random sequences of many actors against a model of svc_billing's rules.

Each step is an action (subscribe, collect, deduct_allowance, pause, resume, cancel,
set_allowance_cap, close_subscription, a top-up, an SPL revoke or re-approve, time travel)
sent by a random actor, often one not allowed to send it. The program's outcome and state must
be the model's, and the invariants (money, periods, caps, supply, rent) must hold after every
step: see tests/support/sequence.py. More seeds and steps: scripts/fuzz-program.

On solana-test-validator a day is a second and time travel is waiting: one shorter sequence.
"""

from __future__ import annotations

import pytest

from svcpay.localnet.process import TEST_VALIDATOR, backend
from tests.support.chain import Chain
from tests.support.clock import Clock
from tests.support.sequence import FEE_HOOK_MINT, SPL_MINT, run_sequence

DROP_IN_SEEDS, DROP_IN_STEPS = (1, 2, 3), 400
TEST_VALIDATOR_SEEDS, TEST_VALIDATOR_STEPS = (2,), 40


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Three seeds on the drop-in validator, one (of fewer steps) on the real one; each on an
    SPL Token mint and on a Token-2022 mint with a transfer hook and a transfer fee."""
    if "seed" in metafunc.fixturenames:
        real = backend() == TEST_VALIDATOR
        metafunc.parametrize("seed", TEST_VALIDATOR_SEEDS if real else DROP_IN_SEEDS)
    if "mint_kind" in metafunc.fixturenames:
        metafunc.parametrize("mint_kind", [SPL_MINT, FEE_HOOK_MINT])


def test_random_sequences_match_the_model_and_keep_the_invariants(
    chain: Chain, clock: Clock, seed: int, mint_kind: str
) -> None:
    """With the fee mint the money invariant is debited = credited + withheld, and each
    event's fee is the mint's fee on its amount."""
    if chain.can_time_travel:
        stats = run_sequence(chain, clock, seed, DROP_IN_STEPS, mint_kind=mint_kind)
    else:
        # Time travel waits here: a few days (seconds) at a time at most.
        stats = run_sequence(
            chain, clock, seed, TEST_VALIDATOR_STEPS, max_advance=clock.days(4),
            mint_kind=mint_kind,
        )  # fmt: skip
    print(stats.summary())
    # The sequence went somewhere: subscriptions were made and paid for.
    assert stats.steps > 0 and stats.first_periods > 0 and stats.collected > 0
    assert (stats.fees > 0) == (mint_kind == FEE_HOOK_MINT)
