"""Token-2022 mints for tests: with any extensions, PYUSD-like ones, and the workspace's
transfer hook (programs/svc_test_hook), which counts transfers and can be told to refuse."""

from __future__ import annotations

import hashlib

from solders.instruction import AccountMeta, Instruction
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from solders.system_program import ID as SYSTEM_PROGRAM

from svcpay.localnet.process import TEST_HOOK_ID
from svcpay.protocol import token2022 as t22
from svcpay.protocol.programs import TOKEN_2022_PROGRAM
from tests.support.chain import Chain

HOOK = Pubkey.from_string(TEST_HOOK_ID)


def _disc(name: str) -> bytes:
    return hashlib.sha256(f"global:{name}".encode()).digest()[:8]


def counter_address(mint: Pubkey) -> Pubkey:
    return Pubkey.find_program_address([b"counter", bytes(mint)], HOOK)[0]


def hook_transfers(chain: Chain, mint: Pubkey) -> int:
    acct = chain.account(counter_address(mint))
    assert acct is not None
    return int.from_bytes(acct.data[72:80], "little")


def init_hook(chain: Chain, mint: Pubkey) -> None:
    payer = chain.payer.pubkey()
    ix = Instruction(
        HOOK,
        _disc("initialize"),
        [
            AccountMeta(payer, True, True),
            AccountMeta(payer, False, False),
            AccountMeta(mint, False, False),
            AccountMeta(t22.validation_address(HOOK, mint), False, True),
            AccountMeta(counter_address(mint), False, True),
            AccountMeta(SYSTEM_PROGRAM, False, False),
        ],
    )
    chain.send_ok([ix], [chain.payer])


def set_refuse(chain: Chain, mint: Pubkey, refuse: bool) -> None:
    ix = Instruction(
        HOOK,
        _disc("set_refuse") + bytes([refuse]),
        [
            AccountMeta(chain.payer.pubkey(), True, False),
            AccountMeta(counter_address(mint), False, True),
        ],
    )
    chain.send_ok([ix], [chain.payer])


def t22_mint(chain: Chain, decimals: int = 6, **extensions: object) -> Pubkey:
    """A Token-2022 mint with `extensions` (create_mint_instructions' names), the chain's
    payer its authority."""
    mint = Keypair()
    ixs = t22.create_mint_instructions(
        chain.payer.pubkey(),
        mint.pubkey(),
        decimals,
        chain.payer.pubkey(),
        rent_lamports=chain.minimum_balance,
        **extensions,  # type: ignore[arg-type]
    )
    chain.send_ok(ixs, [chain.payer, mint])
    if extensions.get("transfer_hook") == HOOK:
        init_hook(chain, mint.pubkey())
    return mint.pubkey()


def pyusd_like(chain: Chain, decimals: int = 6) -> Pubkey:
    """What PYUSD is: Token-2022, 6 decimals, a transfer hook, a permanent delegate and a
    transfer-fee config at zero."""
    return t22_mint(
        chain,
        decimals,
        transfer_hook=HOOK,
        permanent_delegate=chain.payer.pubkey(),
        transfer_fee=(0, 0),
    )


def hook_extra(chain: Chain, mint: Pubkey) -> tuple[AccountMeta, ...]:
    """What every transfer of `mint` appends for its hook (the test hook's accounts depend
    on the mint alone): resolved from the chain, as a client does."""
    data = chain.account(mint)
    assert data is not None, f"no mint at {mint}"
    info = t22.mint_info(TOKEN_2022_PROGRAM, data.data)
    return tuple(
        t22.transfer_hook_accounts(
            info,
            mint_address=mint,
            source=Pubkey.default(),
            destination=Pubkey.default(),
            authority=Pubkey.default(),
            amount=0,
            account_data=lambda k: a.data if (a := chain.account(k)) else None,
        )
    )
