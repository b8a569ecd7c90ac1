"""`svcpay token create-mint|mint|account|balance`: tokens to test with, without the
spl-token CLI, on SPL Token or Token-2022 (`create-mint --token-2022`, with a transfer fee
or a transfer hook). Every other command finds a mint's token program from the mint
account's owner. Token accounts are associated token accounts (ATAs) of that program,
created idempotently, so every command can be run again safely."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Confirmed
from solders.instruction import Instruction
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from solders.system_program import CreateAccountParams, create_account
from spl.token.instructions import (
    create_idempotent_associated_token_account,
    get_associated_token_address,
    initialize_mint2,
    mint_to_checked,
)
from spl.token.models import InitializeMint2Params, MintToCheckedParams

from svcpay.cli._common import (
    MINT_SIZE,
    CliError,
    Subparsers,
    UsageError,
    amount_arg,
    basis_points_arg,
    billing_client,
    check_token_account,
    command,
    emit,
    fetch_mint_info,
    fetch_token_account,
    format_units,
    load_signer,
    pubkey_arg,
    refuse_frozen,
    run,
    send,
    subcommands,
    table,
    token_program_name,
    zero_or_amount_arg,
)
from svcpay.cli._mints import MINT_HELP, mint_arg, resolve_mint
from svcpay.keys import load_keypair
from svcpay.protocol import token2022 as t22
from svcpay.protocol.programs import TOKEN_PROGRAM, TOKEN_PROGRAMS
from svcpay.protocol.token2022 import ExtensionType as ET
from svcpay.protocol.token2022 import MintInfo


def extension_name(kind: ET | int) -> str:
    """`transferFeeConfig` for TRANSFER_FEE_CONFIG; a newer type by its number."""
    if not isinstance(kind, ET):
        return f"unknown{int(kind)}"
    first, *rest = kind.name.lower().split("_")
    return first + "".join(word.title() for word in rest)


def _opt(key: Pubkey | None) -> str | None:
    return None if key is None else str(key)


def extensions_json(info: MintInfo) -> dict[str, dict[str, Any]]:
    """The mint's extensions by name, with what each holds that matters to a payment."""
    found: dict[str, dict[str, Any]] = {}
    for kind in info.extensions:
        details: dict[str, Any] = {}
        if kind == ET.TRANSFER_FEE_CONFIG and (fees := info.fee_config) is not None:
            details = {
                "basisPoints": fees.newer.basis_points,
                "maximumFee": fees.newer.maximum_fee,
                "fromEpoch": fees.newer.epoch,
                "authority": _opt(fees.config_authority),
            }
        elif kind == ET.TRANSFER_HOOK and (hook := info.transfer_hook) is not None:
            details = {"program": _opt(hook.program_id), "authority": _opt(hook.authority)}
        elif kind == ET.PERMANENT_DELEGATE:
            details = {"delegate": _opt(info.permanent_delegate)}
        elif kind == ET.PAUSABLE and (pausable := info.pausable) is not None:
            details = {"authority": _opt(pausable.authority), "paused": pausable.paused}
        elif kind == ET.DEFAULT_ACCOUNT_STATE:
            details = {"state": info.default_account_state.name.title()}
        elif kind == ET.INTEREST_BEARING_CONFIG and (rate := info.interest_bearing) is not None:
            details = {"rateBasisPoints": rate.current_rate}
        elif kind == ET.MINT_CLOSE_AUTHORITY:
            details = {"closeAuthority": _opt(info.close_authority)}
        found[extension_name(kind)] = details
    return found


def extension_rows(info: MintInfo) -> list[tuple[str, object]]:
    """What `token create-mint` prints about the mint's token program and extensions."""
    rows: list[tuple[str, object]] = [
        ("token program", f"{token_program_name(info.program)} ({info.program})")
    ]
    others = []
    for kind in info.extensions:
        if kind == ET.TRANSFER_FEE_CONFIG and (fees := info.fee_config) is not None:
            now = fees.newer
            cap = format_units(now.maximum_fee, info.decimals)
            rows.append(("transfer fee", f"{now.basis_points} bps, at most {cap} a transfer"))
        elif kind == ET.TRANSFER_HOOK:
            rows.append(("transfer hook", info.hook_program or "none (unset)"))
        else:
            others.append(extension_name(kind))
    if others:
        rows.append(("extensions", ", ".join(others)))
    return rows


