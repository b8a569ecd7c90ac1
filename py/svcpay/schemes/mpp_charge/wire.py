"""MPP Solana `charge` on the wire: the challenge's `request` and what the gate and the
facilitator say to each other about a charge (`POST /mpp/charge/settle` for a pulled
transaction, `POST /mpp/charge/verify` for a pushed signature)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from svcpay.protocol.models import ProtocolError

METHOD, INTENT = "solana", "charge"
NETWORKS = {"solana-mainnet": "mainnet", "solana-devnet": "devnet"}  # else "localnet"
MAX_EXTERNAL_ID = 566  # bytes: what a memo instruction carries in one packet


class Wire(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="ignore", frozen=True, strict=True)

    def to_json_dict(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


class MethodDetails(Wire):
    network: str
    decimals: int = Field(ge=0, le=18)
    token_program: str | None = Field(default=None, alias="tokenProgram")
    fee_payer: bool = Field(default=False, alias="feePayer")
    fee_payer_key: str | None = Field(default=None, alias="feePayerKey")
    recent_blockhash: str | None = Field(default=None, alias="recentBlockhash")


class ChargeRequest(Wire):
    """The `request` of a `solana`/`charge` challenge (SPL tokens; no splits)."""

    amount: str = Field(pattern=r"^[1-9][0-9]{0,19}$")
    currency: str = Field(min_length=32, max_length=128)  # the mint
    recipient: str = Field(min_length=32, max_length=44)  # the wallet (its ATA receives)
    description: str | None = None
    external_id: str = Field(alias="externalId", min_length=1, max_length=MAX_EXTERNAL_ID)
    method_details: MethodDetails = Field(alias="methodDetails")


class SettleCharge(Wire):
    """A pulled charge for the facilitator to check, co-sign and send."""

    request: ChargeRequest
    transaction: str = Field(max_length=4096)  # standard base64


class VerifyCharge(Wire):
    """A pushed charge (the payer sent it) for the facilitator to find and record."""

    request: ChargeRequest
    signature: str = Field(min_length=64, max_length=90)


class ChargeAnswer(Wire):
    """The facilitator's answer about one charge (HTTP 200 for every payment): `success`
    with the transaction's signature, or the MPP problem type (`verification-failed`,
    `payment-insufficient`, ...) and why. `pending`: sent, not yet confirmed (ask again)."""

    success: bool
    reference: str = ""
    payer: str = ""
    problem: Literal[
        "",
        "verification-failed",
        "payment-insufficient",
        "invalid-challenge",
        "malformed-credential",
        "payment-expired",
    ] = ""
    message: str = ""
    pending: bool = False


def parse_charge_request(data: Any) -> ChargeRequest:
    try:
        return ChargeRequest.model_validate(data)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "request"
        raise ProtocolError(f"the charge request's {where}: {first['msg']}") from e
