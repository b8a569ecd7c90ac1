"""x402's wire: header names, CAIP-2 network ids, and pydantic models of every object the
protocol sends (x402-foundation/x402 `specs/x402-specification-v2.md`,
`specs/transports-v2/http.md`; version 1 where it differs). Models accept unknown fields (the
spec lets objects grow) and check the ones svcpay relies on; `decode_header` turns any defect
into a `ProtocolError` naming it.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic.alias_generators import to_camel

from svcpay.protocol.headers import MAX_HEADER_BYTES
from svcpay.protocol.models import ProtocolError, check_address, check_amount

# -- headers (HTTP transport, v2; v1 used X-PAYMENT / X-PAYMENT-RESPONSE and a JSON body) --
PAYMENT_REQUIRED = "PAYMENT-REQUIRED"
PAYMENT_SIGNATURE = "PAYMENT-SIGNATURE"
PAYMENT_RESPONSE = "PAYMENT-RESPONSE"
X_PAYMENT = "X-PAYMENT"
X_PAYMENT_RESPONSE = "X-PAYMENT-RESPONSE"
SCHEME = "exact"

# -- networks --------------------------------------------------------------------------------
# svcpay's names -> CAIP-2 (namespace "solana", reference = the genesis hash's first 32 chars)
# and x402 v1's names. A local validator is its own network, `solana:localnet` (its genesis
# hash changes with every ledger); the x402 SDKs accept no such id, so for them it is
# presented as a public one (SVCPAY_LOCALNET_AS; svcpay.rpc.cluster, docs/adr/0038).
CAIP2 = {
    "solana-mainnet": "solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp",
    "solana-devnet": "solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1",
    "solana-testnet": "solana:4uhcVJyU9pJkvQyS88uRDiswHXSCkY3z",
    "solana-localnet": "solana:localnet",
}
V1_NETWORK = {
    "solana-mainnet": "solana",
    "solana-devnet": "solana-devnet",
    "solana-testnet": "solana-testnet",
    "solana-localnet": "solana-localnet",
}
_FROM_CAIP2 = {v: k for k, v in CAIP2.items()}
_FROM_V1 = {v: k for k, v in V1_NETWORK.items()}


def caip2(network: str) -> str:
    """svcpay's network name (or a CAIP-2 id) -> its CAIP-2 id; ValueError when unknown."""
    if network in _FROM_CAIP2:
        return network
    try:
        return CAIP2[network]
    except KeyError:
        known = ", ".join(CAIP2)
        raise ValueError(f"network {network!r} has no x402 id; use one of {known}") from None


def v1_network(network: str) -> str:
    """svcpay's network name -> x402 v1's name ("solana", "solana-devnet", ...)."""
    return V1_NETWORK[svcpay_network(network) or network]


def svcpay_network(network: str) -> str | None:
    """A CAIP-2 id, a v1 name or svcpay's name -> svcpay's name; None when not Solana's."""
    if network in CAIP2:
        return network
    return _FROM_CAIP2.get(network) or _FROM_V1.get(network)


# -- reasons (x402's strings, as its SDK facilitator and clients expect them) ----------------
class Reason:
    UNSUPPORTED_SCHEME = "unsupported_scheme"
    NETWORK_MISMATCH = "network_mismatch"
    INVALID_PAYLOAD = "invalid_exact_svm_payload"
    UNDECODABLE = "invalid_exact_svm_payload_transaction_could_not_be_decoded"
    INSTRUCTIONS_LENGTH = "invalid_exact_svm_payload_transaction_instructions_length"
    COMPUTE_LIMIT = "invalid_exact_svm_payload_transaction_instructions_compute_limit_instruction"
    COMPUTE_PRICE = "invalid_exact_svm_payload_transaction_instructions_compute_price_instruction"
    COMPUTE_PRICE_TOO_HIGH = (
        "invalid_exact_svm_payload_transaction_instructions_compute_price_instruction_too_high"
    )
    NO_TRANSFER = "invalid_exact_svm_payload_no_transfer_instruction"
    MINT_MISMATCH = "invalid_exact_svm_payload_mint_mismatch"
    RECIPIENT_MISMATCH = "invalid_exact_svm_payload_recipient_mismatch"
    AMOUNT_INSUFFICIENT = "invalid_exact_svm_payload_amount_insufficient"
    FEE_PAYER_MISSING = "invalid_exact_svm_payload_missing_fee_payer"
    FEE_PAYER_TRANSFERRING = "invalid_exact_svm_payload_transaction_fee_payer_transferring_funds"
    MEMO_MISMATCH = "invalid_exact_svm_payload_memo_mismatch"
    MEMO_COUNT = "invalid_exact_svm_payload_memo_count"
    UNKNOWN_FOURTH = "invalid_exact_svm_payload_unknown_fourth_instruction"
    UNKNOWN_FIFTH = "invalid_exact_svm_payload_unknown_fifth_instruction"
    UNKNOWN_SIXTH = "invalid_exact_svm_payload_unknown_sixth_instruction"
    SIMULATION_FAILED = "transaction_simulation_failed"
    DUPLICATE_SETTLEMENT = "duplicate_settlement"
    UNEXPECTED_SETTLE_ERROR = "unexpected_settle_error"
    FEE_PAYER_NOT_MANAGED = "fee_payer_not_managed_by_facilitator"
    SETTLEMENT_PENDING = "settlement_pending"  # sent, not yet confirmed: settle again
    TRANSACTION_FAILED = "transaction_failed"
    # svcpay's own, for policy refusals x402 has no string for
    PAY_TO_NOT_REGISTERED = "pay_to_not_registered"
    RATE_LIMITED = "rate_limited"
    INVALID_REQUEST = "invalid_request"