async def _recipient(
    rpc: AsyncClient, to: Pubkey, mint: Pubkey, program: Pubkey
) -> tuple[Pubkey, Pubkey]:
    """(owner, token account) for --to: a token account of `mint`, or a wallet whose ATA
    (of the mint's token `program`) is meant."""
    info = (await rpc.get_account_info(to, Confirmed)).value
    if info is not None and info.owner in TOKEN_PROGRAMS:
        account = await check_token_account(rpc, to, what="--to", mint=mint)
        return account.owner, to
    return to, get_associated_token_address(to, mint, program)


# -- handlers -------------------------------------------------------------------------------
def create_mint_cmd(args: argparse.Namespace) -> int:
    if not 0 <= args.decimals <= 9:
        raise UsageError(f"--decimals {args.decimals}: give 0 to 9 (USDC has 6)")
    extensions = [
        flag
        for flag, given in (
            ("--transfer-fee-bps", args.transfer_fee_bps is not None),
            ("--max-fee", args.max_fee is not None),
            ("--transfer-hook", args.transfer_hook is not None),
        )
        if given
    ]
    if extensions and not args.token_2022:
        need = "needs" if len(extensions) == 1 else "need"
        raise UsageError(
            f"{' and '.join(extensions)} {need} --token-2022: SPL Token mints have no extensions"
        )
    if (args.transfer_fee_bps is None) != (args.max_fee is None):
        raise UsageError(
            "give --transfer-fee-bps and --max-fee together (e.g. --transfer-fee-bps 50 "
            "--max-fee 5: 0.5% of each transfer, at most 5 tokens)"
        )
    payer = load_signer(args)
    mint = load_keypair(args.mint_keypair) if args.mint_keypair else Keypair()
    return run(_create_mint(args, payer, mint))


async def _create_mint(args: argparse.Namespace, payer: Keypair, mint: Keypair) -> int:
    authority = args.mint_authority or payer.pubkey()
    async with billing_client(args) as billing:
        rpc = billing.rpc
        if (await rpc.get_account_info(mint.pubkey(), Confirmed)).value is not None:
            raise CliError(f"{mint.pubkey()} already exists: use another --mint-keypair")
        if args.token_2022:
            ixs = await _token_2022_mint(args, rpc, payer.pubkey(), mint.pubkey(), authority)
        else:
            ixs = await _spl_mint(args, rpc, payer.pubkey(), mint.pubkey(), authority)
        receipt = await billing.send(ixs, [payer, mint])
        info = await fetch_mint_info(rpc, mint.pubkey())
    data = {
        "mint": str(mint.pubkey()),
        "decimals": args.decimals,
        "mintAuthority": str(authority),
        "tokenProgram": str(info.program),
        "extensions": extensions_json(info),
        "signature": receipt.signature,
    }
    emit(
        args,
        data,
        [
            f"created mint {mint.pubkey()}",
            *table(
                [
                    ("decimals", args.decimals),
                    ("mint authority", authority),
                    *extension_rows(info),
                ]
            ),
        ],
    )
    return 0


async def _spl_mint(
    args: argparse.Namespace, rpc: AsyncClient, payer: Pubkey, mint: Pubkey, authority: Pubkey
) -> list[Instruction]:
    rent = (await rpc.get_minimum_balance_for_rent_exemption(MINT_SIZE)).value
    return [
        create_account(
            CreateAccountParams(
                from_pubkey=payer, to_pubkey=mint, lamports=rent, space=MINT_SIZE,
                owner=TOKEN_PROGRAM,
            )
        ),
        initialize_mint2(
            InitializeMint2Params(
                decimals=args.decimals, program_id=TOKEN_PROGRAM, mint=mint,
                mint_authority=authority,
            )
        ),
    ]  # fmt: skip


async def _token_2022_mint(
    args: argparse.Namespace, rpc: AsyncClient, payer: Pubkey, mint: Pubkey, authority: Pubkey
) -> list[Instruction]:
    """A Token-2022 mint with the extensions asked for; the mint authority holds their
    authorities (the fee config and withheld fees, the hook)."""
    fee = None
    if args.transfer_fee_bps is not None:
        fee = (args.transfer_fee_bps, args.max_fee.to_base(args.decimals))
    sizes: list[int] = []

    def size_of(space: int) -> int:
        sizes.append(space)
        return 0

    def build(rent: int | Callable[[int], int]) -> list[Instruction]:
        return t22.create_mint_instructions(
            payer, mint, args.decimals, authority,
            transfer_fee=fee, transfer_hook=args.transfer_hook, rent_lamports=rent,
        )  # fmt: skip

    build(size_of)  # only the module knows the size of a mint with these extensions
    return build((await rpc.get_minimum_balance_for_rent_exemption(sizes[0])).value)


