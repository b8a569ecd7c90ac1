"""Fixtures of the cross-implementation tests: the PyPI x402 SDK's programs (x402_sdk/, run by
the SDK's own environment from scripts/x402-sdk), the x402 TypeScript SDK's (x402_ts/, run by
Node.js on the install scripts/x402-ts makes), the TypeScript MPP SDK's (mppx/, on the install
scripts/mppx makes) and svcpay's services, each a process on a
free port of the session's local validator, which they know as Solana devnet (the SDK accepts
only mainnet's, devnet's and testnet's CAIP-2 ids)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Confirmed
from solders.keypair import Keypair
from solders.pubkey import Pubkey

from svcpay.client import PaymentAuth
from svcpay.keys import save_keypair
from svcpay.localnet.process import ROOT, Localnet
from tests.support.billing import USDC, Billing, Plan
from tests.support.chain import Chain
from tests.support.processes import Processes, run_to_end

DEVNET = "solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1"  # the local validator, to the SDK
SVCPAY_DEVNET = "solana-devnet"  # the same, as svcpay's services name it
SDK_PROGRAMS = Path(__file__).parent / "x402_sdk"
TS_PROGRAMS = Path(__file__).parent / "x402_ts"
PAY_KIT_PROGRAMS = Path(__file__).parent / "pay_kit"
MPPX_PROGRAMS = Path(__file__).parent / "mppx"
MPP_DEVNET = "devnet"  # the local validator, as MPP's methodDetails.network names it
FINALITY_TIMEOUT = 60.0


@pytest.fixture(autouse=True)
def validator_as_devnet(monkeypatch: pytest.MonkeyPatch) -> None:
    """svcpay's clients and services here (and the processes they start) take the local
    validator for devnet, as the SDKs are told it is (docs/adr/0038)."""
    monkeypatch.setenv("SVCPAY_LOCALNET_AS", SVCPAY_DEVNET)


def sdk_environment(script: str) -> str:
    """The python of a foreign SDK's environment (scripts/sdk-env makes it once)."""
    done = subprocess.run(
        [str(ROOT / "scripts" / script)], capture_output=True, text=True, timeout=600
    )
    python = done.stdout.strip()
    if done.returncode != 0 or not Path(python).is_file():
        pytest.fail(
            f"the environment of scripts/{script} is missing and could not be made: run "
            f"scripts/{script} (it needs PyPI once)\n{done.stderr[-2000:]}"
        )
    return python


@pytest.fixture(scope="session")
def sdk_python() -> str:
    """The PyPI x402 SDK's environment's python (scripts/x402-sdk)."""
    return sdk_environment("x402-sdk")


@pytest.fixture(scope="session")
def pay_kit_python() -> str:
    """solana-pay-kit's environment's python (scripts/pay-kit)."""
    return sdk_environment("pay-kit")


def npm_install(script: str, what: str) -> Path:
    """The node_modules `scripts/<script>` installs once from its lock, then reuses."""
    done = subprocess.run(
        [str(ROOT / "scripts" / script)], capture_output=True, text=True, timeout=600
    )
    modules = Path(done.stdout.strip() or "/nonexistent") / "node_modules"
    if done.returncode != 0 or not modules.is_dir():
        pytest.fail(
            f"{what} is missing and could not be installed: run scripts/{script} (it needs "
            f"Node.js and the npm registry once)\n{done.stderr[-2000:]}"
        )
    return modules


def node_home(tmp_path: Path, programs: Path, modules: Path) -> Path:
    """A directory of `programs`' .mjs files beside `modules` (Node resolves an ES module's
    packages from the module's own directory)."""
    home = tmp_path / programs.name
    home.mkdir()
    (home / "node_modules").symlink_to(modules, target_is_directory=True)
    shutil.copy(programs / "package.json", home)  # "type": "module"
    for program in programs.glob("*.mjs"):
        shutil.copy(program, home)
    return home


def node_report(argv: Sequence[str], who: str) -> tuple[int, dict[str, object]]:
    """Runs a program that prints one JSON object: its exit status and that object."""
    done = run_to_end(argv)
    assert done.stdout.strip(), f"{who} printed nothing:\n{done.stderr[-3000:]}"
    report: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return done.returncode, report


@pytest.fixture(scope="session")
def ts_modules() -> Path:
    """The TypeScript SDK's node_modules (scripts/x402-ts installs it once, then reuses it)."""
    return npm_install("x402-ts", "the x402 TypeScript SDK")


@pytest.fixture(scope="session")
def mppx_modules() -> Path:
    """mppx's and @solana/mpp's node_modules (scripts/mppx installs them once)."""
    return npm_install("mppx", "the TypeScript MPP SDK (mppx, @solana/mpp)")


