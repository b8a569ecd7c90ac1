"""The facilitator API's bodies as pydantic models: what each handler accepts, validated
strictly by `parse` (no coercion, camelCase names only); their answers are in
`svcpay.facilitator.answers`.
`svcpay.facilitator.openapi` generates the document's schemas from these, so a body the
document refuses is refused with a 400 naming the defect. Checks that need more than the
body (configuration, the chain, the store) stay in the handlers.

The protocol's own objects come from `svcpay.protocol` (PaymentOption, PaymentProof) and
x402's from `svcpay.schemes.x402_exact`.
"""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidatorFunctionWrapHandler,
    WrapValidator,
    field_validator,
)
from pydantic.alias_generators import to_camel

from svcpay.facilitator.lifecycle import EVENT_TYPES
from svcpay.facilitator.usage import MAX_AMOUNT
from svcpay.protocol.models import ADDRESS_SCHEMA, PaymentOption, ProtocolError, check_address
from svcpay.protocol.proof import PaymentProof

M = TypeVar("M", bound=BaseModel)

MAX_BODY = 64 * 1024
MAX_URL = 2000
MAX_IDEMPOTENCY_KEY = 200
# A webhook URL: http(s), a host name or IPv4 address, optional port, path, query and
# fragment; no user info, spaces or control characters (spelled out: Python's \s and JSON
# Schema's disagree on some). Private addresses and plain http are refused beyond this
# pattern unless SVCPAY_WEBHOOK_ALLOW_LOCAL (webhooks.check_endpoint_url).
WEBHOOK_URL = r"^[Hh][Tt][Tt][Pp][Ss]?://[A-Za-z0-9.-]+(:[0-9]{1,5})?([/?#][^\x00-\x20\x7f]*)?$"
# Canonical base64: whole quads, "=" only to fill the last (stricter than b64decode, which
# also takes stray padding such as "ABCD==").
BASE64 = r"^([A-Za-z0-9+/]{4})*([A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"

if TYPE_CHECKING:
    EventTypeOrAll = str
else:
    EventTypeOrAll = Literal[("*", *EVENT_TYPES)]


def parse(model: type[M], data: Any) -> M:
    """`data` as `model`, strictly: no coercion (an `issuedAt` of "5" or false is malformed)
    and camelCase names only, as the document says; ProtocolError with the first defect."""
    try:
        return model.model_validate(data, strict=True, by_alias=True, by_name=False)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "body"
        raise ProtocolError(f"{where}: {first['msg'].removeprefix('Value error, ')}") from e


