"""Decoding the program's Anchor events from transaction logs.

An event is logged as `Program data: <base64>`: its 8-byte discriminator (listed in the IDL)
then its fields in Borsh. The layouts come from the IDL shipped beside the generated client;
fields of the program's own types decode to the generated classes (an enum field to its
variant, `Active()`, `InsufficientFunds()`...), as accounts do.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from construct import Construct, ConstructError

from svcpay.program import borsh
from svcpay.program.generated import types as generated_types

_DATA_PREFIX = "Program data: "
_DISCRIMINATOR_SIZE = 8

_Decoder = Callable[[Any], Any]

_PRIMITIVES: dict[str, Construct[Any, Any]] = {
    "bool": borsh.Bool,
    "u8": borsh.U8,
    "u16": borsh.U16,
    "u32": borsh.U32,
    "u64": borsh.U64,
    "u128": borsh.U128,
    "i8": borsh.I8,
    "i16": borsh.I16,
    "i32": borsh.I32,
    "i64": borsh.I64,
    "i128": borsh.I128,
    "f32": borsh.F32,
    "f64": borsh.F64,
    "string": borsh.String,
    "bytes": borsh.Bytes,
    "pubkey": borsh.BorshPubkey,
}


@dataclass(frozen=True)
class Event:
    """One event: its IDL name and its fields (snake_case names, decoded values)."""

    name: str
    data: dict[str, Any]


@dataclass(frozen=True)
class _EventLayout:
    name: str
    layout: Construct[Any, Any]
    fields: tuple[tuple[str, _Decoder], ...]

    def decode(self, body: bytes) -> Event:
        parsed = self.layout.parse(body)
        return Event(self.name, {name: decode(parsed[name]) for name, decode in self.fields})


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower()


def _same(value: Any) -> Any:
    return value


def _codec(ty: Any) -> tuple[Construct[Any, Any], _Decoder]:
    """The layout of an IDL type and how its parsed value becomes the Python value."""
    if isinstance(ty, str):
        return _PRIMITIVES[ty], _same
    if "option" in ty:
        inner, decode = _codec(ty["option"])
        return borsh.Option(inner), lambda v: None if v is None else decode(v)
    if "vec" in ty:
        inner, decode = _codec(ty["vec"])
        return borsh.Vec(inner), lambda v: [decode(x) for x in v]
    if "array" in ty:
        element, length = ty["array"]
        inner, decode = _codec(element)
        return inner[length], lambda v: [decode(x) for x in v]
    if "defined" in ty:
        defined = ty["defined"]
        return _defined(defined["name"] if isinstance(defined, dict) else defined)
    raise ValueError(f"unsupported IDL type {ty!r}")


def _defined(name: str) -> tuple[Construct[Any, Any], _Decoder]:
    """A type of the program's own, from the generated client: a struct's class, or an
    enum's module (its `layout` and `from_decoded`)."""
    module = getattr(generated_types, _snake(name), None)
    if module is None:
        raise ValueError(f"type {name} is not in the generated client: run scripts/gen-client")
    struct = getattr(module, name, None)
    owner = struct if struct is not None and hasattr(struct, "layout") else module
    return owner.layout, owner.from_decoded


@cache
def _layouts() -> dict[bytes, _EventLayout]:
    raw = resources.files("svcpay.program.generated").joinpath("idl.json").read_text()
    idl = json.loads(raw)
    structs = {t["name"]: t["type"] for t in idl.get("types", [])}
    layouts = {}
    for event in idl.get("events", []):
        fields = []
        for field in structs[event["name"]]["fields"]:
            layout, decode = _codec(field["type"])
            fields.append((_snake(field["name"]), layout, decode))
        layouts[bytes(event["discriminator"])] = _EventLayout(
            event["name"],
            borsh.CStruct(*(name / layout for name, layout, _ in fields)),
            tuple((name, decode) for name, _, decode in fields),
        )
    return layouts


def decode_event(raw: bytes) -> Event | None:
    """The event `raw` (discriminator and fields) encodes, or None if it is none of ours."""
    layout = _layouts().get(raw[:_DISCRIMINATOR_SIZE])
    return layout.decode(raw[_DISCRIMINATOR_SIZE:]) if layout else None


def decode_logs(logs: list[str]) -> list[Event]:
    """Events emitted (via `sol_log_data`) in `logs`, in order; other lines are ignored."""
    events = []
    for line in logs:
        if not line.startswith(_DATA_PREFIX):
            continue
        payload = line[len(_DATA_PREFIX) :]
        try:
            event = decode_event(base64.b64decode(payload, validate=True))
        except (ValueError, ConstructError):
            continue  # another program's data, or not an event of ours
        if event is not None:
            events.append(event)
    return events
