"""The command line's argument types (addresses, u64s, amounts, basis points, durations) and
how amounts, durations and times are written back (`_common` re-exports them)."""

from __future__ import annotations

import argparse
import contextlib
import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal

from solders.pubkey import Pubkey

from svcpay.amounts import U64_MAX, format_amount, to_base_units
from svcpay.cli._exits import UsageError


# -- argument types -----------------------------------------------------------------------
def pubkey_arg(text: str) -> Pubkey:
    try:
        return Pubkey.from_string(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a base58 Solana address: {text!r}") from None


def u64_arg(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if not 0 <= value <= U64_MAX:
        raise argparse.ArgumentTypeError(f"must lie between 0 and {U64_MAX}: {text!r}")
    return value


@dataclass(frozen=True)
class Amount:
    """An amount as typed: token units (`9.99`, scaled by the mint's decimals) or base
    units (`9990000u`)."""

    text: str
    base_units: int | None = None

    def to_base(self, decimals: int) -> int:
        if self.base_units is not None:
            return self.base_units
        try:
            units = to_base_units(self.text, decimals)
        except ValueError as e:
            raise UsageError(
                f"amount {e}: the token has {decimals} decimals "
                f"(or give base units with a u suffix, e.g. 1500000u)"
            ) from None
        if units == 0:
            raise UsageError(f"amount {self.text!r} is zero in base units: give more")
        return units


_BASE_UNITS = re.compile(r"^([0-9]+)\s*(?:u|units)$", re.IGNORECASE)
_DECIMAL = re.compile(r"^(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)$")
AMOUNT_FORMS = (
    "write token units as digits with an optional decimal point (9.99), or base units with "
    "a u suffix (9990000u); exponents (1e3), nan and inf are not amounts"
)


def plain_decimal(text: str) -> Decimal:
    """`9.99` as a Decimal: digits with an optional decimal point and nothing else. What
    Decimal would also read (a sign, 1e3, nan, inf) is refused, with a ValueError saying
    so, rather than taken for a number the user did not write."""
    if text.startswith("-"):
        raise ValueError("the amount must be positive")
    if not _DECIMAL.match(text):
        raise ValueError(
            "write digits with an optional decimal point, e.g. 1 or 0.5; exponents (1e3), nan "
            "and inf are not amounts"
        )
    return Decimal(text)


def _amount(text: str, *, zero: bool) -> Amount:
    """`amount_arg` (zero refused) or `zero_or_amount_arg` (zero allowed)."""
    cleaned = text.strip().replace("_", "")
    if cleaned.startswith("-"):
        raise argparse.ArgumentTypeError(f"the amount must be positive: {text!r}")
    match = _BASE_UNITS.match(cleaned)
    if match:
        units = int(match.group(1))
        if units == 0 and zero:
            return Amount(cleaned, 0)
        if not 0 < units <= U64_MAX:
            raise argparse.ArgumentTypeError(f"base units must lie between 1 and {U64_MAX}")
        return Amount(cleaned, units)
    try:
        value = plain_decimal(cleaned)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an amount: {text!r} ({AMOUNT_FORMS})") from None
    if value == 0:
        if zero:
            return Amount(cleaned, 0)
        raise argparse.ArgumentTypeError(f"amount must be greater than zero: {text!r}")
    return Amount(cleaned)


def amount_arg(text: str) -> Amount:
    """`9.99` (token units) or `9990000u` (base units); greater than zero."""
    return _amount(text, zero=False)


def zero_or_amount_arg(text: str) -> Amount:
    """Like `amount_arg`, zero allowed (`0`, `0u`): a cap that may be nothing, such as a
    transfer fee's maximum."""
    return _amount(text, zero=True)


MAX_BASIS_POINTS = 10_000


def basis_points_arg(text: str) -> int:
    """A share in basis points: 0 to 10000 (100%)."""
    try:
        value = int(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number of basis points: {text!r}") from None
    if not 0 <= value <= MAX_BASIS_POINTS:
        raise argparse.ArgumentTypeError(
            f"basis points must lie between 0 and {MAX_BASIS_POINTS} (100%): {text!r}"
        )
    return value


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 7 * 86_400}
_DURATION = re.compile(r"(\d+)([smhdw])")


def parse_duration(text: str) -> int:
    """`30d`, `12h`, `90m`, `3600s`, `1w`, `1d12h` or bare seconds (`3600`) -> seconds."""
    t = text.strip().lower().replace(" ", "")
    if t.isdigit():
        return int(t)
    parts = _DURATION.findall(t)
    if not t or "".join(n + u for n, u in parts) != t:
        raise argparse.ArgumentTypeError(
            f"not a duration: {text!r} (use e.g. 30d, 12h, 90m, 3600s or 1d12h)"
        )
    return sum(int(n) * _UNITS[u] for n, u in parts)


def period_arg(text: str) -> int:
    secs = parse_duration(text)
    if secs <= 0:
        raise argparse.ArgumentTypeError(f"the period must be longer than zero: {text!r}")
    return secs


def seconds_arg(text: str) -> float:
    """Seconds to wait: a finite number above 0 (a timeout)."""
    value = _finite(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text}: give seconds above 0")
    return value


def interval_arg(text: str) -> float:
    """Seconds between runs of something: 0 (off) or more."""
    value = _finite(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text}: give seconds, 0 or more (0: off)")
    return value


def _finite(text: str) -> float:
    with contextlib.suppress(ValueError):
        if math.isfinite(value := float(text)):
            return value
    raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds")


def format_duration(secs: int) -> str:
    """3600 -> `1h`, 2592000 -> `30d`, 5400 -> `1h30m`, 0 -> `0s`."""
    if secs <= 0:
        return "0s"
    out = []
    for unit, size in (("d", 86_400), ("h", 3600), ("m", 60), ("s", 1)):
        n, secs = divmod(secs, size)
        if n:
            out.append(f"{n}{unit}")
    return "".join(out)


def format_time(ts: int) -> str:
    if ts <= 0:
        return "-"
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def format_units(units: int, decimals: int) -> str:
    """`9990000`, 6 -> `9.99`."""
    return format_amount(units, decimals, symbol="")