def explained(message: str) -> WrapValidator:
    """A field's refusal in `message`'s words instead of pydantic's (its constraints, and
    so its schema, stay the field's)."""

    def wrap(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        try:
            return handler(value)
        except ValidationError as e:
            raise ValueError(message) from e

    return WrapValidator(wrap)


class Body(BaseModel):
    """A JSON object of the API: camelCase on the wire, unknown fields ignored."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        validate_by_alias=True,
        validate_by_name=False,
        serialize_by_alias=True,
    )


Address = Annotated[str, Field(json_schema_extra=ADDRESS_SCHEMA)]


# -- requests --------------------------------------------------------------------------------
class OneTimeOption(PaymentOption):
    """A one-time PaymentOption, as /authorize settles it: the memo the server issued, an
    amount the store can hold."""

    memo: str = Field(min_length=1, description="the memo the server issued")

    @field_validator("amount")
    @classmethod
    def _storable(cls, v: str) -> str:
        if v.isascii() and v.isdigit() and int(v) > MAX_AMOUNT:  # the store holds i64s
            raise ValueError(f"amount above {MAX_AMOUNT}")
        return v


class AuthorizeRequest(Body):
    """POST /authorize: the signed transfer and the terms it pays."""

    signed_payment: Annotated[
        str,
        Field(
            pattern=BASE64,
            description="base64 of the client-signed v0 transaction whose fee payer is the "
            "facilitator",
        ),
        explained("must be base64 (of the signed transaction)"),
    ]
    payment_requirements: OneTimeOption

    @property
    def transaction(self) -> bytes:
        return base64.b64decode(self.signed_payment, validate=True)


class VerifyRequest(Body):
    """POST /verify (svcpay): the proof to check."""

    proof: PaymentProof


class UsageRequest(Body):
    """POST /v1/usage: usage to deduct from a subscription's metered allowance."""

    subscription: Address
    amount: Annotated[
        Annotated[int, Field(ge=1, le=MAX_AMOUNT)] | Annotated[str, Field(pattern="^[0-9]+$")],
        explained(f"base units from 1 to {MAX_AMOUNT}: an integer or a decimal string"),
        Field(description=f"base units, 1 to {MAX_AMOUNT}: an integer or a decimal string"),
    ]
    idempotency_key: str = Field(
        min_length=1,
        max_length=MAX_IDEMPOTENCY_KEY,
        description="the same key reports the same usage once",
    )

    @field_validator("subscription")
    @classmethod
    def _subscription(cls, v: str) -> str:
        try:
            return check_address(v, "subscription")
        except ValueError as e:
            raise ValueError("not an address (a base58 public key)") from e

    @field_validator("amount")
    @classmethod
    def _amount(cls, v: int | str) -> int | str:
        if isinstance(v, str) and (len(v.lstrip("0")) > 19 or not 1 <= int(v) <= MAX_AMOUNT):
            raise ValueError(f"base units from 1 to {MAX_AMOUNT}")
        return v

    @property
    def units(self) -> int:
        return int(self.amount)


class WebhookRequest(Body):
    """POST /v1/webhooks: where to deliver which events."""

    url: Annotated[
        str,
        Field(
            max_length=MAX_URL,
            pattern=WEBHOOK_URL,
            description="an absolute http(s) URL: a host name or IPv4 address, no spaces",
        ),
        explained(
            f"an absolute http(s) URL (a host name or IPv4 address), at most {MAX_URL} characters"
        ),
    ]
    event_types: Annotated[
        list[EventTypeOrAll],
        Field(min_length=1),
        explained(f"a non-empty list of '*' or {', '.join(EVENT_TYPES)}"),
    ] = ["*"]


# -- query parameters (all optional; the app ignores others) --------------------------------
EVENTS_AFTER_MAX = 2**62
# What analytics.parse_range reads, around str.strip()'s whitespace (JSON Schema's \s lacks
# a few of Python's); it checks the dates and the range beyond this.
_SPACE = r"[\s\x1c-\x1f\x85]*"
RANGE_BOUND = rf"^{_SPACE}([0-9]{{4}}-[0-9]{{2}}-[0-9]{{2}}|[0-9]{{1,15}}){_SPACE}$"


class EventsQuery(Body):
    """GET /v1/events?after=&limit="""

    after: Annotated[
        int,
        Field(ge=0, le=EVENTS_AFTER_MAX),
        explained(f"must be an integer from 0 to {EVENTS_AFTER_MAX}"),
    ] = Field(
        default=0,
        description="only events after this sequence number (the previous page's `next`)",
    )
    limit: Annotated[int, Field(ge=1, le=1000), explained("must be an integer from 1 to 1000")] = (
        Field(default=100, description="at most this many events")
    )


class RangeQuery(Body):
    """GET /v1/analytics?from=&to= (and the chart's)."""

    from_: Annotated[str, Field(pattern=RANGE_BOUND)] | None = Field(
        default=None,
        alias="from",
        description="start of the range: a UTC date YYYY-MM-DD or unix seconds (default: 30 "
        "days before `to`); at most 366 days before `to`",
    )
    to: Annotated[str, Field(pattern=RANGE_BOUND)] | None = Field(
        default=None,
        description="end of the range: a UTC date YYYY-MM-DD (inclusive) or unix seconds "
        "(exclusive); default: the end of today",
    )
    mint: Address | None = Field(
        default=None,
        description="the mint to report (amounts of different mints are never added); "
        "default: the mint of most payments in the range",
    )

    @field_validator("mint")
    @classmethod
    def _mint(cls, v: str | None) -> str | None:
        return None if v is None else check_address(v, "mint")


class VoucherTerms(Body):
    channel_id: Address = Field(description="the session's address")
    cumulative_amount: str = Field(
        pattern="^[0-9]{1,20}$", description="base units, in all (a u64 as a decimal string)"
    )
    expires_at: Annotated[int, Field(ge=0, le=2**63 - 1)] | None = Field(
        default=None, description="unix seconds; absent or 0 for none"
    )


class SignedVoucherBody(Body):
    """MPP's signed session voucher: Ed25519 over `0x56 0x01 | channel | cumulative u64 LE |
    expiry i64 LE`."""

    voucher: VoucherTerms
    signer: Address
    signature: str = Field(pattern="^[1-9A-HJ-NP-Za-km-z]{64,88}$", description="base58")
    signature_type: Literal["ed25519"]


class SessionVouchersRequest(Body):
    """POST /v1/sessions/vouchers: the highest vouchers a gate served, one per session."""

    vouchers: list[SignedVoucherBody] = Field(min_length=1, max_length=100)
