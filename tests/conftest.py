from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from svcpay.localnet.process import Localnet, localnet
from svcpay.program.client import BillingClient
from tests.support.billing import Billing
from tests.support.chain import Chain
from tests.support.pg_fixture import postgres_url  # noqa: F401  (a session fixture)


@pytest.fixture(scope="session")
def validator() -> Iterator[Localnet]:
    """One local validator with the built program for the session. Fails (never skips) when
    the binary is missing: scripts/test builds it first."""
    with localnet() as node:
        yield node


@pytest.fixture
def chain(validator: Localnet) -> Chain:
    return Chain(validator.url, validator.can_time_travel)


@pytest.fixture
def billing(chain: Chain) -> Billing:
    return Billing(chain)


@pytest.fixture
def anyio_backend() -> str:
    """Async tests (marked anyio) run on asyncio."""
    return "asyncio"


@pytest.fixture
async def client(validator: Localnet) -> AsyncIterator[BillingClient]:
    """The async toolkit client, connected to the session's validator."""
    c = BillingClient.connect(validator.url)
    yield c
    await c.close()