def account_cmd(args: argparse.Namespace) -> int:
    payer = load_signer(args)
    return run(_account(args, payer))


async def _account(args: argparse.Namespace, payer: Keypair) -> int:
    owner = args.owner or payer.pubkey()
    async with billing_client(args) as billing:
        args.mint = await resolve_mint(billing.rpc, args.mint)  # a symbol: its address
        program = (await fetch_mint_info(billing.rpc, args.mint)).program
        ata = get_associated_token_address(owner, args.mint, program)
        existed = await fetch_token_account(billing.rpc, ata) is not None
        signature = None
        if not existed:
            ix = create_idempotent_associated_token_account(
                payer.pubkey(), owner, args.mint, program
            )
            signature = (await send(lambda: billing.send([ix], [payer]))).signature
    data = {
        "account": str(ata),
        "owner": str(owner),
        "mint": str(args.mint),
        "tokenProgram": str(program),
        "created": not existed,
        "signature": signature,
    }
    said = "exists" if existed else "created"
    emit(args, data, [str(ata), f"({said}: the associated account of {owner} for {args.mint})"])
    return 0


def mint_cmd(args: argparse.Namespace) -> int:
    authority = load_signer(args)
    return run(_mint(args, authority))


async def _mint(args: argparse.Namespace, authority: Keypair) -> int:
    async with billing_client(args) as billing:
        args.mint = await resolve_mint(billing.rpc, args.mint)  # a symbol: its address
        mint = await fetch_mint_info(billing.rpc, args.mint)
        if mint.mint_authority != authority.pubkey():
            who = mint.mint_authority or "nobody (the supply is fixed)"
            raise UsageError(
                f"{args.mint}'s mint authority is {who}, not {authority.pubkey()}: "
                f"sign with its keypair (-k)"
            )
        amount = args.amount.to_base(mint.decimals)
        program = mint.program
        to = args.to or authority.pubkey()
        owner, dest = await _recipient(billing.rpc, to, args.mint, program)
        existing = await fetch_token_account(billing.rpc, dest)
        if existing is not None:
            await refuse_frozen(billing.rpc, existing, what="the token account", can="receive")
        elif mint.default_frozen:
            raise CliError(
                f"new token accounts of {args.mint} start frozen (its default account state): "
                f"{dest} would be created frozen, and cannot receive until the mint's freeze "
                f"authority {mint.freeze_authority} thaws it: create it (`svcpay token account "
                f"{args.mint} --owner {owner}`), have it thawed, then mint"
            )
        ixs = [
            create_idempotent_associated_token_account(
                authority.pubkey(), owner, args.mint, program
            ),
            mint_to_checked(
                MintToCheckedParams(
                    program_id=program,
                    mint=args.mint,
                    dest=dest,
                    mint_authority=authority.pubkey(),
                    amount=amount,
                    decimals=mint.decimals,
                )
            ),
        ]
        if dest != get_associated_token_address(owner, args.mint, program):
            ixs = ixs[1:]  # a token account named by --to already exists
        receipt = await send(lambda: billing.send(ixs, [authority]))
        after = await check_token_account(billing.rpc, dest, what="token account")
    data = {
        "mint": str(args.mint),
        "account": str(dest),
        "owner": str(owner),
        "tokenProgram": str(program),
        "amount": amount,
        "balance": after.amount,
        "decimals": mint.decimals,
        "signature": receipt.signature,
    }
    emit(
        args,
        data,
        table(
            [
                ("minted", f"{format_units(amount, mint.decimals)} to {dest} (owner {owner})"),
                ("balance", format_units(after.amount, mint.decimals)),
            ]
        ),
    )
    return 0


def balance_cmd(args: argparse.Namespace) -> int:
    owner = args.owner or (None if args.account else load_signer(args).pubkey())
    return run(_balance(args, owner))


async def _balance(args: argparse.Namespace, owner: Pubkey | None) -> int:
    async with billing_client(args) as billing:
        args.mint = await resolve_mint(billing.rpc, args.mint)  # a symbol: its address
        mint = await fetch_mint_info(billing.rpc, args.mint)
        if args.account is not None:
            address = args.account
        else:
            assert owner is not None  # balance_cmd gives one unless --account
            address = get_associated_token_address(owner, args.mint, mint.program)
        account = await fetch_token_account(billing.rpc, address)
        if account is not None and account.mint != args.mint:
            raise UsageError(f"token account {address} holds mint {account.mint}, not {args.mint}")
    amount = account.amount if account else 0
    data: dict[str, Any] = {
        "mint": str(args.mint),
        "account": str(address),
        "owner": str(account.owner if account else owner),
        "tokenProgram": str(mint.program),
        "exists": account is not None,
        "amount": amount,
        "decimals": mint.decimals,
        "amountDecimal": format_units(amount, mint.decimals),
    }
    note = "" if account else f" (no account yet: `svcpay token account {args.mint}`)"
    emit(args, data, [f"{format_units(amount, mint.decimals)}{note}"])
    return 0


