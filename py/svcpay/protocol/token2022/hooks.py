"""Transfer hooks: the validation account and its ExtraAccountMetaList
(spl-tlv-account-resolution's seeds and metas, packed and parsed), resolving a transfer's
extra accounts (`resolve_extra_accounts`, `transfer_hook_accounts`), and what a payment's
TransferChecked may carry past its four accounts (`transfer_accounts_problem`,
`names_token_2022`)."""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, TypeAlias

from solders.instruction import AccountMeta
from solders.pubkey import Pubkey

from svcpay.protocol.programs import TOKEN_2022_PROGRAM
from svcpay.protocol.token2022.fees import MintAtEpoch
from svcpay.protocol.token2022.layout import PUBKEY_LEN, _check_u64, _u32
from svcpay.protocol.token2022.state import MintInfo

if TYPE_CHECKING:
    from solders.transaction import VersionedTransaction


# -- transfer-hook extra accounts ---------------------------------------------------------
EXECUTE_DISCRIMINATOR = hashlib.sha256(b"spl-transfer-hook-interface:execute").digest()[:8]
EXTRA_ACCOUNT_METAS_SEED = b"extra-account-metas"
EXTRA_ACCOUNT_META_LEN = 35
EXECUTE_ACCOUNTS = 5  # source, mint, destination, authority, validation account
MAX_SEED_LEN = 32
MAX_PDA_SEEDS = 15  # 16 with the bump


def validation_address(hook_program: Pubkey, mint: Pubkey) -> Pubkey:
    """The hook program's account listing the extra accounts its Execute needs for `mint`."""
    return Pubkey.find_program_address([EXTRA_ACCOUNT_METAS_SEED, bytes(mint)], hook_program)[0]


@dataclass(frozen=True)
class SeedLiteral:
    """Fixed seed bytes."""

    value: bytes


@dataclass(frozen=True)
class SeedInstructionData:
    """`length` bytes of the Execute instruction data from `index` (8.. is the amount)."""

    index: int
    length: int


@dataclass(frozen=True)
class SeedAccountKey:
    """The key of the Execute account at `index` (0 source .. 4 validation, 5.. extras)."""

    index: int


@dataclass(frozen=True)
class SeedAccountData:
    """`length` bytes of the data of the account at `account_index`, from `data_index`."""

    account_index: int
    data_index: int
    length: int


Seed: TypeAlias = SeedLiteral | SeedInstructionData | SeedAccountKey | SeedAccountData


@dataclass(frozen=True)
class KeyFromInstructionData:
    """A pubkey read from the Execute instruction data at `index`."""

    index: int


@dataclass(frozen=True)
class KeyFromAccountData:
    """A pubkey read from the data of the account at `account_index`, at `data_index`."""

    account_index: int
    data_index: int


PubkeyData: TypeAlias = KeyFromInstructionData | KeyFromAccountData


def _seed_bytes(seed: Seed) -> bytes:
    if isinstance(seed, SeedLiteral):
        if len(seed.value) > 255:
            raise ValueError("a literal seed is at most 255 bytes")
        return bytes([1, len(seed.value)]) + seed.value
    if isinstance(seed, SeedInstructionData):
        return bytes([2, seed.index, seed.length])
    if isinstance(seed, SeedAccountKey):
        return bytes([3, seed.index])
    return bytes([4, seed.account_index, seed.data_index, seed.length])


def pack_seeds(seeds: Sequence[Seed]) -> bytes:
    """Seeds packed into a 32-byte address_config, zero-padded."""
    packed = b"".join(_seed_bytes(s) for s in seeds)
    if len(packed) > 32:
        raise ValueError(f"seeds take {len(packed)} bytes, more than an address_config's 32")
    return packed.ljust(32, b"\x00")


def unpack_seeds(config: bytes) -> list[Seed]:
    """The seeds packed in an address_config, read until a 0 byte or its end."""
    seeds: list[Seed] = []
    at = 0
    while at < len(config) and config[at] != 0:
        kind, rest = config[at], config[at + 1 :]
        need = {1: 1, 2: 2, 3: 1, 4: 3}.get(kind)
        if need is None:
            raise ValueError(f"unknown seed type {kind} at address_config offset {at}")
        if len(rest) < need or (kind == 1 and len(rest) < 1 + rest[0]):
            raise ValueError(f"seed type {kind} at address_config offset {at} is truncated")
        seed: Seed
        if kind == 1:
            seed = SeedLiteral(bytes(rest[1 : 1 + rest[0]]))
        elif kind == 2:
            seed = SeedInstructionData(rest[0], rest[1])
        elif kind == 3:
            seed = SeedAccountKey(rest[0])
        else:
            seed = SeedAccountData(rest[0], rest[1], rest[2])
        seeds.append(seed)
        at += len(_seed_bytes(seed))
    return seeds


