"""Token-2022 mints for tests, over svcpay.localnet.test_hook (the workspace's transfer hook,
which counts transfers and can be told to refuse): mints with any extensions, PYUSD-like ones,
and the accounts a hooked mint's transfers carry."""

from __future__ import annotations

from solders.instruction import AccountMeta
from solders.pubkey import Pubkey

from svcpay.localnet import test_hook
from svcpay.protocol import token2022 as t22
from svcpay.protocol.programs import TOKEN_2022_PROGRAM
from tests.support.chain import Chain

HOOK = test_hook.HOOK_PROGRAM


def t22_mint(chain: Chain, decimals: int = 6, **extensions: object) -> Pubkey:
    """A Token-2022 mint with `extensions` (create_mint_instructions' names), the chain's
    payer its authority; a mint hooked to HOOK is initialized for it."""
    return test_hook.create_mint(chain, decimals, **extensions)


def pyusd_like(chain: Chain, decimals: int = 6) -> Pubkey:
    """What PYUSD is: Token-2022, a transfer hook, a permanent delegate and a zero fee."""
    return test_hook.pyusd_like(chain, decimals=decimals)


def set_refuse(chain: Chain, mint: Pubkey, refuse: bool) -> None:
    chain.send_ok([test_hook.set_refuse(chain.payer.pubkey(), mint, refuse)], [chain.payer])


def hook_transfers(chain: Chain, mint: Pubkey) -> int:
    return test_hook.transfers(chain, mint)


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
