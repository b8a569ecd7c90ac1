from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import asdict
from pathlib import Path

import pytest

from svcpay.localnet.accounts import USDC_MAINNET_MINT, usdc_mint_account, write_account_file
from svcpay.localnet.process import BACKENDS, TEST_VALIDATOR, Localnet, backend, localnet
from svcpay.localnet.validator import ValidatorNotFound, binary_version, find_validator
from svcpay.program.client import BillingClient
from tests.support.billing import Billing
from tests.support.chain import TICKS_PER_SLOT, Chain
from tests.support.clock import Clock
from tests.support.collection import one_id_per_test
from tests.support.pg_fixture import postgres_url  # noqa: F401  (a session fixture)
from tests.support.processes import processes  # noqa: F401  (a fixture)
from tests.support.switch import switch  # noqa: F401  (a fixture)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--validator",
        choices=BACKENDS,
        default=None,
        help="the validator chain tests run on (default: $SVCPAY_VALIDATOR, else drop-in); "
        "processes the tests start inherit it",
    )


def pytest_configure(config: pytest.Config) -> None:
    # The suite's local validators stand in for mainnet (docs/adr/0038): its terms name
    # solana-mainnet, since the x402 SDKs it interoperates with know no local network. The
    # demo clears SVCPAY_* settings, and so runs on solana-localnet, as a user's does;
    # tests/protocol/test_cluster.py checks the refusals without the stand-in.
    os.environ.setdefault("SVCPAY_LOCALNET_AS", "solana-mainnet")
    chosen = config.getoption("--validator")
    if chosen:  # subprocesses (the CLI, the demo, the facilitator) see the same choice
        os.environ["SVCPAY_VALIDATOR"] = chosen
    if _shares_one_validator(config):
        stack = ExitStack()
        config.add_cleanup(stack.close)
        work = Path(tempfile.mkdtemp(prefix="svcpay-shared-validator-"))
        stack.callback(shutil.rmtree, work, True)
        node = stack.enter_context(_session_localnet(work))
        os.environ[SHARED_VALIDATOR] = json.dumps(asdict(node))  # the workers inherit it


# The validator the controller started for its pytest-xdist workers ({url, kind, version}).
SHARED_VALIDATOR = "SVCPAY_TESTS_SHARED_VALIDATOR"


def _shares_one_validator(config: pytest.Config) -> bool:
    """Whether this is the controller of pytest-xdist workers on solana-test-validator: they
    share one validator it starts (docs/adr/0034). Each costs more than a core while it runs,
    so one validator for several test processes saves that many validator-seconds. Tests on
    the drop-in move its clock, so there each worker keeps a validator of its own."""
    workers = (
        config.getoption("numprocesses", None) if config.pluginmanager.hasplugin("xdist") else None
    )
    return bool(workers) and not hasattr(config, "workerinput") and backend() == TEST_VALIDATOR


@contextmanager
def _session_localnet(work: Path) -> Iterator[Localnet]:
    usdc = write_account_file(work / "usdc.json", usdc_mint_account())
    with localnet(
        deploy=True,
        accounts=[(str(USDC_MAINNET_MINT), usdc)],
        ticks_per_slot=TICKS_PER_SLOT,
    ) as node:
        yield node


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Each test has a node id of its own (tests/support/collection.py). Tests of one
    validator's own behaviour are deselected on the other (not skipped: they do not apply
    there, and each marker names why)."""
    one_id_per_test(items)
    other = "drop_in_only" if backend() == TEST_VALIDATOR else "test_validator_only"
    keep, drop = [], []
    for item in items:
        (drop if item.get_closest_marker(other) else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_report_header(config: pytest.Config) -> str:
    kind = backend()
    if kind != TEST_VALIDATOR:
        return f"validator: svcpay {kind}"
    try:
        exe = find_validator()
    except ValidatorNotFound as e:
        return f"validator: {kind}: {e}"
    return f"validator: {kind} {binary_version(exe)} ({exe})"


@pytest.fixture(scope="session")
def validator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Localnet]:
    """One local validator with the built program for the session. Fails (never skips) when
    the binary is missing: scripts/test builds it first. On solana-test-validator the
    program is deployed through the upgradeable loader, as users deploy it. It also holds a
    USDC mint at mainnet USDC's address (svcpay.localnet.accounts), for the clients and
    gates that accept only the stablecoins they know. A pytest-xdist worker on
    solana-test-validator uses the one its controller started (`_shares_one_validator`)."""
    shared = os.environ.get(SHARED_VALIDATOR)
    if shared:
        yield Localnet(**json.loads(shared))
        return
    with _session_localnet(tmp_path_factory.mktemp("accounts")) as node:
        yield node


@pytest.fixture
def chain(validator: Localnet) -> Chain:
    return Chain(validator.url, validator.can_time_travel)


@pytest.fixture
def clock(chain: Chain) -> Clock:
    """Moves the cluster clock: time travel on the drop-in, a wait on the real validator."""
    return Clock(chain)


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
