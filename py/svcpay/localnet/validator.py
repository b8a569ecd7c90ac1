"""solana-test-validator: which binary, where it is cached, and how svcpay starts it.

svcpay is tested on agave's solana-test-validator 4.2.x (the 4.x loader is the one that runs
SBPF v3 programs as mainnet does; 4.2.2 is the newest that builds with our rustc). No registry
ships it: `scripts/build-validator` builds it from crates.io into a per-user cache, where the
harness finds it. Standard library only: the build script imports this module before any
environment exists.
"""

from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

VALIDATOR_VERSION = "4.2.2"
BINARY = "solana-test-validator"
# solana-net-utils' MINIMUM_VALIDATOR_PORT_RANGE_WIDTH is 26; a little more leaves room.
DYNAMIC_PORT_RANGE_WIDTH = 32


def cache_root() -> Path:
    base = os.environ.get("SVCPAY_CACHE") or Path(
        os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache", "svcpay"
    )
    return Path(base)


def validator_cache(version: str = VALIDATOR_VERSION) -> Path:
    return cache_root() / BINARY / version


def binary_version(path: Path | str) -> str | None:
    """The version a solana-test-validator binary reports (`4.2.2`), or None."""
    try:
        out = subprocess.run(
            [str(path), "--version"], capture_output=True, text=True, timeout=30, check=False
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    parts = out.split()  # "solana-test-validator 4.2.2 (src:...; feat:..., client:Agave)"
    return parts[1] if len(parts) > 1 else None


def cached_validator(version: str = VALIDATOR_VERSION) -> Path | None:
    """The cached binary of `version`, if it was built (scripts/build-validator)."""
    exe = validator_cache(version) / "install" / "bin" / BINARY
    if exe.is_file() and os.access(exe, os.X_OK):
        return exe
    return None


class ValidatorNotFound(RuntimeError):
    """No solana-test-validator binary to run."""


def find_validator() -> Path:
    """The solana-test-validator to run: $SVCPAY_SOLANA_TEST_VALIDATOR, else the cached build
    of the pinned version, else one on PATH that reports a 4.x version."""
    explicit = os.environ.get("SVCPAY_SOLANA_TEST_VALIDATOR")
    if explicit:
        if not Path(explicit).is_file():
            raise ValidatorNotFound(f"SVCPAY_SOLANA_TEST_VALIDATOR={explicit} does not exist")
        return Path(explicit)
    cached = cached_validator()
    if cached:
        return cached
    on_path = shutil.which(BINARY)
    if on_path and (binary_version(on_path) or "").startswith("4."):
        return Path(on_path)
    raise ValidatorNotFound(
        f"solana-test-validator {VALIDATOR_VERSION} is not built: run scripts/build-validator "
        f"(13 to 20 minutes on two idle cores, once; cached in {validator_cache()})"
    )


def _port_free(port: int) -> bool:
    for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM):
        with socket.socket(socket.AF_INET, kind) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                return False
    return True


def free_port_block(width: int, rng: random.Random | None = None) -> int:
    """The first port of `width` consecutive ports free for TCP and UDP on loopback."""
    rng = rng or random.Random()
    for _ in range(200):
        start = rng.randrange(20_000, 60_000 - width)
        if all(_port_free(p) for p in range(start, start + width)):
            return start
    raise RuntimeError(f"found no {width} consecutive free ports")


@dataclass(frozen=True)
class Ports:
    """RPC (and its websocket, rpc + 1), faucet, gossip, and the dynamic range
    [dynamic, dynamic + DYNAMIC_PORT_RANGE_WIDTH): all on loopback, all free when chosen, so
    the validator can run beside another one."""

    rpc: int
    faucet: int
    gossip: int
    dynamic: int

    @classmethod
    def pick(cls) -> Ports:
        start = free_port_block(3 + 1 + DYNAMIC_PORT_RANGE_WIDTH)
        return cls(rpc=start, faucet=start + 2, gossip=start + 3, dynamic=start + 4)

    def args(self) -> list[str]:
        end = self.dynamic + DYNAMIC_PORT_RANGE_WIDTH
        return [
            "--rpc-port",
            str(self.rpc),
            "--faucet-port",
            str(self.faucet),
            "--gossip-port",
            str(self.gossip),
            "--dynamic-port-range",
            f"{self.dynamic}-{end}",
            "--bind-address",
            "127.0.0.1",
        ]


def mainnet_feature_args() -> list[str]:
    """`--deactivate-feature` for every feature the validator enables that mainnet has not
    activated (py/svcpay/localnet/mainnet_features.py, from LiteSVM's mainnet snapshot)."""
    from svcpay.localnet.mainnet_features import INACTIVE_ON_MAINNET

    args: list[str] = []
    for feature in INACTIVE_ON_MAINNET:
        args += ["--deactivate-feature", feature]
    return args


def command(
    exe: Path,
    ports: Ports,
    ledger: Path,
    programs: Sequence[tuple[str, Path]] = (),
    accounts: Sequence[tuple[str, Path]] = (),
    ticks_per_slot: int | None = None,
) -> list[str]:
    """The command line of a solana-test-validator on `ports` with mainnet's features, a fresh
    ledger, `programs` ((program id, .so)) loaded at genesis (none: deploy them with
    `svcpay program deploy`, as users do) and `accounts` ((address, JSON file)).
    `ticks_per_slot` (default 64: 400 ms slots) shortens slots, and with them confirmation,
    finality and a blockhash's life (150 slots)."""
    cmd = [str(exe), *ports.args(), "--ledger", str(ledger), "--reset", "--quiet"]
    if ticks_per_slot is not None:
        cmd += ["--ticks-per-slot", str(ticks_per_slot)]
    for program_id, so in programs:
        cmd += ["--bpf-program", program_id, str(so)]
    for address, file in accounts:
        cmd += ["--account", address, str(file)]
    return cmd + mainnet_feature_args()
