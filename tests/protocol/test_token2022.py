"""Token-2022 extensions: parsing from hand-built bytes, the fee arithmetic Token-2022 does,
mint sizes, instruction encodings, transfer-hook account resolution, and the real program on
a local validator agreeing with all of it."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any

import pytest
from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Confirmed
from solders.instruction import AccountMeta
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from spl.token.instructions import get_associated_token_address, transfer_checked
from spl.token.models import TransferCheckedParams

from svcpay.localnet.chain import Chain
from svcpay.localnet.process import localnet
from svcpay.protocol import token2022 as t22
from svcpay.protocol.mints import ChainMints, MintUnavailable
from svcpay.protocol.programs import TOKEN_2022_PROGRAM, TOKEN_PROGRAM
from svcpay.protocol.token2022 import ExtensionType as ET
from tests.support.chain import TICKS_PER_SLOT

U64_MAX = 2**64 - 1
ALICE, BOB, CAROL = Pubkey.new_unique(), Pubkey.new_unique(), Pubkey.new_unique()


# -- hand-built account data -----------------------------------------------------------------
def coption(key: Pubkey | None) -> bytes:
    """A base-state COption<Pubkey>: u32 tag, then 32 bytes either way."""
    return struct.pack("<I", 0 if key is None else 1) + (bytes(32) if key is None else bytes(key))


def base_mint(decimals: int = 6, supply: int = 0, initialized: bool = True) -> bytes:
    return coption(ALICE) + struct.pack("<QBB", supply, decimals, int(initialized)) + coption(None)


def tlv(*entries: tuple[int, bytes]) -> bytes:
    return b"".join(struct.pack("<HH", kind, len(value)) + value for kind, value in entries)


def extended_mint(*entries: tuple[int, bytes], tail: bytes = b"") -> bytes:
    return base_mint().ljust(165, b"\x00") + b"\x01" + tlv(*entries) + tail


def transfer_fee(epoch: int, maximum_fee: int, bps: int) -> bytes:
    return struct.pack("<QQH", epoch, maximum_fee, bps)


def fee_config(older: bytes, newer: bytes, withheld: int = 0) -> bytes:
    return bytes(ALICE) + bytes(32) + struct.pack("<Q", withheld) + older + newer


# -- fee arithmetic ----------------------------------------------------------------------------
def test_fee_rounds_up() -> None:
    fee = t22.TransferFee(epoch=0, maximum_fee=U64_MAX, basis_points=1)
    assert fee.fee(1) == 1  # 0.0001 of a unit is still a whole unit
    assert fee.fee(10_000) == 1
    assert fee.fee(10_001) == 2
    assert t22.TransferFee(0, U64_MAX, 150).fee(123_457) == 1852  # 1851.855 -> 1852


def test_fee_is_capped_at_maximum_fee() -> None:
    fee = t22.TransferFee(epoch=0, maximum_fee=5_000, basis_points=150)
    assert fee.fee(333_333) == 5_000  # 4999.995 -> 5000, exactly the cap
    assert fee.fee(10**12) == 5_000
    assert fee.fee(U64_MAX) == 5_000
    assert t22.TransferFee(0, 0, 10_000).fee(777) == 0


def test_zero_bps_and_zero_amount_cost_nothing() -> None:
    assert t22.TransferFee(0, 10**9, 0).fee(10**15) == 0
    assert t22.TransferFee(0, 10**9, 500).fee(0) == 0
    assert t22.TransferFee(0, 10**9, 0).gross_for_net(42) == 42


def test_full_rate_takes_everything_up_to_the_cap() -> None:
    fee = t22.TransferFee(0, 100, 10_000)
    assert fee.fee(40) == 40
    assert fee.fee(1_000) == 100
    assert fee.gross_for_net(900) == 1_000


def test_newer_schedule_applies_from_its_epoch() -> None:
    config = t22.TransferFeeConfig.from_bytes(
        fee_config(transfer_fee(3, 1_000, 100), transfer_fee(10, 50, 200))
    )
    assert config.fee_for(10_000, epoch=9) == 100  # older: 1%
    assert config.fee_for(10_000, epoch=10) == 50  # newer: 2%, capped at 50
    assert config.fee_for(10_000, epoch=11) == 50
    assert config.schedule(0).epoch == 3  # before both: still the older one


@pytest.mark.parametrize("bps", [0, 1, 7, 150, 3_333, 9_999, 10_000])
@pytest.mark.parametrize("cap", [0, 3, 40, U64_MAX])
def test_gross_for_net_is_the_smallest_amount_that_nets_exactly(bps: int, cap: int) -> None:
    fee = t22.TransferFee(0, cap, bps)
    nets = {gross - fee.fee(gross): gross for gross in reversed(range(600))}
    for net, smallest in nets.items():
        if smallest < 599:  # the brute force knows the smallest gross for this net
            assert fee.gross_for_net(net) == smallest, (bps, cap, net)
            assert fee.gross_for_net(net) - fee.fee(fee.gross_for_net(net)) == net


def test_fee_arithmetic_refuses_non_u64_amounts() -> None:
    fee = t22.TransferFee(0, 10, 100)
    with pytest.raises(ValueError):
        fee.fee(2**64)
    with pytest.raises(ValueError):
        fee.fee(-1)
    with pytest.raises(ValueError, match="no u64"):
        t22.TransferFee(0, U64_MAX, 5_000).gross_for_net(U64_MAX)


# -- TLV parsing -------------------------------------------------------------------------------
def test_mint_info_reads_base_and_extensions() -> None:
    hook = Pubkey.new_unique()
    data = extended_mint(
        (ET.TRANSFER_FEE_CONFIG, fee_config(transfer_fee(0, 9, 25), transfer_fee(0, 9, 25), 7)),
        (ET.TRANSFER_HOOK, bytes(ALICE) + bytes(hook)),
        (ET.PAUSABLE, bytes(BOB) + b"\x01"),
        (ET.PERMANENT_DELEGATE, bytes(CAROL)),
        (ET.DEFAULT_ACCOUNT_STATE, b"\x02"),
        (ET.MINT_CLOSE_AUTHORITY, bytes(BOB)),
        (ET.NON_TRANSFERABLE, b""),
    )
    info = t22.mint_info(TOKEN_2022_PROGRAM, data)
    assert (info.program, info.decimals, info.supply) == (TOKEN_2022_PROGRAM, 6, 0)
    assert info.mint_authority == ALICE and info.freeze_authority is None
    fees = info.fee_config
    assert fees is not None and fees.withheld_amount == 7 and fees.newer.basis_points == 25
    assert fees.config_authority == ALICE and fees.withdraw_withheld_authority is None
    assert info.fee_for(1_000, epoch=0) == 3  # 2.5 -> 3
    assert info.hook_program == hook
    assert info.paused and info.pausable == t22.PausableConfig(BOB, True)
    assert info.permanent_delegate == CAROL
    assert info.default_frozen and info.default_account_state == t22.AccountState.FROZEN
    assert info.close_authority == BOB and info.non_transferable


def test_plain_mints_of_both_programs_have_no_extensions() -> None:
    for program in (TOKEN_PROGRAM, TOKEN_2022_PROGRAM):
        info = t22.mint_info(program, base_mint(decimals=9, supply=12345))
        assert (info.decimals, info.supply, info.extensions) == (9, 12345, {})
        assert info.fee_config is None and info.hook_program is None
        assert not info.paused and info.permanent_delegate is None
        assert info.fee_for(10**6, epoch=5) == 0 and info.gross_for_net(10**6, 5) == 10**6


def test_zero_hook_program_means_no_hook() -> None:
    info = t22.mint_info(TOKEN_2022_PROGRAM, extended_mint((ET.TRANSFER_HOOK, bytes(64))))
    assert info.transfer_hook == t22.TransferHookConfig(None, None)
    assert info.hook_program is None


def test_unknown_extension_types_are_kept_by_number() -> None:
    data = extended_mint((ET.PERMANENT_DELEGATE, bytes(CAROL)), (999, b"abc"), (29, b""))
    exts = t22.extensions(data)
    assert exts == {ET.PERMANENT_DELEGATE: bytes(CAROL), 999: b"abc", 29: b""}
    assert isinstance(list(exts)[0], ET) and type(list(exts)[1]) is int
    assert t22.mint_info(TOKEN_2022_PROGRAM, data).unknown_extensions == [999, 29]


def test_walk_stops_at_uninitialized_and_tolerates_a_trailing_byte() -> None:
    delegate = (ET.PERMANENT_DELEGATE, bytes(CAROL))
    assert list(t22.extensions(extended_mint(delegate, tail=b"\x00\x00\xff\xff"))) == [
        ET.PERMANENT_DELEGATE
    ]
    assert list(t22.extensions(extended_mint(delegate, tail=b"\x07"))) == [ET.PERMANENT_DELEGATE]


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (extended_mint(tail=b"\x0c\x00\x20"), "no length"),  # type, half a length
        (extended_mint(tail=b"\x0c\x00\x20\x00" + bytes(31)), "past the data"),
        (extended_mint((12, bytes(32)), (12, bytes(32))), "twice"),
        (base_mint().ljust(165, b"\x00") + b"\x05", "account type"),
        (base_mint().ljust(164, b"\x00") + b"\x01\x01", "padding"),
        (bytes(355), "multisig"),
        (bytes(100), "neither"),
    ],
)
def test_malformed_data_is_refused(data: bytes, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        t22.extensions(data)


def test_extension_values_of_the_wrong_size_are_refused() -> None:
    info = t22.mint_info(TOKEN_2022_PROGRAM, extended_mint((ET.PERMANENT_DELEGATE, bytes(31))))
    with pytest.raises(ValueError, match="PERMANENT_DELEGATE"):
        _ = info.permanent_delegate
    info = t22.mint_info(TOKEN_2022_PROGRAM, extended_mint((ET.TRANSFER_FEE_CONFIG, bytes(107))))
    with pytest.raises(ValueError, match="TRANSFER_FEE_CONFIG"):
        _ = info.fee_config


def test_mint_info_refuses_what_is_not_an_initialized_mint() -> None:
    with pytest.raises(ValueError, match="not a token program"):
        t22.mint_info(Pubkey.new_unique(), base_mint())
    with pytest.raises(ValueError, match="not an initialized mint"):
        t22.mint_info(TOKEN_PROGRAM, base_mint(initialized=False))
    with pytest.raises(ValueError, match="165 bytes is not a mint"):
        t22.mint_info(TOKEN_2022_PROGRAM, bytes(165))
    with pytest.raises(ValueError, match="not a mint"):  # legacy SPL Token has no extensions
        t22.mint_info(TOKEN_PROGRAM, extended_mint((ET.PERMANENT_DELEGATE, bytes(CAROL))))
    account = base_mint().ljust(165, b"\x00") + b"\x02" + tlv((ET.MEMO_TRANSFER, b"\x01"))
    with pytest.raises(ValueError, match="not a mint"):
        t22.mint_info(TOKEN_2022_PROGRAM, account)


def test_token_account_info_reads_memo_and_withheld_fees() -> None:
    mint, owner = Pubkey.new_unique(), Pubkey.new_unique()
    base = (
        bytes(mint)
        + bytes(owner)
        + struct.pack("<Q", 500)
        + coption(None)
        + b"\x01"
        + bytes(12)  # is_native COption<u64>
        + struct.pack("<Q", 0)
        + coption(None)
    )
    assert len(base) == 165
    data = base + b"\x02" + tlv((ET.TRANSFER_FEE_AMOUNT, struct.pack("<Q", 33)), (8, b"\x01"))
    info = t22.token_account_info(TOKEN_2022_PROGRAM, data)
    assert (info.mint, info.owner, info.amount) == (mint, owner, 500)
    assert info.memo_required and info.withheld_amount == 33 and not info.frozen
    assert t22.account_type(data) == t22.AccountType.ACCOUNT
    plain = t22.token_account_info(TOKEN_PROGRAM, base)
    assert not plain.memo_required and plain.withheld_amount == 0


# -- sizes -------------------------------------------------------------------------------------
def test_mint_space_matches_try_calculate_account_len() -> None:
    # Expected values printed by spl-token-2022-interface 3.1.1's own function.
    assert t22.mint_space([]) == 82
    assert t22.mint_space([ET.TRANSFER_FEE_CONFIG]) == 278
    assert t22.mint_space([ET.NON_TRANSFERABLE]) == 170
    assert t22.mint_space([ET.PAUSABLE]) == 203
    assert t22.mint_space([ET.TRANSFER_HOOK]) == 234
    both = [ET.TRANSFER_FEE_CONFIG, ET.PERMANENT_DELEGATE, ET.MINT_CLOSE_AUTHORITY]
    assert t22.mint_space(both) == 350
    assert t22.mint_space([ET.TRANSFER_FEE_CONFIG, ET.TRANSFER_FEE_CONFIG]) == 278  # once
    everything = [*both, ET.TRANSFER_HOOK, ET.PAUSABLE]
    assert t22.mint_space(everything) == 455


def test_mint_space_avoids_the_multisig_length() -> None:
    # 166 + (4 + 52) + (4 + 129) would be 355, a multisig's length: two bytes more.
    assert t22.mint_space([ET.INTEREST_BEARING_CONFIG, ET.CONFIDENTIAL_TRANSFER_FEE_CONFIG]) == 357
    assert t22.mint_space([ET.TRANSFER_HOOK, ET.TOKEN_GROUP, ET.PAUSABLE]) == 357


def test_space_of_variable_length_and_account_extensions() -> None:
    with pytest.raises(ValueError, match="variable-length"):
        t22.mint_space([ET.TOKEN_METADATA])
    assert t22.account_space([]) == 165
    needed = t22.required_account_extensions([ET.TRANSFER_FEE_CONFIG, ET.NON_TRANSFERABLE])
    assert needed == [ET.TRANSFER_FEE_AMOUNT, ET.NON_TRANSFERABLE_ACCOUNT, ET.IMMUTABLE_OWNER]
    assert t22.account_space(needed) == 166 + 12 + 4 + 4


# -- instruction encodings ---------------------------------------------------------------------
def test_transfer_fee_config_encodes_coptions_compactly() -> None:
    mint, authority = Pubkey.new_unique(), Pubkey.from_bytes(bytes([11] * 32))
    ix = t22.initialize_transfer_fee_config(
        mint, 111, U64_MAX, config_authority=authority, withdraw_withheld_authority=None
    )
    # The interface crate's own packing test vector, behind the TransferFeeExtension tag.
    expected = bytes([26, 0, 1]) + bytes([11] * 32) + b"\x00" + struct.pack("<HQ", 111, U64_MAX)
    assert bytes(ix.data) == expected
    assert ix.program_id == TOKEN_2022_PROGRAM
    assert ix.accounts == [AccountMeta(mint, False, True)]
    set_fee = t22.set_transfer_fee(mint, authority, 10, 20)
    assert bytes(set_fee.data) == bytes([26, 5]) + struct.pack("<HQ", 10, 20)
    assert set_fee.accounts[1] == AccountMeta(authority, True, False)


def test_extension_initializer_layouts() -> None:
    mint, hook = Pubkey.new_unique(), Pubkey.new_unique()
    assert bytes(t22.initialize_transfer_hook(mint, hook, None).data) == (
        bytes([36, 0]) + bytes(32) + bytes(hook)
    )
    assert bytes(t22.update_transfer_hook(mint, ALICE, None).data) == bytes([36, 1]) + bytes(32)
    assert bytes(t22.initialize_pausable(mint, ALICE).data) == bytes([44, 0]) + bytes(ALICE)
    assert bytes(t22.pause(mint, ALICE).data) == bytes([44, 1])
    assert bytes(t22.resume(mint, ALICE).data) == bytes([44, 2])
    frozen = t22.initialize_default_account_state(mint, t22.AccountState.FROZEN)
    assert bytes(frozen.data) == bytes([28, 0, 2])
    assert bytes(t22.initialize_interest_bearing_mint(mint, -5, ALICE).data) == (
        bytes([33, 0]) + bytes(ALICE) + struct.pack("<h", -5)
    )
    assert bytes(t22.initialize_mint_close_authority(mint, None).data) == bytes([25, 0])
    assert bytes(t22.initialize_permanent_delegate(mint, BOB).data) == bytes([35]) + bytes(BOB)
    assert bytes(t22.initialize_non_transferable_mint(mint).data) == bytes([32])
    assert bytes(t22.initialize_mint2(mint, 6, ALICE, BOB).data) == (
        bytes([20, 6]) + bytes(ALICE) + b"\x01" + bytes(BOB)
    )
    memo = t22.enable_required_memo_transfers(mint, ALICE, signers=[BOB, CAROL])
    assert bytes(memo.data) == bytes([30, 0])
    assert [(m.is_signer, m.is_writable) for m in memo.accounts] == [
        (False, True),
        (False, False),  # a multisig owner: its signers sign
        (True, False),
        (True, False),
    ]


def test_builders_refuse_values_token_2022_would() -> None:
    mint = Pubkey.new_unique()
    with pytest.raises(ValueError, match="bps"):
        t22.initialize_transfer_fee_config(
            mint, 10_001, 1, config_authority=None, withdraw_withheld_authority=None
        )
    with pytest.raises(ValueError, match="i16"):
        t22.initialize_interest_bearing_mint(mint, 40_000, None)
    with pytest.raises(ValueError, match="Initialized or Frozen"):
        t22.initialize_default_account_state(mint, t22.AccountState.UNINITIALIZED)
    with pytest.raises(ValueError, match="freeze authority"):
        t22.create_mint_instructions(ALICE, mint, 6, ALICE, default_frozen=True, rent_lamports=1)


def test_create_mint_instructions_order_and_size() -> None:
    mint, sizes = Pubkey.new_unique(), []

    def rent(size: int) -> int:
        sizes.append(size)
        return 7 * size

    ixs = t22.create_mint_instructions(
        ALICE,
        mint,
        6,
        BOB,
        transfer_fee=(150, 5_000),
        permanent_delegate=CAROL,
        close_authority=ALICE,
        rent_lamports=rent,
    )
    assert [bytes(ix.data)[0] for ix in ixs[1:]] == [26, 25, 35, 20]
    assert sizes == [350]
    create = ixs[0].data
    lamports, space = struct.unpack_from("<QQ", bytes(create), 4)
    assert (lamports, space) == (2_450, 350)
    assert bytes(create)[20:52] == bytes(TOKEN_2022_PROGRAM)
    plain = t22.create_mint_instructions(ALICE, mint, 0, BOB, rent_lamports=1)
    assert len(plain) == 2 and struct.unpack_from("<Q", bytes(plain[0].data), 12)[0] == 82


# -- transfer-hook extra accounts --------------------------------------------------------------
HOOK = Pubkey.new_unique()
MINT, SOURCE, DEST, OWNER = (Pubkey.new_unique() for _ in range(4))


def test_validation_address_is_the_hook_programs_pda() -> None:
    expected = Pubkey.find_program_address([b"extra-account-metas", bytes(MINT)], HOOK)[0]
    assert t22.validation_address(HOOK, MINT) == expected
    discriminator = t22.EXECUTE_DISCRIMINATOR
    assert discriminator == bytes([105, 37, 101, 197, 75, 251, 102, 26])


def test_seed_packing_round_trips() -> None:
    seeds: list[t22.Seed] = [
        t22.SeedLiteral(b"vault"),
        t22.SeedInstructionData(index=8, length=8),
        t22.SeedAccountKey(index=2),
        t22.SeedAccountData(account_index=0, data_index=32, length=32),
    ]
    packed = t22.pack_seeds(seeds)
    assert packed[:16] == bytes([1, 5, *b"vault", 2, 8, 8, 3, 2, 4, 0, 32, 32])
    assert packed[16:] == bytes(16)
    assert t22.unpack_seeds(packed) == seeds
    with pytest.raises(ValueError, match="more than"):
        t22.pack_seeds([t22.SeedLiteral(bytes(31))])


KEY_SEEDS = bytes([3, 0] * 15)  # 15 AccountKey seeds: 30 bytes


@pytest.mark.parametrize(
    ("config", "match"),
    [
        (bytes([9]) + bytes(31), "unknown seed type"),
        (KEY_SEEDS + bytes([1, 5]), "truncated"),  # a 5-byte literal with no room for it
        (KEY_SEEDS + bytes([4, 0]), "truncated"),  # AccountData needs 3 more bytes
        (KEY_SEEDS + bytes([7, 0]), "unknown seed type"),
    ],
)
def test_malformed_seeds_are_refused(config: bytes, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        t22.unpack_seeds(config)


def hand_built_validation(*entries: bytes, count: int | None = None) -> bytes:
    """Validation data built byte by byte (not with pack_extra_account_metas)."""
    value = struct.pack("<I", len(entries) if count is None else count) + b"".join(entries)
    return bytes([105, 37, 101, 197, 75, 251, 102, 26]) + struct.pack("<I", len(value)) + value


def entry(discriminator: int, config: bytes, signer: bool, writable: bool) -> bytes:
    return bytes([discriminator]) + config.ljust(32, b"\x00") + bytes([signer, writable])


def test_parse_hand_built_validation_data() -> None:
    other_entry = bytes([7] * 8) + struct.pack("<I", 3) + b"xyz"  # another interface's entry
    data = other_entry + hand_built_validation(
        entry(0, bytes(ALICE), True, False), entry(1, bytes([3, 0]), False, True)
    )
    metas = t22.parse_extra_account_metas(data + bytes(20))  # slack after the entries
    assert metas == [
        t22.ExtraAccountMeta.fixed(ALICE, signer=True),
        t22.ExtraAccountMeta.pda([t22.SeedAccountKey(0)], writable=True),
    ]
    assert t22.pack_extra_account_metas(metas) == hand_built_validation(
        entry(0, bytes(ALICE), True, False), entry(1, bytes([3, 0]), False, True)
    )


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (hand_built_validation(entry(0, bytes(ALICE), False, False), count=2), "claims 2"),
        (hand_built_validation(entry(0, bytes(ALICE), False, False))[:-1], "past the data"),
        (hand_built_validation(entry(0, bytes(ALICE), False, False) + b"!"), "not a list"),
        (bytes([7] * 8) + struct.pack("<I", 0), "no entry for the Execute"),
        (bytes(40), "no entry for the Execute"),
        (bytes(5), "truncated"),
        (hand_built_validation(entry(5, bytes(32), False, False)), "discriminator 5"),
        (hand_built_validation(entry(2, bytes(32), False, False)), "pubkey-data"),
        (hand_built_validation(entry(1, bytes([6]), False, False)), "seed type"),
    ],
)
def test_malformed_validation_data_is_refused(data: bytes, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        t22.parse_extra_account_metas(data)


def resolve(
    metas: list[t22.ExtraAccountMeta], data: dict[Pubkey, bytes], amount: int = 1_000
) -> list[AccountMeta]:
    return t22.resolve_extra_accounts(
        HOOK,
        metas,
        source=SOURCE,
        mint=MINT,
        destination=DEST,
        authority=OWNER,
        amount=amount,
        account_data=data.get,
    )


def pda(seeds: list[bytes], program: Pubkey = HOOK) -> Pubkey:
    return Pubkey.find_program_address(seeds, program)[0]


def test_resolution_of_every_kind_of_extra_account() -> None:
    other_program, fixed, from_data = (Pubkey.new_unique() for _ in range(3))
    validation = t22.validation_address(HOOK, MINT)
    source_data = bytes(64) + bytes(from_data) + b"tail"
    metas = [
        # 5: a fixed account the hook wants writable (and claims signs: it never can)
        t22.ExtraAccountMeta.fixed(fixed, signer=True, writable=True),
        # 6: the hook's PDA from a literal, the amount and the destination's key
        t22.ExtraAccountMeta.pda(
            [t22.SeedLiteral(b"counter"), t22.SeedInstructionData(8, 8), t22.SeedAccountKey(2)],
            writable=True,
        ),
        # 7: a fixed program, then 8: a PDA of it (account 7) from the source's data
        t22.ExtraAccountMeta.fixed(other_program),
        t22.ExtraAccountMeta.external_pda(
            7, [t22.SeedAccountData(0, 64, 32), t22.SeedAccountKey(6)]
        ),
        # 9: a pubkey read from the source's data; 10: the mint again, asked writable
        t22.ExtraAccountMeta.from_pubkey_data(t22.KeyFromAccountData(0, 64), writable=True),
        t22.ExtraAccountMeta.fixed(MINT, writable=True),
    ]
    counter = pda([b"counter", (1_000).to_bytes(8, "little"), bytes(DEST)])
    external = pda([bytes(from_data), bytes(counter)], other_program)
    assert resolve(metas, {SOURCE: source_data}) == [
        AccountMeta(fixed, is_signer=False, is_writable=True),
        AccountMeta(counter, is_signer=False, is_writable=True),
        AccountMeta(other_program, is_signer=False, is_writable=False),
        AccountMeta(external, is_signer=False, is_writable=False),
        AccountMeta(from_data, is_signer=False, is_writable=True),
        AccountMeta(MINT, is_signer=False, is_writable=False),  # read-only in Execute
        AccountMeta(HOOK, is_signer=False, is_writable=False),
        AccountMeta(validation, is_signer=False, is_writable=False),
    ]


def test_resolution_failures_are_value_errors() -> None:
    by_key_data = t22.ExtraAccountMeta.from_pubkey_data(t22.KeyFromInstructionData(8))
    with pytest.raises(ValueError, match="past the Execute instruction data"):
        resolve([by_key_data], {})
    with pytest.raises(ValueError, match="does not exist"):
        resolve([t22.ExtraAccountMeta.pda([t22.SeedAccountData(0, 0, 4)])], {})
    with pytest.raises(ValueError, match="too short"):
        resolve([t22.ExtraAccountMeta.pda([t22.SeedAccountData(0, 0, 4)])], {SOURCE: b"abc"})
    with pytest.raises(ValueError, match="not yet resolved"):
        resolve([t22.ExtraAccountMeta.pda([t22.SeedAccountKey(5)])], {})
    with pytest.raises(ValueError, match="limits"):
        resolve([t22.ExtraAccountMeta.pda([t22.SeedAccountData(0, 0, 33)])], {SOURCE: bytes(40)})


def hook_accounts(info: t22.MintInfo, stored: dict[Pubkey, bytes]) -> list[AccountMeta]:
    return t22.transfer_hook_accounts(
        info,
        mint_address=MINT,
        source=SOURCE,
        destination=DEST,
        authority=OWNER,
        amount=5,
        account_data=stored.get,
    )


def test_no_validation_account_means_no_extras() -> None:
    validation = t22.validation_address(HOOK, MINT)
    tail = [AccountMeta(HOOK, False, False), AccountMeta(validation, False, False)]
    assert t22.parse_extra_account_metas(None) == [] == t22.parse_extra_account_metas(b"")
    assert resolve([], {}) == tail
    hooked = t22.mint_info(TOKEN_2022_PROGRAM, extended_mint((14, bytes(ALICE) + bytes(HOOK))))
    assert hook_accounts(hooked, {}) == tail
    stored = {validation: t22.pack_extra_account_metas([t22.ExtraAccountMeta.fixed(BOB)])}
    assert hook_accounts(hooked, stored) == [AccountMeta(BOB, False, False), *tail]
    assert hook_accounts(t22.mint_info(TOKEN_2022_PROGRAM, base_mint()), stored) == []


# -- the real Token-2022 program ---------------------------------------------------------------
@pytest.fixture(scope="module")
def chain() -> Iterator[Chain]:
    with localnet(program=None, ticks_per_slot=TICKS_PER_SLOT) as node:
        yield Chain(node.url)


def create_mint(chain: Chain, **options: object) -> tuple[Pubkey, t22.MintInfo, int]:
    """A Token-2022 mint created with create_mint_instructions, read back: (mint, info,
    data length)."""
    mint = Keypair()
    ixs = t22.create_mint_instructions(
        chain.payer.pubkey(),
        mint.pubkey(),
        6,
        chain.payer.pubkey(),
        rent_lamports=chain.minimum_balance,
        **options,  # type: ignore[arg-type]
    )
    chain.send_ok(ixs, [chain.payer, mint])
    account = chain.account(mint.pubkey())
    assert account is not None and account.owner == TOKEN_2022_PROGRAM
    return mint.pubkey(), t22.mint_info(account.owner, account.data), len(account.data)


def read_mint(chain: Chain, address: Pubkey) -> t22.MintInfo:
    account = chain.account(address)
    assert account is not None
    return t22.mint_info(account.owner, account.data)


def token_account(chain: Chain, address: Pubkey) -> t22.TokenAccountInfo:
    account = chain.account(address)
    assert account is not None
    return t22.token_account_info(account.owner, account.data)


def transfer(chain: Chain, mint: Pubkey, owner: Keypair, dest_owner: Pubkey, amount: int) -> bool:
    params = TransferCheckedParams(
        program_id=TOKEN_2022_PROGRAM,
        source=get_associated_token_address(owner.pubkey(), mint, TOKEN_2022_PROGRAM),
        mint=mint,
        dest=get_associated_token_address(dest_owner, mint, TOKEN_2022_PROGRAM),
        owner=owner.pubkey(),
        amount=amount,
        decimals=6,
        signers=[],
    )
    return chain.send([transfer_checked(params)], [chain.payer, owner]).ok


def test_real_mint_with_fee_delegate_close_authority_and_pause(chain: Chain) -> None:
    delegate, closer = Pubkey.new_unique(), Pubkey.new_unique()
    mint, info, size = create_mint(
        chain,
        transfer_fee=(150, 5_000),
        permanent_delegate=delegate,
        close_authority=closer,
        pausable=True,
    )
    kinds = [ET.TRANSFER_FEE_CONFIG, ET.MINT_CLOSE_AUTHORITY, ET.PERMANENT_DELEGATE, ET.PAUSABLE]
    assert size == t22.mint_space(kinds) and list(info.extensions) == kinds
    assert (info.program, info.decimals, info.supply) == (TOKEN_2022_PROGRAM, 6, 0)
    assert info.mint_authority == chain.payer.pubkey() and info.freeze_authority is None
    fees = info.fee_config
    epoch = int(chain.rpc("getEpochInfo")["epoch"])
    assert fees is not None and fees.older == fees.newer  # both start as the given schedule
    assert (fees.newer.basis_points, fees.newer.maximum_fee, fees.newer.epoch) == (
        150,
        5_000,
        epoch,
    )
    assert fees.config_authority == fees.withdraw_withheld_authority == chain.payer.pubkey()
    assert fees.withheld_amount == 0
    assert info.permanent_delegate == delegate and info.close_authority == closer
    assert info.pausable == t22.PausableConfig(chain.payer.pubkey(), paused=False)
    assert info.hook_program is None and not info.default_frozen

    chain.send_ok([t22.pause(mint, chain.payer.pubkey())], [chain.payer])
    assert read_mint(chain, mint).paused
    chain.send_ok([t22.resume(mint, chain.payer.pubkey())], [chain.payer])
    assert not read_mint(chain, mint).paused


def test_real_transfer_withholds_exactly_fee_for(chain: Chain) -> None:
    mint, info, _ = create_mint(chain, transfer_fee=(150, 5_000), pausable=True)
    buyer, seller = chain.funded_keypair(), Keypair()
    chain.token_account(buyer.pubkey(), mint, 10**9, program_id=TOKEN_2022_PROGRAM)
    dest = chain.token_account(seller.pubkey(), mint, program_id=TOKEN_2022_PROGRAM)
    epoch = int(chain.rpc("getEpochInfo")["epoch"])

    received = withheld = 0
    for amount in (123_457, 10_000_000, 1):  # rounded up, capped, the smallest
        assert transfer(chain, mint, buyer, seller.pubkey(), amount)
        fee = info.fee_for(amount, epoch)
        received, withheld = received + amount - fee, withheld + fee
        account = token_account(chain, dest)
        assert (account.amount, account.withheld_amount) == (received, withheld)
    assert withheld == 1_852 + 5_000 + 1

    # What a buyer sends so that the seller receives a price exactly.
    gross = info.gross_for_net(1_000_000, epoch)
    assert transfer(chain, mint, buyer, seller.pubkey(), gross)
    assert token_account(chain, dest).amount == received + 1_000_000

    chain.send_ok([t22.pause(mint, chain.payer.pubkey())], [chain.payer])
    assert not transfer(chain, mint, buyer, seller.pubkey(), 10)  # a paused mint cannot move


def test_real_mint_with_hook_frozen_default_and_interest(chain: Chain) -> None:
    hook = Pubkey.new_unique()
    mint, info, size = create_mint(
        chain,
        transfer_hook=hook,
        non_transferable=True,
        default_frozen=True,
        freeze_authority=chain.payer.pubkey(),
        interest_rate=-250,
    )
    kinds = [
        ET.DEFAULT_ACCOUNT_STATE,
        ET.NON_TRANSFERABLE,
        ET.INTEREST_BEARING_CONFIG,
        ET.TRANSFER_HOOK,
    ]
    assert size == t22.mint_space(kinds) and list(info.extensions) == kinds
    assert info.hook_program == hook and info.transfer_hook is not None
    assert info.transfer_hook.authority == chain.payer.pubkey()
    assert info.default_frozen and info.non_transferable
    rate = info.interest_bearing
    assert rate is not None and rate.current_rate == rate.pre_update_average_rate == -250
    assert rate.rate_authority == chain.payer.pubkey() and rate.initialization_timestamp > 0
    # A new account of this mint starts frozen, as the extension says.
    holder = Pubkey.new_unique()
    account = chain.token_account(holder, mint, program_id=TOKEN_2022_PROGRAM)
    assert token_account(chain, account).frozen


def test_real_memo_requirement_on_an_account(chain: Chain) -> None:
    mint, _, _ = create_mint(chain, transfer_fee=(10, 100))
    owner = chain.funded_keypair()
    address = chain.token_account(owner.pubkey(), mint, program_id=TOKEN_2022_PROGRAM)
    assert not token_account(chain, address).memo_required
    grow = t22.reallocate(address, chain.payer.pubkey(), owner.pubkey(), [ET.MEMO_TRANSFER])
    enable = t22.enable_required_memo_transfers(address, owner.pubkey())
    chain.send_ok([grow, enable], [chain.payer, owner])
    account = token_account(chain, address)
    assert account.memo_required
    assert ET.TRANSFER_FEE_AMOUNT in account.extensions and ET.IMMUTABLE_OWNER in account.extensions


# -- mints read for one-time payments (svcpay.protocol.mints, docs/adr/0031) ------------------
class CountingClient(AsyncClient):
    """The validator's RPC, counting the calls a mint reader makes."""

    calls: list[str]

    def __init__(self, url: str) -> None:
        super().__init__(url, commitment=Confirmed)
        self.calls = []

    async def get_account_info(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append("getAccountInfo")
        return await super().get_account_info(*args, **kwargs)

    async def get_epoch_info(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append("getEpochInfo")
        return await super().get_epoch_info(*args, **kwargs)


@pytest.mark.anyio
async def test_chain_mints_reads_a_mint_once_and_the_epoch_only_when_a_fee_needs_it(
    chain: Chain,
) -> None:
    fee_mint, info, _ = create_mint(chain, transfer_fee=(150, 10_000))
    plain, _, _ = create_mint(chain)
    usdc_like = chain.create_mint()
    epoch = int(chain.rpc("getEpochInfo")["epoch"])
    rpc = CountingClient(chain.url)
    mints = ChainMints(rpc)
    try:
        assert await mints.at_epoch(usdc_like) == t22.MintAtEpoch(TOKEN_PROGRAM)
        assert await mints.at_epoch(plain) == t22.MintAtEpoch(TOKEN_2022_PROGRAM)
        assert rpc.calls == ["getAccountInfo"] * 2  # no fee: the epoch does not matter

        now = await mints.at_epoch(fee_mint)
        assert now == info.at(epoch) and now.fee_for(300_000) == 4_500
        assert rpc.calls[2:] == ["getAccountInfo", "getEpochInfo"]
        assert await mints.at_epoch(fee_mint) is now  # cached
        assert len(rpc.calls) == 4

        with pytest.raises(ValueError, match="no mint"):
            await mints.at_epoch(Pubkey.new_unique())
        with pytest.raises(ValueError):
            await mints.at_epoch(chain.payer.pubkey())  # a system account: not a mint
    finally:
        await rpc.close()


@pytest.mark.anyio
async def test_chain_mints_says_unavailable_when_the_node_cannot_be_reached() -> None:
    rpc = AsyncClient("http://127.0.0.1:9", commitment=Confirmed)  # the discard port: refused
    try:
        with pytest.raises(MintUnavailable, match="unreachable"):
            await ChainMints(rpc).at_epoch(Pubkey.new_unique())
    finally:
        await rpc.close()
