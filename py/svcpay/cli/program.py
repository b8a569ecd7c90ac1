"""`svcpay program deploy|upgrade|show`: put the svc_billing program on a cluster.

The upgradeable loader's own transactions (svcpay.program.deploy), so a provider can deploy to
devnet or a local validator without the Solana CLI. Chunk writes resume: the buffer keypair
is kept in a file until the deploy succeeds, and running the same command again writes only
what is missing.
"""

from __future__ import annotations

import argparse
import ipaddress
from collections.abc import Awaitable, Callable
from pathlib import Path
from urllib.parse import urlparse

from solana.rpc.async_api import AsyncClient
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from solders.signature import Signature

from svcpay.cli._common import (
    CliError,
    NotFound,
    Subparsers,
    UsageError,
    command,
    emit,
    load_signer,
    pubkey_arg,
    run,
    stderr,
    subcommands,
    table,
)
from svcpay.keys import load_keypair, save_keypair
from svcpay.program.deploy import DeployError, ProgramInfo, deploy, program_info, upgrade_program
from svcpay.program.generated.program_id import PROGRAM_ID
from svcpay.rpc import connect

DEFAULT_SO = Path("target/deploy/svc_billing.so")
DEFAULT_PROGRAM_KEYPAIR = Path("target/deploy/svc_billing-keypair.json")
BUFFERS = Path(".svcpay/buffers")


def _elf(path: str) -> bytes:
    p = Path(path).expanduser()
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        raise UsageError(
            f"{p} not found: build the program (`scripts/build-program` or `anchor build`) "
            "or pass its .so path"
        ) from None
    if data[:4] != b"\x7fELF":
        raise UsageError(f"{p} is not an ELF program binary")
    return data