def _unpack_pubkey_data(config: bytes) -> PubkeyData:
    kind = config[0]
    if kind == 1:
        return KeyFromInstructionData(config[1])
    if kind == 2:
        return KeyFromAccountData(config[1], config[2])
    raise ValueError(f"invalid pubkey-data type {kind}")


@dataclass(frozen=True)
class ExtraAccountMeta:
    """One entry of a validation account: how to find one extra account, and its flags.

    discriminator 0: address_config is the pubkey; 1: a PDA of the hook program from the
    packed seeds; 2: a pubkey read from instruction or account data; 128 + i: a PDA, from
    the packed seeds, of the program whose key is Execute account i."""

    discriminator: int
    address_config: bytes
    is_signer: bool
    is_writable: bool

    def __post_init__(self) -> None:
        if len(self.address_config) != 32:
            raise ValueError("an address_config is 32 bytes")
        d = self.discriminator
        if d == 1 or d >= 128:
            unpack_seeds(self.address_config)
        elif d == 2:
            _unpack_pubkey_data(self.address_config)
        elif d != 0:
            raise ValueError(f"unknown extra-account-meta discriminator {d}")

    @classmethod
    def fixed(
        cls, key: Pubkey, *, signer: bool = False, writable: bool = False
    ) -> ExtraAccountMeta:
        return cls(0, bytes(key), signer, writable)

    @classmethod
    def pda(
        cls, seeds: Sequence[Seed], *, signer: bool = False, writable: bool = False
    ) -> ExtraAccountMeta:
        """A PDA of the hook program itself."""
        return cls(1, pack_seeds(seeds), signer, writable)

    @classmethod
    def external_pda(
        cls,
        program_index: int,
        seeds: Sequence[Seed],
        *,
        signer: bool = False,
        writable: bool = False,
    ) -> ExtraAccountMeta:
        """A PDA of the program whose key is Execute account `program_index`."""
        if not 0 <= program_index < 128:
            raise ValueError(f"program index {program_index} is outside 0..127")
        return cls(128 + program_index, pack_seeds(seeds), signer, writable)

    @classmethod
    def from_pubkey_data(
        cls, key_data: PubkeyData, *, signer: bool = False, writable: bool = False
    ) -> ExtraAccountMeta:
        if isinstance(key_data, KeyFromInstructionData):
            config = bytes([1, key_data.index])
        else:
            config = bytes([2, key_data.account_index, key_data.data_index])
        return cls(2, config.ljust(32, b"\x00"), signer, writable)

    @classmethod
    def from_bytes(cls, raw: bytes) -> ExtraAccountMeta:
        if len(raw) != EXTRA_ACCOUNT_META_LEN:
            raise ValueError(f"an ExtraAccountMeta is {EXTRA_ACCOUNT_META_LEN} bytes")
        return cls(raw[0], bytes(raw[1:33]), raw[33] != 0, raw[34] != 0)

    def __bytes__(self) -> bytes:
        return (
            bytes([self.discriminator])
            + self.address_config
            + bytes([self.is_signer, self.is_writable])
        )


def pack_extra_account_metas(metas: Sequence[ExtraAccountMeta]) -> bytes:
    """Validation-account data listing `metas` for Execute: discriminator, u32 length, then
    a list (u32 count, entries), as ExtraAccountMetaList::init writes it."""
    value = struct.pack("<I", len(metas)) + b"".join(bytes(m) for m in metas)
    return EXECUTE_DISCRIMINATOR + struct.pack("<I", len(value)) + value


def _execute_entry(data: bytes) -> bytes:
    """The value of the TLV entry for Execute (8-byte discriminator, u32 length, value)."""
    at = 0
    while at < len(data):
        if len(data) - at < 12:
            raise ValueError(f"validation data is truncated at offset {at}")
        discriminator = data[at : at + 8]
        if discriminator == bytes(8):
            break
        end = at + 12 + _u32(data, at + 8)
        if end > len(data):
            raise ValueError(f"validation entry at offset {at} runs past the data")
        if discriminator == EXECUTE_DISCRIMINATOR:
            return data[at + 12 : end]
        at = end
    raise ValueError("validation data has no entry for the Execute instruction")