@dataclass
class Market:
    """A seller paid in a fresh 6-decimal mint, a buyer holding some, a fee payer with SOL;
    keypair files for the processes. All finalized: the SDK reads the mint at `finalized`."""

    plan: Plan  # the seller's: its mint, and its authority's associated token account
    buyer: Keypair
    buyer_account: Pubkey
    buyer_file: Path
    fee_payer: Keypair
    fee_payer_file: Path

    @property
    def mint(self) -> Pubkey:
        return self.plan.mint

    @property
    def seller(self) -> Pubkey:
        """The wallet x402 names as payTo."""
        return self.plan.authority.pubkey()

    @property
    def seller_account(self) -> Pubkey:
        """ATA(seller, mint): where the payments land."""
        return self.plan.destination


def finalize(chain: Chain, address: Pubkey) -> None:
    """Returns once `address` exists at `finalized`: at once by time travel on the drop-in
    (the slot moves ~75 past), by waiting (~4 s at 100 ms slots) on solana-test-validator."""
    if chain.can_time_travel:
        chain.time_travel(chain.unix_timestamp() + 30)
    deadline = time.monotonic() + FINALITY_TIMEOUT
    while chain.rpc("getAccountInfo", str(address), {"encoding": "base64"})["value"] is None:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{address} was not finalized in {FINALITY_TIMEOUT:.0f} s")
        time.sleep(0.5)


@pytest.fixture
def market(chain: Chain, billing: Billing, tmp_path: Path) -> Market:
    plan = billing.plan(amount=10 * USDC)
    buyer = billing.subscriber(plan, 10 * USDC)
    fee_payer = chain.funded_keypair()
    finalize(chain, buyer.token_account)
    return Market(
        plan,
        buyer.keypair,
        buyer.token_account,
        save_keypair(buyer.keypair, tmp_path / "buyer.json"),
        fee_payer,
        save_keypair(fee_payer, tmp_path / "fee-payer.json"),
    )


@asynccontextmanager
async def x402_payer(
    market: Market, rpc_url: str, **options: Any
) -> AsyncIterator[tuple[PaymentAuth, list[str]]]:
    """svcpay's PaymentAuth paying as `market`'s buyer (1 USDC a request at most; `options`
    are PaymentAuth's), and the URLs its own facilitator was called at: none is answered,
    as an x402 payer needs none (the seller's facilitator settles)."""
    called: list[str] = []

    def no_facilitator(request: httpx.Request) -> httpx.Response:
        called.append(str(request.url))
        return httpx.Response(599)

    rpc = AsyncClient(rpc_url, commitment=Confirmed)
    try:
        async with httpx.AsyncClient(transport=httpx.MockTransport(no_facilitator)) as facilitator:
            options = {"max_per_request": USDC, **options}
            yield PaymentAuth(market.buyer, rpc=rpc, facilitator=facilitator, **options), called
    finally:
        await rpc.close()


@dataclass
class Sdk:
    """The SDK's programs, started on the session's validator."""

    python: str
    rpc: str
    processes: Processes

    def facilitator(self, fee_payer_file: Path) -> str:
        argv = ["--keypair", str(fee_payer_file), "--rpc", self.rpc, "--network", DEVNET]
        program = self._program("sdk_facilitator.py", argv)
        return self.processes.start("sdk facilitator", program, "x402-sdk facilitator ready")

    def server(self, facilitator_url: str, market: Market, price: int, *, mcp: bool = False) -> str:
        """The SDK's FastAPI server (sdk_server.py): its base URL; with `mcp`, its FastMCP
        server (sdk_mcp_server.py) instead: its MCP endpoint."""
        argv = [
            "--facilitator", facilitator_url, "--pay-to", str(market.seller),
            "--mint", str(market.mint), "--network", DEVNET, "--price", str(price),
        ]  # fmt: skip
        name = "x402-sdk mcp server" if mcp else "x402-sdk server"
        program = self._program("sdk_mcp_server.py" if mcp else "sdk_server.py", argv)
        return self.processes.start(name, program, f"{name} ready")

    def pay(self, url: str, market: Market, *, replay: bool = False) -> dict[str, object]:
        """The SDK's client GETs `url`, paying as `market`'s buyer: its JSON report."""
        return self._report("sdk_client.py", [url], market, replay)

    def call_tool(
        self,
        url: str,
        tool: str,
        arguments: dict[str, object],
        market: Market,
        *,
        replay: bool = False,
        session: bool = False,
    ) -> dict[str, object]:
        """The SDK's x402MCPClient (with `session`: its x402MCPSession) calls `tool` at the
        MCP endpoint `url`, paying as `market`'s buyer: its JSON report (sdk_mcp_client.py)."""
        argv = [
            url,
            tool,
            "--arguments",
            json.dumps(arguments),
            *(["--session"] if session else []),
        ]
        return self._report("sdk_mcp_client.py", argv, market, replay)

    def _report(
        self, name: str, argv: list[str], market: Market, replay: bool
    ) -> dict[str, object]:
        argv = [
            *argv, "--keypair", str(market.buyer_file), "--rpc", self.rpc,
            "--network", DEVNET, "--mint", str(market.mint),
        ]  # fmt: skip
        done = run_to_end(self._program(name, argv + (["--replay"] if replay else [])))
        assert done.stdout.strip(), f"{name} printed nothing:\n{done.stderr[-3000:]}"
        report: dict[str, object] = json.loads(done.stdout)
        assert done.returncode == 0, (report, done.stderr[-3000:])
        return report

    def _program(self, name: str, argv: Sequence[str]) -> list[str]:
        return [self.python, str(SDK_PROGRAMS / name), *argv]