def register(subparsers: Subparsers) -> None:
    group = command(
        subparsers,
        "token",
        None,
        help="create a test token, mint it, make token accounts, show balances",
        description="Tokens for testing on a local validator or devnet, on SPL Token or "
        "Token-2022: a mint you control, tokens minted to any wallet, associated token "
        "accounts (created only when missing) and balances. A mint's token program is read "
        "from the chain. -k signs and pays the fees.",
        global_options=False,
    )
    sub = subcommands(group, "token commands")
    p = command(
        sub,
        "create-mint",
        create_mint_cmd,
        help="create a new mint (you are its mint authority)",
        description="Creates a mint with --decimals, whose mint authority is -k (or "
        "--mint-authority), and prints its address: an SPL Token mint, or with --token-2022 "
        "a Token-2022 mint, optionally with a transfer fee and a transfer hook (the mint "
        "authority holds their authorities).",
        epilog="amounts: token units (10.5) or base units with a u suffix (10500000u)\n\n"
        "example (a PYUSD-like mint with a 0.5% fee of at most 1 token):\n"
        "  svcpay token create-mint --token-2022 --transfer-fee-bps 50 --max-fee 1",
    )
    p.add_argument("--decimals", type=int, default=6, help="digits after the point (default: 6)")
    p.add_argument(
        "--mint-keypair", metavar="PATH", help="the mint's address keypair (default: new)"
    )
    p.add_argument("--mint-authority", type=pubkey_arg, metavar="PUBKEY",
                   help="who may mint (default: -k's public key)")  # fmt: skip
    p.add_argument("--token-2022", action="store_true",
                   help="a Token-2022 mint (default: SPL Token)")  # fmt: skip
    p.add_argument("--transfer-fee-bps", type=basis_points_arg, metavar="N",
                   help="Token-2022: withhold N basis points (0 to 10000) of each transfer "
                   "from what the recipient gets; needs --max-fee")  # fmt: skip
    p.add_argument("--max-fee", type=zero_or_amount_arg, metavar="AMOUNT",
                   help="Token-2022: the most a transfer's fee can be (token units, or base "
                   "units with a u suffix)")  # fmt: skip
    p.add_argument("--transfer-hook", type=pubkey_arg, metavar="PROGRAM",
                   help="Token-2022: the transfer-hook program every transfer calls (it "
                   "needs its own setup for the mint)")  # fmt: skip
    p = command(
        sub,
        "mint",
        mint_cmd,
        help="mint tokens to a wallet (its associated account is created if missing)",
        description="Mints AMOUNT of MINT (signed by the mint authority, -k) into --to: a "
        "wallet's associated token account (created if missing) or a token account of MINT.",
        epilog="amounts: token units (10.5) or base units with a u suffix (10500000u)",
    )
    p.add_argument("mint", type=mint_arg, metavar="MINT", help=MINT_HELP)
    p.add_argument("amount", type=amount_arg, metavar="AMOUNT")
    p.add_argument("--to", type=pubkey_arg, metavar="WALLET_OR_TOKEN_ACCOUNT",
                   help="who receives (default: -k's public key)")  # fmt: skip
    for name, handler, short, text in (
        ("account", account_cmd, "create a wallet's associated token account (idempotent)",
         "Prints the associated token account of --owner for MINT, creating it (paid by -k) "
         "when it does not exist yet."),
        ("balance", balance_cmd, "show a token balance",
         "Shows the balance of --owner's associated token account for MINT (0 when it has "
         "none), or of --account."),
    ):  # fmt: skip
        p = command(sub, name, handler, help=short, description=text)
        p.add_argument("mint", type=mint_arg, metavar="MINT", help=MINT_HELP)
        p.add_argument("--owner", type=pubkey_arg, metavar="PUBKEY",
                       help="the wallet (default: -k's public key)")  # fmt: skip
        if name == "balance":
            p.add_argument("--account", type=pubkey_arg, metavar="TOKEN_ACCOUNT",
                           help="a token account of MINT instead")  # fmt: skip