def parse_extra_account_metas(data: bytes | None) -> list[ExtraAccountMeta]:
    """The extra accounts a validation account lists for Execute; none for a missing or
    empty account. ValueError for anything malformed."""
    if not data:
        return []
    value = _execute_entry(data)
    if len(value) < 4 or (len(value) - 4) % EXTRA_ACCOUNT_META_LEN:
        raise ValueError(f"an Execute entry of {len(value)} bytes is not a list of metas")
    count = _u32(value, 0)
    if count > (len(value) - 4) // EXTRA_ACCOUNT_META_LEN:
        raise ValueError(f"the Execute entry claims {count} metas, more than it holds")
    size = EXTRA_ACCOUNT_META_LEN
    return [
        ExtraAccountMeta.from_bytes(value[4 + i * size : 4 + (i + 1) * size]) for i in range(count)
    ]


class _Accounts:
    """The Execute accounts resolved so far, with their data fetched once, on demand."""

    def __init__(self, keys: list[Pubkey], fetch: Callable[[Pubkey], bytes | None]) -> None:
        self.keys = keys
        self._fetch = fetch
        self._data: dict[Pubkey, bytes | None] = {}

    def key(self, index: int) -> Pubkey:
        if index >= len(self.keys):
            raise ValueError(f"extra account refers to account {index}, not yet resolved")
        return self.keys[index]

    def data(self, index: int, start: int, length: int) -> bytes:
        key = self.key(index)
        if key not in self._data:
            self._data[key] = self._fetch(key)
        data = self._data[key]
        if data is None:
            raise ValueError(f"extra account needs the data of {key}, which does not exist")
        if len(data) < start + length:
            raise ValueError(f"the data of {key} is too short for bytes {start}..{start + length}")
        return data[start : start + length]


def _seed_value(seed: Seed, ix_data: bytes, accounts: _Accounts) -> bytes:
    if isinstance(seed, SeedLiteral):
        return seed.value
    if isinstance(seed, SeedInstructionData):
        if seed.index + seed.length > len(ix_data):
            raise ValueError("a seed reads past the Execute instruction data")
        return ix_data[seed.index : seed.index + seed.length]
    if isinstance(seed, SeedAccountKey):
        return bytes(accounts.key(seed.index))
    return accounts.data(seed.account_index, seed.data_index, seed.length)


def _pda(seeds: list[Seed], program: Pubkey, ix_data: bytes, accounts: _Accounts) -> Pubkey:
    values = [_seed_value(s, ix_data, accounts) for s in seeds]
    if len(values) > MAX_PDA_SEEDS or any(len(v) > MAX_SEED_LEN for v in values):
        raise ValueError("extra account seeds exceed a PDA's limits (15 seeds of 32 bytes)")
    return Pubkey.find_program_address(values, program)[0]


def _resolve_key(
    meta: ExtraAccountMeta, hook_program: Pubkey, ix_data: bytes, accounts: _Accounts
) -> Pubkey:
    d = meta.discriminator
    if d == 0:
        return Pubkey.from_bytes(meta.address_config)
    if d == 1:
        return _pda(unpack_seeds(meta.address_config), hook_program, ix_data, accounts)
    if d >= 128:
        program = accounts.key(d - 128)
        return _pda(unpack_seeds(meta.address_config), program, ix_data, accounts)
    key_data = _unpack_pubkey_data(meta.address_config)
    if isinstance(key_data, KeyFromInstructionData):
        if key_data.index + PUBKEY_LEN > len(ix_data):
            raise ValueError("a pubkey reads past the Execute instruction data")
        return Pubkey.from_bytes(ix_data[key_data.index : key_data.index + PUBKEY_LEN])
    return Pubkey.from_bytes(accounts.data(key_data.account_index, key_data.data_index, PUBKEY_LEN))


