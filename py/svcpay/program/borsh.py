"""What the generated program client needs at run time: Borsh codecs and Anchor's few helpers.

`anchorpy client-gen` writes code that imports `borsh_construct` and parts of `anchorpy`;
both pin `construct-typing<0.6`, which holds solana-py back at 0.36 and solders at 0.26.
scripts/gen-client still runs anchorpy (in a tool environment of its own) and points the
generated imports here instead (docs/adr/0017), so at run time svcpay needs only `construct`
itself, on whatever version the current Solana stack brings.

The codecs follow the Borsh specification (https://borsh.io), as Anchor serializes
instruction arguments, accounts and events: little-endian integers, a bool as one byte 0 or
1, `Option` as a one-byte tag, vectors, strings and byte strings behind a u32 length, enums
as a one-byte variant index followed by the variant's fields. Names are the ones the
generated code uses (`borsh.CStruct`, `borsh.U64`, `EnumForCodegen`, `BorshPubkey`, ...).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from construct import (
    Adapter,
    BytesInteger,
    Construct,
    Container,
    Float32l,
    Float64l,
    GreedyBytes,
    Int8sl,
    Int8ul,
    Int16sl,
    Int16ul,
    Int32sl,
    Int32ul,
    Int64sl,
    Int64ul,
    ListContainer,
    PascalString,
    Prefixed,
    PrefixedArray,
    Renamed,
    SizeofError,
    Struct,
    ValidationError,
    stream_read,
    stream_write,
)
from construct import Bytes as FixedBytes
from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Commitment
from solders.account import Account
from solders.pubkey import Pubkey
from solders.rpc.errors import SendTransactionPreflightFailureMessage
from solders.transaction_status import InstructionErrorCustom, TransactionErrorInstructionError

T = TypeVar("T")

# construct's classes are generic only in construct-typing's stubs.
if TYPE_CHECKING:
    _BoolBase = Adapter[int, int, bool, bool]
    _PubkeyBase = Adapter[bytes, bytes, Pubkey, Pubkey]
    _AnyBase = Construct[Any, Any]
    _EnumBase = Construct[dict[str, Any], dict[str, Any]]
else:
    _BoolBase = _PubkeyBase = Adapter
    _AnyBase = _EnumBase = Construct

# -- Borsh codecs ---------------------------------------------------------------------------

U8: Construct[int, int] = Int8ul
U16: Construct[int, int] = Int16ul
U32: Construct[int, int] = Int32ul
U64: Construct[int, int] = Int64ul
U128: Construct[int, int] = BytesInteger(16, signed=False, swapped=True)
U256: Construct[int, int] = BytesInteger(32, signed=False, swapped=True)
I8: Construct[int, int] = Int8sl
I16: Construct[int, int] = Int16sl
I32: Construct[int, int] = Int32sl
I64: Construct[int, int] = Int64sl
I128: Construct[int, int] = BytesInteger(16, signed=True, swapped=True)
I256: Construct[int, int] = BytesInteger(32, signed=True, swapped=True)
F32: Construct[float, float] = Float32l
F64: Construct[float, float] = Float64l


class _Bool(_BoolBase):
    """One byte, 0 or 1: Borsh (and Anchor's deserializer) refuse any other value."""

    def _decode(self, obj: int, context: Any, path: str) -> bool:
        if obj not in (0, 1):
            raise ValidationError(f"invalid bool byte {obj}", path=path)
        return obj == 1

    def _encode(self, obj: bool, context: Any, path: str) -> int:
        return 1 if obj else 0


Bool: Construct[bool, bool] = _Bool(Int8ul)
# A u32 length, then the bytes (Vec<u8>, `bytes` in an IDL).
Bytes: Construct[bytes, bytes] = Prefixed(Int32ul, GreedyBytes)
# A u32 length, then UTF-8.
String: Construct[str, str] = PascalString(Int32ul, "utf8")


class _Pubkey(_PubkeyBase):
    """32 bytes as a solders Pubkey."""

    def _decode(self, obj: bytes, context: Any, path: str) -> Pubkey:
        return Pubkey.from_bytes(obj)

    def _encode(self, obj: Pubkey, context: Any, path: str) -> bytes:
        return bytes(obj)


BorshPubkey: Construct[Pubkey, Pubkey] = _Pubkey(FixedBytes(32))


class CStruct(Struct):
    """Fields in order, each `"name" / codec`; parses to a `construct.Container` of them,
    builds from a mapping of them."""

    def _parse(self, stream: Any, context: Any, path: str) -> Container[Any]:
        obj = super()._parse(stream, context, path)
        obj.pop("_io", None)  # construct's bookkeeping, not a field
        return obj


def Vec(subcon: Construct[T, Any]) -> Construct[ListContainer[T], list[Any]]:  # noqa: N802
    """A u32 count, then that many elements."""
    return PrefixedArray(Int32ul, subcon)


class _Tagged(_AnyBase):
    """A value behind a presence tag: `tag` 0 is None, 1 is a value of `subcon`. With
    `fixed`, the value's bytes are there either way (zeros for None)."""

    def __init__(
        self, tag: Construct[int, int], subcon: Construct[Any, Any], *, fixed: bool = False
    ) -> None:
        super().__init__()
        self.tag = tag
        self.subcon = subcon
        self.fixed = fixed

    def _parse(self, stream: Any, context: Any, path: str) -> Any:
        present = self.tag._parsereport(stream, context, path)
        if present == 0:
            if self.fixed:
                stream_read(stream, self.subcon._sizeof(context, path), path)
            return None
        if present != 1:
            raise ValidationError(f"invalid option tag {present}", path=path)
        return self.subcon._parsereport(stream, context, path)

    def _build(self, obj: Any, stream: Any, context: Any, path: str) -> Any:
        if obj is None:
            self.tag._build(0, stream, context, path)
            if self.fixed:
                size = self.subcon._sizeof(context, path)
                stream_write(stream, bytes(size), size, path)
            return None
        self.tag._build(1, stream, context, path)
        return self.subcon._build(obj, stream, context, path)

    def _sizeof(self, context: Any, path: str) -> int:
        if self.fixed:
            return self.tag._sizeof(context, path) + self.subcon._sizeof(context, path)
        raise SizeofError("an option's size depends on its value", path=path)


def Option(subcon: Construct[T, Any]) -> Construct[T | None, Any]:  # noqa: N802
    """Borsh's Option: a u8 tag (0 None, 1 Some), then the value."""
    return _Tagged(Int8ul, subcon)


def COption(subcon: Construct[T, Any]) -> Construct[T | None, Any]:  # noqa: N802
    """Solana's C-compatible option, as the SPL token program lays it out (and Anchor's
    TypeScript coder reads it): a u32 tag, then the value's bytes, zeros for None, so the
    size is fixed. (anchorpy's COption wrote a u8 tag: no account of ours uses one.)"""
    return _Tagged(Int32ul, subcon, fixed=True)


class EnumForCodegen(_EnumBase):
    """A Rust enum: a u8 variant index, then that variant's fields. Each variant is given as
    `"Name" / CStruct(...)` in declaration order. Parses to `{"Name": fields}` (what the
    generated `from_decoded` reads) and builds from the same (what `to_encodable` returns)."""

    def __init__(self, *variants: Construct[Any, Any]) -> None:
        super().__init__()
        names = []
        for variant in variants:
            if not isinstance(variant, Renamed) or not variant.name:
                raise TypeError('each variant must be named: "Variant" / CStruct(...)')
            names.append(variant.name)
        self.variants = variants
        self.names = names
        self.index = {name: i for i, name in enumerate(names)}

    def _parse(self, stream: Any, context: Any, path: str) -> dict[str, Any]:
        index = Int8ul._parsereport(stream, context, path)
        if index >= len(self.variants):
            raise ValidationError(f"invalid enum variant index {index}", path=path)
        variant = self.variants[index]
        return {self.names[index]: variant._parsereport(stream, context, path)}

    def _build(self, obj: dict[str, Any], stream: Any, context: Any, path: str) -> Any:
        if len(obj) != 1:
            raise ValidationError(f"an enum value names one variant, not {list(obj)}", path=path)
        ((name, value),) = obj.items()
        if name not in self.index:
            raise ValidationError(f"unknown enum variant {name!r}", path=path)
        Int8ul._build(self.index[name], stream, context, path)
        self.variants[self.index[name]]._build(value, stream, context, path)
        return obj

    def _sizeof(self, context: Any, path: str) -> int:
        raise SizeofError("an enum's size depends on its variant", path=path)


# -- Anchor's conventions -------------------------------------------------------------------

# An account's data starts with sha256("account:<Name>")[:8].
ACCOUNT_DISCRIMINATOR_SIZE = 8


class AccountInvalidDiscriminator(Exception):
    """The account's data does not start with the expected account type's discriminator."""


class ProgramError(Exception):
    """Base of the generated error classes: one per program (and Anchor) error code."""

    def __init__(self, code: int, msg: str | None) -> None:
        super().__init__(f"{code}: {msg}")
        self.code = code
        self.msg = msg


_PROGRAM_FAILED = re.compile(r"Program (\w+) failed: custom program error: (0x[0-9a-fA-F]+|\d+)")


def extract_code_and_logs(err_info: object, program_id: Pubkey) -> tuple[int, list[str]] | None:
    """The custom error code and logs of a preflight failure (what `RPCException.args[0]`
    holds after `send_transaction`), if `program_id` is the program that failed with it."""
    if not isinstance(err_info, SendTransactionPreflightFailureMessage):
        return None
    data = err_info.data
    logs = list(data.logs or [])
    err = data.err
    if not isinstance(err, TransactionErrorInstructionError):
        return None
    custom = err.err
    if not isinstance(custom, InstructionErrorCustom):
        return None
    # The innermost failure is logged first, then each caller up the CPI chain fails with the
    # same code: the first "failed" line names the program whose error it is.
    for line in logs:
        match = _PROGRAM_FAILED.search(line)
        if match:
            return (custom.code, logs) if match[1] == str(program_id) else None
    return None


@dataclass(frozen=True)
class KeyedAccount:
    """An account and its address, as `get_multiple_accounts` returns them."""

    pubkey: Pubkey
    account: Account


# getMultipleAccounts takes at most 100 addresses a call.
_MAX_ACCOUNTS_PER_CALL = 100


async def get_multiple_accounts(
    conn: AsyncClient,
    pubkeys: Sequence[Pubkey],
    batch_size: int = 3,
    commitment: Commitment | None = None,
) -> list[KeyedAccount | None]:
    """The accounts at `pubkeys`, in order (None where there is none), over as many
    getMultipleAccounts calls as needed, `batch_size` of them at a time."""
    chunks = [
        list(pubkeys[i : i + _MAX_ACCOUNTS_PER_CALL])
        for i in range(0, len(pubkeys), _MAX_ACCOUNTS_PER_CALL)
    ]
    found: list[KeyedAccount | None] = []
    for start in range(0, len(chunks), batch_size):
        batch = chunks[start : start + batch_size]
        replies = await asyncio.gather(
            *(conn.get_multiple_accounts(chunk, commitment=commitment) for chunk in batch)
        )
        for chunk, reply in zip(batch, replies, strict=True):
            found.extend(
                None if account is None else KeyedAccount(key, account)
                for key, account in zip(chunk, reply.value, strict=True)
            )
    return found