@pytest.fixture
def sdk(sdk_python: str, validator: Localnet, processes: Processes) -> Sdk:
    return Sdk(sdk_python, validator.url, processes)


@dataclass
class Svcpay:
    """svcpay's own services as separate processes, on the validator presented as devnet."""

    rpc: str
    processes: Processes
    tmp: Path

    def facilitator(self, keypair: Keypair) -> str:
        """`svcpay facilitator serve`; it settles to any payTo (registration is not what
        these tests are about)."""
        env = {
            "SVCPAY_RPC_URL": self.rpc,
            "SVCPAY_NETWORK": SVCPAY_DEVNET,
            "SVCPAY_DATABASE_URL": f"sqlite:///{self.tmp / 'facilitator.db'}",
            "SVCPAY_FACILITATOR_KEYPAIR": str(save_keypair(keypair, self.tmp / "facilitator.json")),
            "SVCPAY_SETTLE_UNREGISTERED": "1",
            # No indexer: a new facilitator reads the program's whole history, here every
            # earlier test's (on solana-test-validator, three test processes'), 500
            # getTransaction calls every 2 s against the validator the other tests wait on.
            # These tests are about payments; tests/facilitator/test_indexer.py is the
            # indexer's.
            "SVCPAY_INDEXER_INTERVAL_SECS": "0",
        }
        argv = [sys.executable, "-m", "svcpay.cli", "facilitator", "serve", "--port", "0"]
        return self.processes.start("svcpay facilitator", argv, "svcpay facilitator ready", env)

    def resource_server(self, facilitator_url: str, market: Market, metered: Plan) -> str:
        """The example API (py/svcpay/examples/resource_server.py), paid to `market`'s seller."""
        env = {
            "SVCPAY_RPC_URL": self.rpc,
            "SVCPAY_NETWORK": SVCPAY_DEVNET,
            "SVCPAY_FACILITATOR_URL": facilitator_url,
            "SVCPAY_PAY_TO": str(market.seller_account),
            "SVCPAY_MINT": str(market.mint),
            "SVCPAY_SUBSCRIPTION_PLAN": str(market.plan.address),
            "SVCPAY_METERED_PLAN": str(metered.address),
            "SVCPAY_BILLING_AUTHORITY": str(
                save_keypair(metered.billing_authority, self.tmp / "billing-authority.json")
            ),
            "SVCPAY_STATE_DB": str(self.tmp / "resource-server.db"),
        }
        argv = [sys.executable, "-m", "svcpay.examples.resource_server", "--port", "0"]
        ready = "svcpay resource server ready"
        return self.processes.start("svcpay resource server", argv, ready, env)


@pytest.fixture
def svcpay(validator: Localnet, processes: Processes, tmp_path: Path) -> Svcpay:
    return Svcpay(validator.url, processes, tmp_path)


@dataclass
class Ts:
    """The TypeScript SDK's programs, run by Node.js from a directory beside its
    node_modules (Node resolves an ES module's packages from the module's own directory)."""

    home: Path
    rpc: str
    processes: Processes

    def facilitator(self, fee_payer_file: Path) -> str:
        argv = [
            "node", str(self.home / "ts_facilitator.mjs"), "--keypair", str(fee_payer_file),
            "--rpc", self.rpc, "--network", DEVNET,
        ]  # fmt: skip
        return self.processes.start("x402-ts facilitator", argv, "x402-ts facilitator ready")

    def server(self, facilitator_url: str, market: Market, price: int) -> str:
        argv = [
            "node", str(self.home / "ts_server.mjs"), "--facilitator", facilitator_url,
            "--pay-to", str(market.seller), "--mint", str(market.mint), "--network", DEVNET,
            "--price", str(price),
        ]  # fmt: skip
        return self.processes.start("x402-ts server", argv, "x402-ts server ready")

    def pay(self, url: str, market: Market, *, replay: bool = False) -> dict[str, object]:
        """The SDK's paying fetch GETs `url` as `market`'s buyer: its JSON report."""
        argv = [
            "node", str(self.home / "ts_client.mjs"), url, "--keypair", str(market.buyer_file),
            "--rpc", self.rpc, "--network", DEVNET, "--mint", str(market.mint),
        ]  # fmt: skip
        done = run_to_end(argv + (["--replay"] if replay else []))
        assert done.stdout.strip(), f"the TS client printed nothing:\n{done.stderr[-3000:]}"
        report: dict[str, object] = json.loads(done.stdout)
        assert done.returncode == 0, (report, done.stderr[-3000:])
        return report


