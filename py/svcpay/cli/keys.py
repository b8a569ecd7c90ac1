"""`svcpay keys create|show|airdrop`: keypair files in the Solana CLI format."""

from __future__ import annotations

import argparse
from decimal import Decimal
from pathlib import Path

from solana.rpc.commitment import Confirmed
from solana.rpc.core import RPCException
from solders.keypair import Keypair

from svcpay.cli._common import (
    CliError,
    Subparsers,
    UsageError,
    command,
    emit,
    load_signer,
    plain_decimal,
    run,
    subcommands,
    table,
)
from svcpay.keys import save_keypair
from svcpay.rpc import connect

LAMPORTS_PER_SOL = 10**9
MAX_LAMPORTS = 2**64 - 1  # a u64


def create(args: argparse.Namespace) -> int:
    path = Path(args.outfile or args.keypair).expanduser()
    if path.exists() and not args.force:
        raise CliError(
            f"{path} already exists: refusing to overwrite a keypair "
            f"(pass --force to replace it; its key is then lost)"
        )
    keypair = Keypair()
    try:
        save_keypair(keypair, path, overwrite=args.force)
    except OSError as e:
        raise CliError(
            f"cannot write {path}: {e.strerror}: give --outfile a path you can write"
        ) from None
    data = {"pubkey": str(keypair.pubkey()), "path": str(path)}
    emit(args, data, [f"wrote a new keypair to {path}", f"pubkey: {keypair.pubkey()}"])
    return 0


def show(args: argparse.Namespace) -> int:
    path = args.path or args.keypair
    keypair = load_signer(args, path)
    data = {"pubkey": str(keypair.pubkey()), "path": str(Path(path).expanduser())}
    emit(args, data, [str(keypair.pubkey())])
    return 0


def airdrop(args: argparse.Namespace) -> int:
    try:
        sol = plain_decimal(args.sol.strip())
    except ValueError as e:
        raise UsageError(f"not an amount of SOL: {args.sol!r}: {e}") from None
    if sol <= 0 or sol != sol.quantize(Decimal("1e-9")):
        raise UsageError(f"not an amount of SOL: {args.sol!r} (e.g. 1 or 0.5)")
    if sol * LAMPORTS_PER_SOL > MAX_LAMPORTS:
        raise UsageError(
            f"amount out of range: {args.sol} SOL is more than a balance can hold "
            f"({Decimal(MAX_LAMPORTS) / LAMPORTS_PER_SOL} SOL); ask for a few SOL (e.g. 2)"
        )
    keypair = load_signer(args)
    return run(_airdrop(args, keypair, int(sol * LAMPORTS_PER_SOL)))


async def _airdrop(args: argparse.Namespace, keypair: Keypair, lamports: int) -> int:
    rpc = connect(args.url)
    try:
        try:
            sig = (await rpc.request_airdrop(keypair.pubkey(), lamports)).value
        except RPCException as e:
            raise CliError(
                f"the RPC at {args.url} gave no airdrop ({e}): only localnet and devnet do"
            ) from None
        await rpc.confirm_transaction(sig, Confirmed)
        balance = (await rpc.get_balance(keypair.pubkey(), Confirmed)).value
    finally:
        await rpc.close()
    data = {"pubkey": str(keypair.pubkey()), "lamports": lamports, "balance": balance}
    emit(
        args,
        data,
        table(
            [
                ("airdropped", f"{lamports / LAMPORTS_PER_SOL:g} SOL to {keypair.pubkey()}"),
                ("balance", f"{balance / LAMPORTS_PER_SOL:g} SOL"),
            ]
        ),
    )
    return 0


def register(subparsers: Subparsers) -> None:
    keys = command(
        subparsers,
        "keys",
        None,
        help="create and inspect keypair files",
        description="Keypair files in the Solana CLI format (a JSON array of the 64 secret-key "
        "bytes), usable with solana-keygen and the Solana CLI. Secrets are never printed.",
        global_options=False,
    )
    sub = subcommands(keys, "keys commands")

    p = command(
        sub,
        "create",
        create,
        help="write a new keypair file",
        description="Writes a new random keypair to --outfile (default: the --keypair path, "
        "~/.config/solana/id.json unless $SVCPAY_KEYPAIR says otherwise) and prints its "
        "public key. Never overwrites an existing file without --force.",
    )
    p.add_argument("--outfile", "-o", metavar="PATH", help="where to write the keypair")
    p.add_argument(
        "--force", action="store_true", help="replace an existing file (its key is lost)"
    )

    p = command(
        sub,
        "show",
        show,
        help="print a keypair's public key",
        description="Prints the public key of the keypair file PATH (default: --keypair).",
    )
    p.add_argument("path", nargs="?", metavar="PATH", help="keypair file (default: --keypair)")

    p = command(
        sub,
        "airdrop",
        airdrop,
        help="request SOL for fees (localnet and devnet)",
        description="Asks the cluster at --url for an airdrop of SOL to the --keypair's "
        "public key, to pay transaction fees and rent. Local validators and devnet give "
        "airdrops; mainnet does not.",
    )
    p.add_argument("sol", nargs="?", default="1", metavar="SOL", help="how much (default: 1)")
