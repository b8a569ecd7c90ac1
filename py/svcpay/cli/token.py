"""`svcpay token create-mint|mint|account|balance`: SPL tokens to test with, without the
spl-token CLI. Token accounts are associated token accounts (ATAs), created idempotently, so
every command can be run again safely."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Confirmed
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from solders.system_program import CreateAccountParams, create_account
from spl.token.constants import TOKEN_PROGRAM_ID
from spl.token.instructions import (
    create_idempotent_associated_token_account,
    get_associated_token_address,
    initialize_mint2,
    mint_to_checked,
)
from spl.token.models import InitializeMint2Params, MintToCheckedParams

from svcpay.cli._common import (
    MINT_SIZE,
    TOKEN_ACCOUNT_SIZE,
    CliError,
    NotFound,
    Subparsers,
    UsageError,
    amount_arg,
    billing_client,
    check_token_account,
    command,
    emit,
    fetch_token_account,
    format_units,
    load_signer,
    pubkey_arg,
    run,
    send,
    subcommands,
    table,
)
from svcpay.keys import load_keypair


@dataclass(frozen=True)
class MintInfo:
    address: Pubkey
    decimals: int
    supply: int
    authority: Pubkey | None


async def fetch_mint(rpc: AsyncClient, address: Pubkey) -> MintInfo:
    """The SPL Token mint at `address`; NotFound when there is no account, or it is not one."""
    info = (await rpc.get_account_info(address, Confirmed)).value
    if info is None:
        raise NotFound(f"mint {address} not found on this cluster: check the address and --url")
    data = bytes(info.data)
    if info.owner != TOKEN_PROGRAM_ID or len(data) != MINT_SIZE:
        what = "a token account" if len(data) == TOKEN_ACCOUNT_SIZE else "an account"
        raise NotFound(f"{address} is {what}, not an SPL Token mint: pass the token's mint")
    has_authority = int.from_bytes(data[0:4], "little") == 1
    return MintInfo(
        address,
        decimals=data[44],
        supply=int.from_bytes(data[36:44], "little"),
        authority=Pubkey.from_bytes(data[4:36]) if has_authority else None,
    )


async def _recipient(rpc: AsyncClient, to: Pubkey, mint: Pubkey) -> tuple[Pubkey, Pubkey]:
    """(owner, token account) for --to: a token account of `mint`, or a wallet whose ATA is
    meant."""
    info = (await rpc.get_account_info(to, Confirmed)).value
    if info is not None and info.owner == TOKEN_PROGRAM_ID:
        account = await check_token_account(rpc, to, what="--to", mint=mint)
        return account.owner, to
    return to, get_associated_token_address(to, mint)


# -- handlers -------------------------------------------------------------------------------
def create_mint_cmd(args: argparse.Namespace) -> int:
    payer = load_signer(args)
    mint = load_keypair(args.mint_keypair) if args.mint_keypair else Keypair()
    if not 0 <= args.decimals <= 9:
        raise UsageError(f"--decimals {args.decimals}: give 0 to 9 (USDC has 6)")
    return run(_create_mint(args, payer, mint))


async def _create_mint(args: argparse.Namespace, payer: Keypair, mint: Keypair) -> int:
    authority = args.mint_authority or payer.pubkey()
    async with billing_client(args) as billing:
        if (await billing.rpc.get_account_info(mint.pubkey(), Confirmed)).value is not None:
            raise CliError(f"{mint.pubkey()} already exists: use another --mint-keypair")
        rent = (await billing.rpc.get_minimum_balance_for_rent_exemption(MINT_SIZE)).value
        ixs = [
            create_account(
                CreateAccountParams(
                    from_pubkey=payer.pubkey(),
                    to_pubkey=mint.pubkey(),
                    lamports=rent,
                    space=MINT_SIZE,
                    owner=TOKEN_PROGRAM_ID,
                )
            ),
            initialize_mint2(
                InitializeMint2Params(
                    decimals=args.decimals,
                    program_id=TOKEN_PROGRAM_ID,
                    mint=mint.pubkey(),
                    mint_authority=authority,
                )
            ),
        ]
        receipt = await billing.send(ixs, [payer, mint])
    data = {
        "mint": str(mint.pubkey()),
        "decimals": args.decimals,
        "mintAuthority": str(authority),
        "signature": receipt.signature,
    }
    emit(
        args,
        data,
        [
            f"created mint {mint.pubkey()}",
            *table([("decimals", args.decimals), ("mint authority", authority)]),
        ],
    )
    return 0


def account_cmd(args: argparse.Namespace) -> int:
    payer = load_signer(args)
    return run(_account(args, payer))


async def _account(args: argparse.Namespace, payer: Keypair) -> int:
    owner = args.owner or payer.pubkey()
    ata = get_associated_token_address(owner, args.mint)
    async with billing_client(args) as billing:
        await fetch_mint(billing.rpc, args.mint)
        existed = await fetch_token_account(billing.rpc, ata) is not None
        signature = None
        if not existed:
            ix = create_idempotent_associated_token_account(payer.pubkey(), owner, args.mint)
            signature = (await send(lambda: billing.send([ix], [payer]))).signature
    data = {
        "account": str(ata),
        "owner": str(owner),
        "mint": str(args.mint),
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
        mint = await fetch_mint(billing.rpc, args.mint)
        if mint.authority != authority.pubkey():
            who = mint.authority or "nobody (the supply is fixed)"
            raise UsageError(
                f"{args.mint}'s mint authority is {who}, not {authority.pubkey()}: "
                f"sign with its keypair (-k)"
            )
        amount = args.amount.to_base(mint.decimals)
        owner, dest = await _recipient(billing.rpc, args.to or authority.pubkey(), args.mint)
        ixs = [
            create_idempotent_associated_token_account(authority.pubkey(), owner, args.mint),
            mint_to_checked(
                MintToCheckedParams(
                    program_id=TOKEN_PROGRAM_ID,
                    mint=args.mint,
                    dest=dest,
                    mint_authority=authority.pubkey(),
                    amount=amount,
                    decimals=mint.decimals,
                )
            ),
        ]
        if dest != get_associated_token_address(owner, args.mint):
            ixs = ixs[1:]  # a token account named by --to already exists
        receipt = await send(lambda: billing.send(ixs, [authority]))
        after = await check_token_account(billing.rpc, dest, what="token account")
    data = {
        "mint": str(args.mint),
        "account": str(dest),
        "owner": str(owner),
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
        mint = await fetch_mint(billing.rpc, args.mint)
        if args.account is not None:
            address = args.account
        else:
            assert owner is not None  # balance_cmd gives one unless --account
            address = get_associated_token_address(owner, args.mint)
        account = await fetch_token_account(billing.rpc, address)
        if account is not None and account.mint != args.mint:
            raise UsageError(f"token account {address} holds mint {account.mint}, not {args.mint}")
    amount = account.amount if account else 0
    data: dict[str, Any] = {
        "mint": str(args.mint),
        "account": str(address),
        "owner": str(account.owner if account else owner),
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
        description="SPL tokens for testing on a local validator or devnet: a mint you "
        "control, tokens minted to any wallet, associated token accounts (created only when "
        "missing) and balances. -k signs and pays the fees.",
        global_options=False,
    )
    sub = subcommands(group, "token commands")
    p = command(
        sub,
        "create-mint",
        create_mint_cmd,
        help="create a new mint (you are its mint authority)",
        description="Creates an SPL Token mint with --decimals, whose mint authority is -k "
        "(or --mint-authority), and prints its address.",
    )
    p.add_argument("--decimals", type=int, default=6, help="digits after the point (default: 6)")
    p.add_argument(
        "--mint-keypair", metavar="PATH", help="the mint's address keypair (default: new)"
    )
    p.add_argument("--mint-authority", type=pubkey_arg, metavar="PUBKEY",
                   help="who may mint (default: -k's public key)")  # fmt: skip
    p = command(
        sub,
        "mint",
        mint_cmd,
        help="mint tokens to a wallet (its associated account is created if missing)",
        description="Mints AMOUNT of MINT (signed by the mint authority, -k) into --to: a "
        "wallet's associated token account (created if missing) or a token account of MINT.",
        epilog="amounts: token units (10.5) or base units with a u suffix (10500000u)",
    )
    p.add_argument("mint", type=pubkey_arg, metavar="MINT")
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
        p.add_argument("mint", type=pubkey_arg, metavar="MINT")
        p.add_argument("--owner", type=pubkey_arg, metavar="PUBKEY",
                       help="the wallet (default: -k's public key)")  # fmt: skip
        if name == "balance":
            p.add_argument("--account", type=pubkey_arg, metavar="TOKEN_ACCOUNT",
                           help="a token account of MINT instead")  # fmt: skip
