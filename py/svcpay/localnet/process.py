"""Starting and stopping a local validator with the svc_billing program on it.

Two backends, chosen by `SVCPAY_VALIDATOR` (or the `validator` argument):

- `drop-in` (the default): svcpay's drop-in (svcpay.localnet.server), LiteSVM with mainnet's
  features behind a JSON-RPC server of our own, run by the current interpreter in a process
  of its own. It starts in a second and can travel in time.
- `solana-test-validator`: agave's test validator 4.2.x (scripts/build-validator builds and
  caches it), on free ports of its own (RPC, faucet, gossip, a dynamic range) so it can run
  beside another validator, with every feature mainnet has not activated switched off at
  genesis. The program is loaded at genesis (`--bpf-program`), or deployed with real
  upgradeable-loader transactions when `deploy=True`, as users put it on a cluster.

Both listen on loopback and are stopped, with their children, when the context exits.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from svcpay import stopping
from svcpay.localnet import validator as stv
from svcpay.program.generated.program_id import PROGRAM_ID
from svcpay.progress import Watch
from svcpay.watchdog import GroupWatchdog

ROOT = Path(__file__).resolve().parents[3]
PROGRAM_SO = ROOT / "target" / "deploy" / "svc_billing.so"
PROGRAM_KEYPAIR = ROOT / "keys" / "svc_billing-localnet-keypair.json"
# The Token-2022 transfer hook the tests attach to mints (programs/svc_test_hook), built
# beside svc_billing by scripts/build-program and loaded at genesis wherever it is.
TEST_HOOK_ID = "85zuLQZ3X5VrmdsCqMYUPapaNwhMF7TrMBxg4GXEE1dG"
TEST_HOOK_SO = ROOT / "target" / "deploy" / "svc_test_hook.so"
DROP_IN = "drop-in"
TEST_VALIDATOR = "solana-test-validator"
BACKENDS = (DROP_IN, TEST_VALIDATOR)


class ProgramBinaryMissing(RuntimeError):
    """The program has not been built (scripts/build-program)."""


class LocalnetError(RuntimeError):
    """The local validator could not be started."""


@dataclass(frozen=True)
class Localnet:
    url: str
    kind: str  # "solana-test-validator" or "svcpay-drop-in"
    version: str = ""

    @property
    def can_time_travel(self) -> bool:
        return self.kind == "svcpay-drop-in"

    def describe(self) -> str:
        name = f"{self.kind} {self.version}" if self.version else self.kind
        return f"{name} at {self.url}"


def backend(explicit: str | None = None) -> str:
    """The backend to start: `explicit`, else $SVCPAY_VALIDATOR, else the drop-in."""
    name = explicit or os.environ.get("SVCPAY_VALIDATOR") or DROP_IN
    if name not in BACKENDS:
        raise LocalnetError(f"SVCPAY_VALIDATOR={name!r}: use one of {', '.join(BACKENDS)}")
    return name


def _rpc(url: str, method: str, params: list[object] | None = None) -> object:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params or []}
    return httpx.post(url, json=body, timeout=5).json().get("result")


def _wait_healthy(
    url: str, proc: subprocess.Popen[bytes], log: Path, commitment: str = "finalized"
) -> None:
    """Until the node is healthy and its slot at `commitment` is past the first. The drop-in
    asks `processed` (0.4 s): its `finalized` lags 32 slots, 13 s of every start. Waited on
    while the node makes progress (its log grows, or its slot moves: svcpay.progress), not
    for a fixed time: on a loaded machine solana-test-validator took over 90 s to its tenth
    slot (docs/adr/0047)."""
    slot: object = None

    def progress() -> tuple[int, object]:
        try:
            size = log.stat().st_size
        except OSError:
            size = 0
        return size, slot

    watch = Watch(measure=progress, sign="its log and its slot did not move")
    while True:
        if proc.poll() is not None:
            raise LocalnetError(f"the validator exited with {proc.returncode}:\n{_tail(log)}")
        try:
            # Healthy, and past its first slot: blockhashes and airdrops work from here.
            slot = _rpc(url, "getSlot", [{"commitment": commitment}])
            if _rpc(url, "getHealth") == "ok" and isinstance(slot, int) and slot > 0:
                return
        except (httpx.HTTPError, ValueError):
            pass
        if why := watch.stalled():
            raise LocalnetError(f"the validator {why} before it was healthy:\n{_tail(log)}")
        stopping.sleep(0.2)


def _tail(log: Path) -> str:
    try:
        return log.read_text(errors="replace")[-3000:]
    except OSError:
        return ""


def _drop_in_command(
    program: Path | None, accounts: Sequence[tuple[str, Path]] = ()
) -> tuple[list[str], str]:
    port = stv.free_port_block(1)
    cmd = [sys.executable, "-m", "svcpay.localnet.server", "--rpc-port", str(port)]
    if program is not None:
        cmd += ["--bpf-program", str(PROGRAM_ID), str(program)]
    for address, so in _test_programs(program):
        cmd += ["--bpf-program", address, str(so)]
    for address, file in accounts:
        cmd += ["--account", address, str(file)]
    return cmd, f"http://127.0.0.1:{port}"


def _test_programs(program: Path | None) -> list[tuple[str, Path]]:
    """The test hook, beside a program built in this checkout (where it is built too)."""
    if program is None or program.parent != TEST_HOOK_SO.parent or not TEST_HOOK_SO.exists():
        return []
    return [(TEST_HOOK_ID, TEST_HOOK_SO)]


@contextmanager
def _running(
    cmd: list[str], url: str, workdir: Path, commitment: str = "finalized"
) -> Iterator[None]:
    log = workdir / "validator.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    watchdog = None
    try:
        # Should this process die without stopping it (SIGKILL), the validator and its
        # ledger go too.
        watchdog = GroupWatchdog(proc.pid, remove=workdir)
        _wait_healthy(url, proc, log, commitment)
        yield
    finally:
        _stop(proc)
        if watchdog is not None:
            watchdog.close()


@contextmanager
def localnet(
    program: Path | None = PROGRAM_SO,
    *,
    validator: str | None = None,
    deploy: bool = False,
    accounts: Sequence[tuple[str, Path]] = (),
    ticks_per_slot: int | None = None,
) -> Iterator[Localnet]:
    """A running local validator with svc_billing at its program id, for the block's duration.

    `deploy` (solana-test-validator only) starts an empty validator and deploys the program
    through the upgradeable loader, as `svcpay program deploy` does on a cluster. `program`
    None starts a validator without it (to deploy it yourself). `accounts` ((address, JSON
    file), solana-test-validator's `--account`) exist from genesis on either validator.
    `ticks_per_slot` (solana-test-validator only; its default is 64, 400 ms slots): 16 makes
    100 ms slots, whose confirmations come four times sooner and whose blockhashes live 15 s
    (the tests use it; a person signing in a wallet wants the default)."""
    if program is not None and not program.exists():
        raise ProgramBinaryMissing(
            f"{program} is missing: run scripts/build-program (scripts/test does)"
        )
    kind = backend(validator)
    with tempfile.TemporaryDirectory(prefix="svcpay-localnet-") as tmp:
        workdir = Path(tmp)
        if kind == DROP_IN:
            cmd, url = _drop_in_command(program, accounts)
            with _running(cmd, url, workdir, commitment="processed"):
                yield Localnet(url, "svcpay-drop-in")
            return
        try:
            exe = stv.find_validator()
        except stv.ValidatorNotFound as e:
            raise LocalnetError(str(e)) from e
        version = stv.binary_version(exe) or "?"
        genesis = [] if deploy or program is None else [(str(PROGRAM_ID), program)]
        genesis += _test_programs(program)
        with ExitStack() as stack:
            for attempt in range(3):
                # A port picked as free can be taken before the validator binds it: only a
                # start that failed on a port is tried again, never the caller's block.
                ports = stv.Ports.pick()
                cmd = stv.command(exe, ports, workdir / "ledger", genesis, accounts, ticks_per_slot)
                url = f"http://127.0.0.1:{ports.rpc}"
                try:
                    stack.enter_context(_running(cmd, url, workdir))
                    break
                except LocalnetError as e:
                    if attempt == 2 or "address already in use" not in str(e).lower():
                        raise
            node = Localnet(url, TEST_VALIDATOR, version)
            if deploy and program is not None:
                _deploy(node, program)
            yield node


def _deploy(node: Localnet, program: Path) -> None:
    """Deploys `program` at PROGRAM_ID through the upgradeable loader; a fresh funded keypair
    pays and is the upgrade authority."""
    from solana.rpc.async_api import AsyncClient
    from solders.keypair import Keypair

    from svcpay.localnet.chain import Chain
    from svcpay.program.deploy import deploy

    payer = Chain(node.url).funded_keypair(20 * 10**9)
    program_keypair = Keypair.from_json(PROGRAM_KEYPAIR.read_text())

    async def run() -> None:
        rpc = AsyncClient(node.url)
        try:
            await deploy(rpc, payer, program_keypair, payer, program.read_bytes(), Keypair())
        finally:
            await rpc.close()

    stopping.run(run())


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Stops the validator and anything it started (its own process group)."""
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue
