"""The payment proof: what the facilitator signs after settlement, verifiable offline.

A proof is a JSON object; `signature` is the facilitator's ed25519 signature over
`b"svcpay-proof-v1:" + canonical JSON` of every other field (sorted keys, no spaces,
ASCII). Gates trust a set of facilitator public keys and need no call per request
(docs/adr/0006). Sent as `X-PAYMENT: base64(JSON)`.
"""

from __future__ import annotations

import base64
import binascii
import json
from functools import lru_cache
from typing import Any

from pydantic import Field, ValidationError, field_validator
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from solders.signature import Signature

from svcpay.protocol.headers import MAX_HEADER_BYTES, PROTOCOL_VERSION, SUPPORTED_VERSIONS
from svcpay.protocol.models import (
    ADDRESS_SCHEMA,
    AMOUNT_SCHEMA,
    Model,
    ProtocolError,
    check_address,
    check_amount,
    check_version,
    parse_model,
)

DOMAIN = b"svcpay-proof-v1:"


class PaymentProof(Model):
    """A settlement's signed proof, sent to gates as X-PAYMENT: base64(JSON)."""

    version: str = Field(
        default=PROTOCOL_VERSION, json_schema_extra={"enum": list(SUPPORTED_VERSIONS)}
    )
    network: str
    transaction: str = Field(description="the settled transaction's signature (base58)")
    payer: str = Field(json_schema_extra=ADDRESS_SCHEMA)
    pay_to: str = Field(json_schema_extra=ADDRESS_SCHEMA)
    token: str = Field(json_schema_extra=ADDRESS_SCHEMA)
    amount: str = Field(json_schema_extra=AMOUNT_SCHEMA)
    memo: str
    issued_at: int = Field(ge=0, description="unix seconds")
    expires_at: int = Field(ge=0, description="unix seconds")
    facilitator: str = Field(json_schema_extra=ADDRESS_SCHEMA)  # the signing key
    signature: str = Field(
        default="",
        description="the facilitator's base58 ed25519 signature over "
        'b"svcpay-proof-v1:" + the canonical JSON of the other fields; empty until signed',
    )

    @field_validator("version")
    @classmethod
    def _version(cls, v: str) -> str:
        return check_version(v)

    @field_validator("payer", "pay_to", "token", "facilitator")
    @classmethod
    def _address(cls, v: str) -> str:
        return check_address(v, "address field")

    @field_validator("amount")
    @classmethod
    def _amount(cls, v: str) -> str:
        return check_amount(v)

    def signing_bytes(self) -> bytes:
        """DOMAIN + the canonical JSON of every field but `signature` (extra fields too),
        built directly rather than through model_dump: this runs on every paid request."""
        fields: dict[str, Any] = {
            "version": self.version,
            "network": self.network,
            "transaction": self.transaction,
            "payer": self.payer,
            "payTo": self.pay_to,
            "token": self.token,
            "amount": self.amount,
            "memo": self.memo,
            "issuedAt": self.issued_at,
            "expiresAt": self.expires_at,
            "facilitator": self.facilitator,
        }
        if self.model_extra:
            fields.update(self.model_extra)
            fields.pop("signature", None)
        canonical = json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
        return DOMAIN + canonical.encode()

    def signed_by(self, facilitator: Keypair) -> PaymentProof:
        """This proof signed by `facilitator` (whose key must be the `facilitator` field)."""
        if str(facilitator.pubkey()) != self.facilitator:
            raise ValueError("the proof names another facilitator key")
        sig = facilitator.sign_message(self.signing_bytes())
        return self.model_copy(update={"signature": str(sig)})

    def signature_valid(self) -> bool:
        try:
            sig = Signature.from_string(self.signature)
            key = _facilitator_key(self.facilitator)
        except ValueError:
            return False
        return sig.verify(key, self.signing_bytes())

    @property
    def replay_key(self) -> str:
        """What a replay store claims: the settled transaction on its network."""
        return f"{self.network}:{self.transaction}"

    def to_header(self) -> str:
        return base64.b64encode(
            json.dumps(self.to_json_dict(), separators=(",", ":")).encode()
        ).decode()


@lru_cache(maxsize=64)
def _facilitator_key(address: str) -> Pubkey:
    """Facilitator keys are few and seen on every paid request: parse each once."""
    return Pubkey.from_string(address)


def parse_payment_proof(header: str | bytes) -> PaymentProof:
    """Decodes an `X-PAYMENT` header value; ProtocolError (InvalidPaymentProof) with the
    reason if it is oversized, not base64, not JSON or not a proof."""
    raw = header.encode() if isinstance(header, str) else header
    if len(raw) > MAX_HEADER_BYTES:
        raise ProtocolError(f"X-PAYMENT is larger than {MAX_HEADER_BYTES} bytes")
    try:
        decoded = base64.b64decode(raw.strip(), validate=True)
    except (binascii.Error, ValueError) as e:
        raise ProtocolError("X-PAYMENT must be base64 of the proof's JSON") from e
    try:  # pydantic parses the JSON itself: faster than json.loads, then validation
        return PaymentProof.model_validate_json(decoded)
    except ValidationError as e:
        if e.errors()[0]["type"] == "json_invalid":
            raise ProtocolError("X-PAYMENT must be base64 of the proof's JSON") from e
        if e.errors()[0]["type"] == "model_type":
            raise ProtocolError("X-PAYMENT must hold a JSON object") from e
        return parse_model(PaymentProof, json.loads(decoded))  # the same reason as elsewhere