def resolve_extra_accounts(
    hook_program: Pubkey,
    metas: Sequence[ExtraAccountMeta],
    *,
    source: Pubkey,
    mint: Pubkey,
    destination: Pubkey,
    authority: Pubkey,
    amount: int,
    account_data: Callable[[Pubkey], bytes | None],
) -> list[AccountMeta]:
    """The accounts to append to a transfer of a hooked mint (or to an instruction that
    forwards them to Token-2022 in a CPI): the resolved extras, then the hook program and
    the validation account, both read-only.

    Resolved against the Execute instruction Token-2022 builds (accounts source, mint,
    destination, authority, validation, then each extra in turn, so later metas may refer
    to earlier ones; data = discriminator + amount). As spl-transfer-hook-interface's
    offchain helper does, an extra is never a signer (Token-2022 invokes the hook without
    signer privileges, so a signer flag could only demand a signature the hook cannot
    use), and is read-only when it repeats a read-only Execute account.
    `account_data(key)` returns an account's data, None when it does not exist."""
    validation = validation_address(hook_program, mint)
    ix_data = EXECUTE_DISCRIMINATOR + _check_u64(amount, "amount").to_bytes(8, "little")
    accounts = _Accounts([source, mint, destination, authority, validation], account_data)
    writable = [False] * EXECUTE_ACCOUNTS
    extras: list[AccountMeta] = []
    for meta in metas:
        key = _resolve_key(meta, hook_program, ix_data, accounts)
        seen = [w for k, w in zip(accounts.keys, writable, strict=True) if k == key]
        is_writable = meta.is_writable and (not seen or any(seen))
        extras.append(AccountMeta(key, is_signer=False, is_writable=is_writable))
        accounts.keys.append(key)
        writable.append(is_writable)
    return [
        *extras,
        AccountMeta(hook_program, is_signer=False, is_writable=False),
        AccountMeta(validation, is_signer=False, is_writable=False),
    ]


def transfer_hook_accounts(
    mint: MintInfo,
    *,
    mint_address: Pubkey,
    source: Pubkey,
    destination: Pubkey,
    authority: Pubkey,
    amount: int,
    account_data: Callable[[Pubkey], bytes | None],
) -> list[AccountMeta]:
    """Everything a transfer of `mint` must append for its transfer hook: nothing without
    one, else its validation account's extras (fetched through `account_data`), the hook
    program and the validation account."""
    hook = mint.hook_program
    if hook is None:
        return []
    metas = parse_extra_account_metas(account_data(validation_address(hook, mint_address)))
    return resolve_extra_accounts(
        hook,
        metas,
        source=source,
        mint=mint_address,
        destination=destination,
        authority=authority,
        amount=amount,
        account_data=account_data,
    )


# -- what a payment's transfer may carry ---------------------------------------------------
TRANSFER_CHECKED_ACCOUNTS = 4  # source, mint, destination, authority


@lru_cache(maxsize=1024)  # a PDA search; a gate or facilitator sees a few hooked mints
def _validation_of(hook_program: Pubkey, mint: Pubkey) -> Pubkey:
    return validation_address(hook_program, mint)


def transfer_accounts_problem(
    accounts: Sequence[Pubkey], mint: Pubkey, terms: MintAtEpoch | None
) -> str | None:
    """Why the accounts of a payment's TransferChecked of `mint` are not acceptable, or None.

    They are source, mint, destination and authority. A transfer of a mint with a transfer
    hook (`terms.hook_program`) goes on with the hook's extra accounts, ending with the hook
    program and its validation account, as `transfer_hook_accounts` resolves them: Token-2022
    checks the extras against the hook's ExtraAccountMetaList (one it cannot find fails the
    transfer) and passes the hook only those the list names. Any other account past the
    fourth is refused: SPL Token and Token-2022 read those as multisig signers."""
    if len(accounts) < TRANSFER_CHECKED_ACCOUNTS:
        return "a TransferChecked names source, mint, destination and authority"
    extra = accounts[TRANSFER_CHECKED_ACCOUNTS:]
    if not extra:
        return None
    hook = None if terms is None else terms.hook_program
    if hook is None:
        return (
            f"the TransferChecked carries {len(extra)} accounts past its four; only a "
            "transfer-hook mint's transfer may (its hook's accounts)"
        )
    validation = _validation_of(hook, mint)
    if len(extra) < 2 or extra[-2] != hook or extra[-1] != validation:
        return (
            f"a transfer of {mint} ends its accounts with the hook program {hook} and its "
            f"validation account {validation}, and carries nothing else"
        )
    return None


def names_token_2022(tx: VersionedTransaction) -> bool:
    """Whether an instruction of `tx` is Token-2022's: the one case in which a payment check
    needs the mint (SPL Token mints have no fee and no hook, so no RPC call for them)."""
    msg = tx.message
    keys = msg.account_keys
    return any(
        ix.program_id_index < len(keys) and keys[ix.program_id_index] == TOKEN_2022_PROGRAM
        for ix in msg.instructions
    )