def _is_local(url: str) -> bool:
    host = urlparse(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _check_program_id(args: argparse.Namespace, program_id: Pubkey, elf: bytes) -> None:
    """The binary must declare the address it is deployed at (Anchor's declare_id!: any other
    address fails every call with DeclaredProgramIdMismatch), and the public localnet key
    never reaches a real cluster."""
    if bytes(program_id) not in elf:
        raise UsageError(
            f"the binary does not declare program id {program_id}: set declare_id! (and "
            "Anchor.toml) to it and rebuild, or deploy with the keypair it was built for"
        )
    if program_id == PROGRAM_ID and not _is_local(args.url):
        raise UsageError(
            f"{program_id} is svcpay's public localnet program key: anyone could upgrade it. "
            "On a real cluster deploy with a program keypair of your own "
            "(`svcpay keys create -o program.json`, then declare_id! and rebuild)"
        )


class _Buffer:
    """The buffer keypair: --buffer's file, else one kept per program under .svcpay/buffers/.
    An existing file is reused (to resume); a new keypair is saved just before its account is
    created, and the file is removed once a deploy or upgrade consumed the buffer."""

    def __init__(self, args: argparse.Namespace, program_id: Pubkey) -> None:
        self.path = (
            Path(args.buffer).expanduser() if args.buffer else BUFFERS / f"{program_id}.json"
        )
        self.keypair = load_keypair(self.path) if self.path.exists() else Keypair()

    def keep(self, keypair: Keypair) -> None:
        if not self.path.exists():
            save_keypair(keypair, self.path)

    def failed(self, e: DeployError) -> CliError:
        if self.path.exists():
            return CliError(f"{e} (run the same command again to resume: {self.path})")
        return CliError(str(e))

    def done(self) -> None:
        self.path.unlink(missing_ok=True)


def _progress(line: str) -> None:
    stderr(f"svcpay: {line}")


def _info_lines(info: ProgramInfo) -> list[str]:
    return table(
        [
            ("program id", str(info.program_id)),
            ("program data", str(info.programdata)),
            ("upgrade authority", str(info.authority) if info.authority else "none (immutable)"),
            ("last deployed in slot", str(info.last_deploy_slot)),
            ("data length", f"{info.data_len:,} bytes"),
            ("rent", f"{info.lamports / 10**9:g} SOL"),
            ("sha256", info.sha256),
        ]
    )


def deploy_cmd(args: argparse.Namespace) -> int:
    payer = load_signer(args)
    elf = _elf(args.so)
    program = load_signer(args, args.program_keypair)
    authority = load_signer(args, args.upgrade_authority) if args.upgrade_authority else payer
    _check_program_id(args, program.pubkey(), elf)
    buffer = _Buffer(args, program.pubkey())

    def action(rpc: AsyncClient) -> Awaitable[Signature]:
        return deploy(
            rpc, payer, program, authority, elf, buffer.keypair, max_data_len=args.max_len,
            progress=_progress, keep_buffer=buffer.keep,
        )  # fmt: skip

    return run(_apply(args, program.pubkey(), buffer, "deployed", action))


def upgrade_cmd(args: argparse.Namespace) -> int:
    payer = load_signer(args)
    elf = _elf(args.so)
    authority = load_signer(args, args.upgrade_authority) if args.upgrade_authority else payer
    _check_program_id(args, args.program_id, elf)
    buffer = _Buffer(args, args.program_id)

    def action(rpc: AsyncClient) -> Awaitable[Signature]:
        return upgrade_program(
            rpc, payer, args.program_id, authority, elf, buffer.keypair,
            progress=_progress, keep_buffer=buffer.keep,
        )  # fmt: skip

    return run(_apply(args, args.program_id, buffer, "upgraded", action))


async def _apply(
    args: argparse.Namespace,
    program_id: Pubkey,
    buffer: _Buffer,
    verb: str,
    action: Callable[[AsyncClient], Awaitable[Signature]],
) -> int:
    """Runs a deploy or upgrade, then prints what the program now is."""
    rpc = connect(args.url)
    try:
        try:
            sig = await action(rpc)
        except DeployError as e:
            raise buffer.failed(e) from None
        buffer.done()
        info = await program_info(rpc, program_id)
    finally:
        await rpc.close()
    assert info is not None
    data = {**info.as_json(), "signature": str(sig)}
    emit(args, data, [f"{verb} {program_id}", *_info_lines(info)])
    return 0


def show_cmd(args: argparse.Namespace) -> int:
    return run(_show(args))


async def _show(args: argparse.Namespace) -> int:
    rpc = connect(args.url)
    try:
        try:
            info = await program_info(rpc, args.program_id)
        except DeployError as e:
            raise CliError(str(e)) from None
    finally:
        await rpc.close()
    if info is None:
        raise NotFound(f"no program at {args.program_id} on {args.url}")
    emit(args, info.as_json(), _info_lines(info))
    return 0


def register(subparsers: Subparsers) -> None:
    group = command(
        subparsers,
        "program",
        None,
        help="deploy, upgrade and inspect the svc_billing program",
        description="Deploys the svc_billing program through the upgradeable BPF loader, as "
        "`solana program deploy` does: a buffer written in chunks (resumable), then deploy or "
        "upgrade. --keypair pays the fees and rent (about 7 SOL a megabyte of program) and is "
        "the upgrade authority unless --upgrade-authority names another keypair.",
        global_options=False,
    )
    sub = subcommands(group, "program commands")

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "so", nargs="?", default=str(DEFAULT_SO), metavar="PROGRAM.so",
            help=f"the program binary (default: {DEFAULT_SO})",
        )  # fmt: skip
        p.add_argument(
            "--upgrade-authority", metavar="KEYPAIR",
            help="keypair of the upgrade authority (default: --keypair)",
        )  # fmt: skip
        p.add_argument(
            "--buffer", metavar="KEYPAIR",
            help=f"buffer keypair file, to resume an interrupted write (default: one per "
            f"program in {BUFFERS}/, kept until the deploy succeeds)",
        )  # fmt: skip

    p = command(
        sub,
        "deploy",
        deploy_cmd,
        help="deploy the program at a new address",
        description="Deploys PROGRAM.so at the address of --program-keypair, which must be "
        "the program id the binary was built with (declare_id!). Refuses svcpay's public "
        "localnet program key on anything but a local validator.",
    )
    common(p)
    p.add_argument(
        "--program-keypair", metavar="KEYPAIR", default=str(DEFAULT_PROGRAM_KEYPAIR),
        help=f"the program's address keypair (default: {DEFAULT_PROGRAM_KEYPAIR})",
    )  # fmt: skip
    p.add_argument(
        "--max-len", type=int, metavar="BYTES",
        help="room for the program's code (default: its size; upgrades extend it as needed)",
    )  # fmt: skip

    p = command(
        sub,
        "upgrade",
        upgrade_cmd,
        help="replace a deployed program's code",
        description="Writes PROGRAM.so to a buffer and upgrades --program-id with it, signed "
        "by its upgrade authority (extending the program's data first when it grew).",
    )
    common(p)
    p.add_argument(
        "--program-id", type=pubkey_arg, default=PROGRAM_ID, metavar="ADDRESS",
        help=f"the program to upgrade (default: {PROGRAM_ID})",
    )  # fmt: skip

    p = command(
        sub,
        "show",
        show_cmd,
        help="print a deployed program's authority, size and hash",
        description="Prints the program's data account, upgrade authority, last deploy "
        "slot, size and the sha256 of its code (without the data account's zero padding).",
    )
    p.add_argument(
        "--program-id", type=pubkey_arg, default=PROGRAM_ID, metavar="ADDRESS",
        help=f"the program (default: {PROGRAM_ID})",
    )  # fmt: skip
