"""The demo's defaults that both its entry points (`svcpay.demo`, `svcpay demo`) and the
walkthrough name: here, light and below them, so the package need not import the
walkthrough to know them, nor the walkthrough the package."""

from __future__ import annotations

from pathlib import Path

DEFAULT_OUT = Path(".svcpay/demo")  # where the analytics chart is written
TOKEN_2022_HELP = (
    "price the plans (subscription, renewal, metered) in a PYUSD-like Token-2022 mint: "
    "6 decimals, a transfer hook (the test hook, where built), a permanent delegate, a zero "
    "transfer fee; one-time payments and the session stay in USDC"
)
