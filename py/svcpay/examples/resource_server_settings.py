"""The example resource server's settings (`svcpay.examples.resource_server` lists the
variables): read from the environment and checked for form here; what they name on chain is
checked when the server starts."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from solders.pubkey import Pubkey

REQUIRED = (
    "SVCPAY_FACILITATOR_URL",
    "SVCPAY_PAY_TO",
    "SVCPAY_MINT",
    "SVCPAY_SUBSCRIPTION_PLAN",
    "SVCPAY_METERED_PLAN",
    "SVCPAY_BILLING_AUTHORITY",
)
ADDRESSES = REQUIRED[1:5] + (
    "SVCPAY_FACILITATOR_KEY",
    "SVCPAY_OWNER",
    "SVCPAY_FEE_PAYER",
    "SVCPAY_PLAN_MINT",
)


class ConfigError(ValueError):
    """The server cannot start as configured; the message says what to fix."""


@dataclass(frozen=True)
class Settings:
    facilitator_url: str
    pay_to: str
    mint: str
    subscription_plan: str
    metered_plan: str
    billing_authority: Path
    rpc_url: str = "http://127.0.0.1:8899"
    network: str = ""  # "": the RPC node's cluster, read at start (docs/adr/0038)
    facilitator_key: str | None = None
    state_db: Path = Path("resource-server.db")
    memo_secret: bytes | None = None
    x402: bool = True
    owner: str | None = None
    fee_payer: str | None = None
    facilitator_api_key: str | None = field(default=None, repr=False)
    plan_mint: str | None = None  # the plans' token, when not `mint`
    paywall_rpc_url: str | None = None  # what browsers reach; None: `rpc_url`; "off": none
    token_symbol: str | None = None  # the paywall's name for `mint`

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        if missing := [name for name in REQUIRED if not env.get(name)]:
            raise ConfigError(f"set {', '.join(missing)} (see svcpay.examples.resource_server)")
        for name in ADDRESSES:
            if env.get(name):
                base58_address(env[name], name)
        return cls(
            facilitator_url=env["SVCPAY_FACILITATOR_URL"],
            pay_to=env["SVCPAY_PAY_TO"],
            mint=env["SVCPAY_MINT"],
            subscription_plan=env["SVCPAY_SUBSCRIPTION_PLAN"],
            metered_plan=env["SVCPAY_METERED_PLAN"],
            billing_authority=Path(env["SVCPAY_BILLING_AUTHORITY"]),
            rpc_url=env.get("SVCPAY_RPC_URL") or cls.rpc_url,
            network=env.get("SVCPAY_NETWORK") or cls.network,
            state_db=Path(env.get("SVCPAY_STATE_DB") or cls.state_db),
            x402=(env.get("SVCPAY_X402") or "on").lower() not in ("off", "0", "false", "no"),
            plan_mint=env.get("SVCPAY_PLAN_MINT") or None,
            paywall_rpc_url=env.get("SVCPAY_PAYWALL_RPC_URL") or None,
            token_symbol=env.get("SVCPAY_TOKEN_SYMBOL") or None,
            **unflagged_from_env(env),
        )


# The variables `svcpay example serve` has no flag for: it reads them from the environment,
# through `unflagged_from_env`, as `Settings.from_env` does.
UNFLAGGED = (
    "SVCPAY_FACILITATOR_API_KEY",
    "SVCPAY_FACILITATOR_KEY",
    "SVCPAY_MEMO_SECRET",
    "SVCPAY_OWNER",
    "SVCPAY_FEE_PAYER",
)


def unflagged_from_env(env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The settings of the UNFLAGGED variables, as `Settings` arguments: the facilitator's
    API key and proof-signing key, the memo secret, the owner and the fee payer (None when
    unset, as the defaults are); ConfigError for a bad value."""
    env = os.environ if env is None else env
    for name in ("SVCPAY_FACILITATOR_KEY", "SVCPAY_OWNER", "SVCPAY_FEE_PAYER"):
        if env.get(name):
            base58_address(env[name], name)
    secret = env.get("SVCPAY_MEMO_SECRET")
    if secret is not None and len(secret.encode()) < 16:
        raise ConfigError("SVCPAY_MEMO_SECRET must be at least 16 bytes")
    return {
        "facilitator_api_key": env.get("SVCPAY_FACILITATOR_API_KEY") or None,
        "facilitator_key": env.get("SVCPAY_FACILITATOR_KEY") or None,
        "memo_secret": secret.encode() if secret is not None else None,
        "owner": env.get("SVCPAY_OWNER") or None,
        "fee_payer": env.get("SVCPAY_FEE_PAYER") or None,
    }


def base58_address(value: str, what: str) -> str:
    try:
        Pubkey.from_string(value)
    except ValueError as e:
        raise ConfigError(f"{what} must be a base58 address, got {value!r}") from e
    return value
