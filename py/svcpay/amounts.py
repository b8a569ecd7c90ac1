"""Exact conversion between human token amounts ("0.50") and integer base units.

Amounts on chain and in the protocol are integers in the token's smallest unit (USDC has
6 decimals: 1 USDC = 1_000_000). Conversions go through Decimal, never float.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation

USDC_DECIMALS = 6
U64_MAX = 2**64 - 1


def to_base_units(amount: str | int | Decimal, decimals: int = USDC_DECIMALS) -> int:
    """`"0.50"` -> `500000` (6 decimals). Raises ValueError for negative amounts, more
    fractional digits than the token has, or values beyond u64; TypeError for floats."""
    if isinstance(amount, bool | float):
        raise TypeError("pass the amount as a string such as '0.50' (floats are inexact)")
    try:
        value = Decimal(amount.strip() if isinstance(amount, str) else amount)
    except (InvalidOperation, ValueError) as e:
        raise ValueError(f"not an amount: {amount!r}") from e
    if not value.is_finite() or value < 0:
        raise ValueError(f"amount must be a non-negative number, got {amount!r}")
    units = value.scaleb(decimals)
    if units != units.to_integral_value():
        raise ValueError(f"{amount!r} has more than {decimals} decimal places")
    result = int(units)
    if result > U64_MAX:
        raise ValueError(f"{amount!r} is larger than a token amount can be")
    return result


def from_base_units(units: int, decimals: int = USDC_DECIMALS) -> Decimal:
    """`500000` -> `Decimal("0.5")` (6 decimals)."""
    return Decimal(units).scaleb(-decimals)


def format_amount(units: int, decimals: int = USDC_DECIMALS, symbol: str = "USDC") -> str:
    """`500000` -> `"0.50 USDC"`: at least two decimals, all that are significant."""
    text = f"{from_base_units(units, decimals):f}"
    whole, _, frac = text.partition(".")
    frac = frac.rstrip("0").ljust(2, "0")
    return f"{whole}.{frac} {symbol}".strip()
