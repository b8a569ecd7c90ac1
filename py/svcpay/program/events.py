"""Decoding the program's Anchor events from transaction logs."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from anchorpy.coder.event import EventCoder
from anchorpy_core.idl import Idl
from construct import ConstructError

_DATA_PREFIX = "Program data: "


@dataclass(frozen=True)
class Event:
    """One event: its IDL name and its fields (snake_case names, decoded values)."""

    name: str
    data: dict[str, Any]


@cache
def _coder() -> EventCoder:
    raw = resources.files("svcpay.program.generated").joinpath("idl_legacy.json").read_text()
    return EventCoder(Idl.from_json(json.dumps(json.loads(raw))))


def decode_logs(logs: list[str]) -> list[Event]:
    """Events emitted (via `sol_log_data`) in `logs`, in order; other lines are ignored."""
    events = []
    for line in logs:
        if not line.startswith(_DATA_PREFIX):
            continue
        payload = line[len(_DATA_PREFIX) :]
        try:
            raw = base64.b64decode(payload, validate=True)
            decoded = _coder().parse(raw)
        except (ValueError, ConstructError):
            continue  # another program's data, or not an event of ours
        if decoded is not None:
            fields = {k: v for k, v in vars(decoded.data).items() if not k.startswith("_")}
            events.append(Event(decoded.name, fields))
    return events