# -- models ----------------------------------------------------------------------------------
class Wire(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, serialize_by_alias=True, extra="allow"
    )

    def to_json_dict(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


class ResourceInfo(Wire):
    url: str = Field(max_length=2048)
    description: str | None = None
    mime_type: str | None = None


class Requirements(Wire):
    """One accepted way to pay (v2 `PaymentRequirements`)."""

    scheme: str
    network: str
    asset: str
    amount: str
    pay_to: str
    max_timeout_seconds: int = Field(gt=0, le=86_400)
    extra: dict[str, Any] = Field(default_factory=dict)

    @field_validator("asset", "pay_to")
    @classmethod
    def _address(cls, v: str) -> str:
        return check_address(v, "address")

    @field_validator("amount")
    @classmethod
    def _amount(cls, v: str) -> str:
        return check_amount(v)

    @property
    def fee_payer(self) -> str | None:
        value = self.extra.get("feePayer")
        return value if isinstance(value, str) else None

    @property
    def memo(self) -> str | None:
        value = self.extra.get("memo")
        return value if isinstance(value, str) else None

    def same_terms(self, other: Requirements) -> bool:
        """Whether `other` asks for exactly these terms (what a gate compares a payment's
        `accepted` with)."""
        return (
            self.scheme == other.scheme
            and caip2_or_none(self.network) == caip2_or_none(other.network)
            and self.asset == other.asset
            and self.amount == other.amount
            and self.pay_to == other.pay_to
            and self.fee_payer == other.fee_payer
            and self.memo == other.memo
        )


class RequirementsV1(Wire):
    """v1 `PaymentRequirements`: the amount is `maxAmountRequired` and the resource is here."""

    scheme: str
    network: str
    max_amount_required: str
    resource: str
    description: str = ""
    mime_type: str = ""
    pay_to: str
    max_timeout_seconds: int = Field(gt=0, le=86_400)
    asset: str
    extra: dict[str, Any] | None = None

    @field_validator("asset", "pay_to")
    @classmethod
    def _address(cls, v: str) -> str:
        return check_address(v, "address")

    @field_validator("max_amount_required")
    @classmethod
    def _amount(cls, v: str) -> str:
        return check_amount(v)

    def as_v2(self) -> Requirements:
        return Requirements(
            scheme=self.scheme,
            network=self.network,
            asset=self.asset,
            amount=self.max_amount_required,
            pay_to=self.pay_to,
            max_timeout_seconds=self.max_timeout_seconds,
            extra=dict(self.extra or {}),
        )


class PaymentRequired(Wire):
    """The `PAYMENT-REQUIRED` header's object (v2)."""

    x402_version: Literal[2] = 2
    error: str | None = None
    resource: ResourceInfo | None = None
    accepts: list[Requirements]
    extensions: dict[str, Any] | None = None


class PaymentRequiredV1(Wire):
    """A v1 402 body."""

    x402_version: Literal[1] = 1
    error: str | None = None
    accepts: list[RequirementsV1]


class SvmPayload(Wire):
    transaction: str = Field(min_length=1, max_length=MAX_HEADER_BYTES)


class PaymentPayload(Wire):
    """The `PAYMENT-SIGNATURE` header's object (v2)."""

    x402_version: Literal[2] = 2
    accepted: Requirements
    payload: SvmPayload
    resource: ResourceInfo | None = None
    extensions: dict[str, Any] | None = None


class PaymentPayloadV1(Wire):
    """An x402 v1 `X-PAYMENT` header's object."""

    x402_version: Literal[1] = 1
    scheme: str
    network: str
    payload: SvmPayload


class VerifyRequest(Wire):
    x402_version: Literal[1, 2]
    payment_payload: dict[str, Any]
    payment_requirements: dict[str, Any]


class VerifyResponse(Wire):
    is_valid: bool
    invalid_reason: str | None = None
    invalid_message: str | None = None
    payer: str | None = None


class SettleResponse(Wire):
    """The `/settle` answer and the `PAYMENT-RESPONSE` header's object."""

    success: bool
    error_reason: str | None = None
    error_message: str | None = None
    payer: str | None = None
    transaction: str = ""
    network: str
    amount: str | None = None


class SupportedKind(Wire):
    x402_version: int
    scheme: str
    network: str
    extra: dict[str, Any] | None = None


class Supported(Wire):
    kinds: list[SupportedKind]
    extensions: list[str] = Field(default_factory=list)
    signers: dict[str, list[str]] = Field(default_factory=dict)


# -- payment-identifier extension (specs/extensions/payment_identifier.md) -------------------
PAYMENT_IDENTIFIER = "payment-identifier"
_PAYMENT_ID = re.compile(r"^[A-Za-z0-9_-]{16,128}$")


def payment_identifier(extensions: dict[str, Any] | None) -> str | None:
    """The client's payment id from a payload's extensions; ProtocolError when malformed."""
    ext = (extensions or {}).get(PAYMENT_IDENTIFIER)
    if ext is None:
        return None
    info = ext.get("info") if isinstance(ext, dict) else None
    pid = info.get("id") if isinstance(info, dict) else None
    if pid is None:
        return None
    if not isinstance(pid, str) or not _PAYMENT_ID.match(pid):
        raise ProtocolError("payment-identifier id must be 16 to 128 letters, digits, '-' or '_'")
    return pid


def payment_identifier_declaration(required: bool = False) -> dict[str, Any]:
    """What a gate puts in `PaymentRequired.extensions` to offer the extension."""
    return {
        "info": {"required": required},
        "schema": {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "properties": {
                "required": {"type": "boolean"},
                "id": {
                    "type": "string",
                    "minLength": 16,
                    "maxLength": 128,
                    "pattern": "^[a-zA-Z0-9_-]+$",
                },
            },
            "required": ["required"],
        },
    }


# -- header codec ----------------------------------------------------------------------------
M = TypeVar("M", bound=BaseModel)


def encode_header(model: Wire | dict[str, Any]) -> str:
    """base64 of the object's compact JSON, as x402 headers carry it."""
    data = model.to_json_dict() if isinstance(model, Wire) else model
    return base64.b64encode(json.dumps(data, separators=(",", ":")).encode()).decode()


def decode_json(value: str | bytes) -> dict[str, Any]:
    """A header's base64 JSON object; ProtocolError naming the defect."""
    if len(value) > MAX_HEADER_BYTES:
        raise ProtocolError(f"header larger than {MAX_HEADER_BYTES} bytes")
    try:
        raw = base64.b64decode(value, validate=True)
        data = json.loads(raw)
    except (binascii.Error, ValueError, UnicodeDecodeError) as e:
        raise ProtocolError("header is not base64 of a JSON object") from e
    if not isinstance(data, dict):
        raise ProtocolError("header is not base64 of a JSON object")
    return data


def parse(model: type[M], data: Any) -> M:
    """`model` from decoded JSON; ProtocolError with the first defect's location."""
    try:
        return model.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or model.__name__
        raise ProtocolError(f"{where}: {err['msg']}") from e


def decode_header(model: type[M], value: str | bytes) -> M:
    return parse(model, decode_json(value))


def caip2_or_none(network: str) -> str | None:
    try:
        return caip2(network)
    except ValueError:
        return None


def x402_version_of(data: dict[str, Any]) -> int | None:
    """`x402Version` of a decoded object, telling an x402 payload from an svcpay proof."""
    v = data.get("x402Version")
    return v if isinstance(v, int) and not isinstance(v, bool) else None