@pytest.fixture
def ts(ts_modules: Path, validator: Localnet, processes: Processes, tmp_path: Path) -> Ts:
    return Ts(node_home(tmp_path, TS_PROGRAMS, ts_modules), validator.url, processes)


@dataclass
class Mppx:
    """The TypeScript MPP SDK's MCP programs (mppx/), on the validator presented as devnet."""

    home: Path
    rpc: str
    processes: Processes

    def server(self, market: Market, price: int) -> str:
        """An MCP server whose `forecast` costs `price` of `market`'s mint, paid to its
        seller by MPP charge, `market`'s fee payer sponsoring the fee: its endpoint."""
        argv = [
            "node", str(self.home / "mppx_server.mjs"), "--rpc", self.rpc,
            "--recipient", str(market.seller), "--mint", str(market.mint), "--decimals", "6",
            "--price", str(price), "--network", MPP_DEVNET,
            "--keypair", str(market.fee_payer_file),
        ]  # fmt: skip
        return self.processes.start("mppx server", argv, "mppx server ready")

    def call(
        self,
        url: str,
        market: Market,
        tool: str,
        arguments: dict[str, object],
        *,
        await_finalized: bool = False,
    ) -> tuple[int, dict[str, object]]:
        """mppx's MCP client calls `tool` at `url`, paying as `market`'s buyer: its exit
        status and JSON report (`await_finalized`: see mppx_client.mjs)."""
        argv = [
            "node", str(self.home / "mppx_client.mjs"), url, "--tool", tool,
            "--arguments", json.dumps(arguments), "--keypair", str(market.buyer_file),
            "--rpc", self.rpc,
        ]  # fmt: skip
        return node_report(argv + ["--await-finalized"] * await_finalized, "the mppx MCP client")


@pytest.fixture
def mppx(mppx_modules: Path, validator: Localnet, processes: Processes, tmp_path: Path) -> Mppx:
    return Mppx(node_home(tmp_path, MPPX_PROGRAMS, mppx_modules), validator.url, processes)


@dataclass
class PayKit:
    """solana-foundation's pay-kit, run by its own environment (scripts/pay-kit)."""

    python: str
    rpc: str
    processes: Processes
    tmp: Path

    def server(self, fee_payer: Keypair, pay_to: Pubkey, price_usd: str) -> str:
        """pay-kit's FastAPI server, its operator (fee payer) `fee_payer`."""
        keypair = save_keypair(fee_payer, self.tmp / "pay-kit-operator.json")
        argv = [
            self.python, str(PAY_KIT_PROGRAMS / "pk_server.py"), "--keypair", str(keypair),
            "--rpc", self.rpc, "--pay-to", str(pay_to), "--price-usd", price_usd,
        ]  # fmt: skip
        # pay-kit keeps its MPP challenge secret in ./.env unless given one
        env = {"PAY_KIT_MPP_CHALLENGE_BINDING_SECRET": "svcpay-interop-" + "0" * 32}
        return self.processes.start("pay-kit server", argv, "pay-kit server ready", env)

    def pay(
        self, url: str, market: Market, *, replay: bool = False, accept: str = "mpp,x402"
    ) -> dict[str, object]:
        """pay-kit's PayKitClient GETs `url` as `market`'s buyer (paying with the protocols
        in `accept`): its JSON report."""
        argv = [
            self.python, str(PAY_KIT_PROGRAMS / "pk_client.py"), url,
            "--keypair", str(market.buyer_file), "--rpc", self.rpc, "--mint", str(market.mint),
            "--accept", accept,
        ]  # fmt: skip
        done = run_to_end(argv + (["--replay"] if replay else []))
        assert done.stdout.strip(), f"the pay-kit client printed nothing:\n{done.stderr[-3000:]}"
        report: dict[str, object] = json.loads(done.stdout)
        assert done.returncode == 0, (report, done.stderr[-3000:])
        return report


@pytest.fixture
def pay_kit(
    pay_kit_python: str, validator: Localnet, processes: Processes, tmp_path: Path
) -> PayKit:
    return PayKit(pay_kit_python, validator.url, processes, tmp_path)
