"""The workspace's test transfer hook (programs/svc_test_hook) from Python: Token-2022 mints
hooked to it, ready to move, for the tests and the demo.

A hooked mint's transfers fail until the hook program has the mint's validation account
(the extra accounts its Execute needs) and, for this hook, its counter: `initialize` creates
both. `create_mint` does it all in two transactions. The program exists only where
svcpay.localnet.process loaded it (beside svc_billing, when scripts/build-program built
target/deploy/svc_test_hook.so); `loaded` says whether a cluster has it. Never deployed to a
real cluster.
"""

from __future__ import annotations

import hashlib

from solders.instruction import AccountMeta, Instruction
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from solders.system_program import ID as SYSTEM_PROGRAM

from svcpay.localnet.chain import Chain
from svcpay.localnet.process import TEST_HOOK_ID
from svcpay.protocol import token2022 as t22

HOOK_PROGRAM = Pubkey.from_string(TEST_HOOK_ID)
COUNTER_SEED = b"counter"
# The counter's layout: discriminator, mint, authority, transfers (u64), refuse, last amount.
TRANSFERS_OFFSET = 8 + 32 + 32


def _discriminator(name: str) -> bytes:
    """Anchor's instruction discriminator: sha256("global:<name>")[:8]."""
    return hashlib.sha256(f"global:{name}".encode()).digest()[:8]


def counter_address(mint: Pubkey) -> Pubkey:
    """The hook's per-mint counter, the one extra account its Execute asks for."""
    return Pubkey.find_program_address([COUNTER_SEED, bytes(mint)], HOOK_PROGRAM)[0]


def initialize(payer: Pubkey, mint: Pubkey, authority: Pubkey | None = None) -> Instruction:
    """The hook's `initialize` for `mint`: its validation account and counter, paid by
    `payer`; `authority` (default: the payer) may later make it refuse transfers."""
    return Instruction(
        HOOK_PROGRAM,
        _discriminator("initialize"),
        [
            AccountMeta(payer, is_signer=True, is_writable=True),
            AccountMeta(authority or payer, is_signer=False, is_writable=False),
            AccountMeta(mint, is_signer=False, is_writable=False),
            AccountMeta(t22.validation_address(HOOK_PROGRAM, mint), False, True),
            AccountMeta(counter_address(mint), is_signer=False, is_writable=True),
            AccountMeta(SYSTEM_PROGRAM, is_signer=False, is_writable=False),
        ],
    )


def set_refuse(authority: Pubkey, mint: Pubkey, refuse: bool) -> Instruction:
    """Makes every later transfer of `mint` fail (`refuse`), or pass again; signed by the
    counter's authority."""
    return Instruction(
        HOOK_PROGRAM,
        _discriminator("set_refuse") + bytes([refuse]),
        [
            AccountMeta(authority, is_signer=True, is_writable=False),
            AccountMeta(counter_address(mint), is_signer=False, is_writable=True),
        ],
    )


def loaded(chain: Chain) -> bool:
    """Whether the cluster has the hook program (an executable account at its id)."""
    account = chain.account(HOOK_PROGRAM)
    return account is not None and account.executable


def transfers(chain: Chain, mint: Pubkey) -> int:
    """How many transfers of `mint` the hook has seen since `initialize`."""
    account = chain.account(counter_address(mint))
    if account is None:
        raise KeyError(f"the test hook has no counter for {mint}: initialize it")
    return int.from_bytes(account.data[TRANSFERS_OFFSET : TRANSFERS_OFFSET + 8], "little")


def create_mint(
    chain: Chain,
    decimals: int = 6,
    *,
    authority: Keypair | None = None,
    mint: Keypair | None = None,
    **extensions: object,
) -> Pubkey:
    """A Token-2022 mint with `extensions` (create_mint_instructions' keywords), whose mint
    authority (and every extension authority) is `authority`, the chain's payer by default.
    With `transfer_hook=HOOK_PROGRAM` the hook is initialized for it (the authority may make
    it refuse), so its tokens move at once."""
    authority = authority or chain.payer
    mint = mint or Keypair()
    ixs = t22.create_mint_instructions(
        chain.payer.pubkey(),
        mint.pubkey(),
        decimals,
        authority.pubkey(),
        rent_lamports=chain.minimum_balance,
        **extensions,  # type: ignore[arg-type]
    )
    chain.send_ok(ixs, [chain.payer, mint])
    if extensions.get("transfer_hook") == HOOK_PROGRAM:
        chain.send_ok([initialize(chain.payer.pubkey(), mint.pubkey(), authority.pubkey())],
                      [chain.payer])  # fmt: skip
    return mint.pubkey()


def pyusd_like(
    chain: Chain, *, hook: bool = True, authority: Keypair | None = None, decimals: int = 6
) -> Pubkey:
    """What PYUSD is on mainnet: Token-2022, 6 decimals, a transfer hook (this test hook,
    unless `hook` is False), a permanent delegate (the authority) and a transfer-fee config
    at zero."""
    owner = (authority or chain.payer).pubkey()
    return create_mint(
        chain,
        decimals,
        authority=authority,
        transfer_hook=HOOK_PROGRAM if hook else None,
        permanent_delegate=owner,
        transfer_fee=(0, 0),
    )
