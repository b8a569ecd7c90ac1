"""Typed models of the 402 body (spec 2.1-2.3), parsed strictly with a reason per defect.

Unknown fields are tolerated (kept) as the spec asks of clients; known fields are checked:
amounts are decimal strings of base units within u64, addresses are base58 public keys,
and an unsupported `version` names the supported ones.
"""

from __future__ import annotations

import json
from typing import Any, Self, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic.alias_generators import to_camel
from solders.pubkey import Pubkey

from svcpay.protocol.headers import SCHEME_EXACT, SUPPORTED_VERSIONS

U64_MAX = 2**64 - 1
M = TypeVar("M", bound=BaseModel)


class ProtocolError(ValueError):
    """A protocol object is malformed; `reason` says what to fix."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Model(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="allow", frozen=True
    )

    def to_json_dict(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


# The checks below as JSON Schema, for documents generated from these models (the facilitator's
# OpenAPI document): a value these refuse, the validators refuse too.
ADDRESS_SCHEMA: dict[str, Any] = {
    "pattern": "^[1-9A-HJ-NP-Za-km-z]{32,44}$",
    "description": "a base58 Solana address (32 bytes)",
}
AMOUNT_SCHEMA: dict[str, Any] = {
    "pattern": "^[0-9]+$",
    "description": 'base units as a decimal string within u64, e.g. "500000"',
}


def check_address(value: str, field: str) -> str:
    try:
        Pubkey.from_string(value)
    except ValueError as e:
        raise ValueError(f"{field} must be a base58 Solana address") from e
    return value


def check_version(value: str) -> str:
    if value not in SUPPORTED_VERSIONS:
        supported = ", ".join(SUPPORTED_VERSIONS)
        raise ValueError(f"unsupported version {value!r}; supported: {supported}")
    return value


def check_amount(value: str) -> str:
    if not (isinstance(value, str) and value.isdigit() and value.isascii()):
        raise ValueError('amount must be a decimal string of base units, e.g. "500000"')
    if int(value) > U64_MAX:
        raise ValueError("amount exceeds u64")
    return value


class SvcExtension(Model):
    """`svc`: subscription and plan information (spec 2.3). For a subscription option the
    option's `amount` and `token` are the plan's price per period and mint; `interval` is
    the period in seconds (docs/adr/0006)."""

    plan_id: str | None = Field(default=None, json_schema_extra=ADDRESS_SCHEMA)
    subscription_scheme: bool | None = None
    facilitator: str | None = None
    interval: int | None = Field(default=None, gt=0)

    @field_validator("plan_id")
    @classmethod
    def _plan(cls, v: str | None) -> str | None:
        return None if v is None else check_address(v, "svc.planId")


class PaymentOption(Model):
    """One entry of a 402 body's `accepts` (its paymentRequirements); unknown fields are
    tolerated."""

    scheme: str = Field(json_schema_extra={"enum": [SCHEME_EXACT]})
    network: str = Field(description="e.g. solana-mainnet")
    token: str = Field(json_schema_extra=ADDRESS_SCHEMA)
    amount: str = Field(json_schema_extra=AMOUNT_SCHEMA)
    pay_to: str = Field(json_schema_extra=ADDRESS_SCHEMA)
    memo: str | None = None
    svc: SvcExtension | None = None

    @field_validator("scheme")
    @classmethod
    def _scheme(cls, v: str) -> str:
        if v != SCHEME_EXACT:
            raise ValueError(f"unsupported scheme {v!r}; supported: {SCHEME_EXACT!r}")
        return v

    @field_validator("token")
    @classmethod
    def _token(cls, v: str) -> str:
        return check_address(v, "token")

    @field_validator("pay_to")
    @classmethod
    def _pay_to(cls, v: str) -> str:
        return check_address(v, "payTo")

    @field_validator("amount")
    @classmethod
    def _amount(cls, v: str) -> str:
        return check_amount(v)

    @model_validator(mode="after")
    def _memo_for_one_time(self) -> Self:
        if not self.is_subscription and not self.memo:
            raise ValueError("a one-time payment option needs the memo issued by the server")
        if self.is_subscription and (
            self.svc is None or not self.svc.plan_id or not self.svc.interval
        ):
            raise ValueError("a subscription option needs svc.planId and svc.interval")
        return self

    @property
    def is_subscription(self) -> bool:
        return bool(self.svc and self.svc.subscription_scheme)

    @property
    def amount_units(self) -> int:
        return int(self.amount)


class PaymentRequired(Model):
    """The body of a 402 answer. `error` names why (InvalidPaymentProof, AllowanceExhausted,
    SubscriptionNotActive, ...) and `message` says what to do; both are optional."""

    version: str
    accepts: list[PaymentOption] = Field(min_length=1)
    error: str | None = None
    message: str | None = None

    @field_validator("version")
    @classmethod
    def _version(cls, v: str) -> str:
        return check_version(v)

    @classmethod
    def parse(cls, raw: bytes | str) -> PaymentRequired:
        """Parses a 402 body, raising ProtocolError with the first defect found."""
        try:
            data = json.loads(raw)
        except ValueError as e:
            raise ProtocolError(f"402 body is not JSON: {e}") from e
        return parse_model(cls, data)


def parse_model(model: type[M], data: Any) -> M:
    try:
        return model.model_validate(data)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "body"
        raise ProtocolError(f"{where}: {first['msg'].removeprefix('Value error, ')}") from e
