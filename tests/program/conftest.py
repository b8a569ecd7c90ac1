"""The program's tests run with both token programs: every test that builds its plans with
the `billing` fixture runs once with SPL Token mints and once with PYUSD-like Token-2022
mints (a transfer hook whose accounts every transfer carries, a permanent delegate, a zero
transfer fee), on whichever validator the session runs (docs/adr/0030)."""

from __future__ import annotations

import pytest

from tests.support.billing import TOKEN_KINDS, Billing
from tests.support.chain import Chain


@pytest.fixture(params=TOKEN_KINDS)
def token_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def billing(chain: Chain, token_kind: str) -> Billing:
    return Billing(chain, token_kind)
