from __future__ import annotations

import pytest

from tests.support.billing import Billing
from tests.support.chain import Chain


@pytest.fixture
def chain() -> Chain:
    """A fresh runtime with the built program. Fails (never skips) if the binary is missing."""
    return Chain()


@pytest.fixture
def billing(chain: Chain) -> Billing:
    return Billing(chain)
