"""x402's facilitator side of `exact` on Solana, versions 1 and 2: `/supported`, `/verify`
and `/settle` answers, over svcpay's settlement engine (its policy and its durable
send-and-confirm path: `svcpay.protocol.settlement.SettlementEngine`, which the facilitator's
Settler implements).

A request is `{x402Version, paymentPayload, paymentRequirements}`. A body that is not that
shape, or requirements that are not well-formed, is the resource server's error: `BadRequest`
(the app answers 400). Everything about the payment itself is answered as x402 expects, a
VerifyResponse or SettleResponse with x402's reason strings (`wire.Reason`). Policy as for
/authorize: the destination ATA(payTo, asset) must be a registered payTo token account
(`pay_to_not_registered`), a payer beyond its rate is `rate_limited` (on /settle: verifying
costs no fee), and the compute budget is bounded (`svm`). A transaction settled once, by any
request or instance or by /authorize, fails `duplicate_settlement`. docs/adr/0019.

A payment through Token-2022 is checked against its mint now (the engine's `mint_for`): a
transfer-fee mint's transfer must leave payTo the amount after the fee, a hooked mint's may
carry its hook's accounts (docs/adr/0031). The SettleResponse's `amount` is what the payer
sent; the settlement record and its payment.settled event add the fee and the net.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import ValidationError
from solders.transaction import VersionedTransaction

from svcpay.protocol.models import ProtocolError
from svcpay.protocol.settlement import SCHEME_X402, SettlementEngine, SettlementError
from svcpay.schemes.x402_exact import svm
from svcpay.schemes.x402_exact.wire import (
    SCHEME,
    V1_NETWORK,
    PaymentPayload,
    PaymentPayloadV1,
    Reason,
    Requirements,
    RequirementsV1,
    SettleResponse,
    Supported,
    SupportedKind,
    VerifyResponse,
    Wire,
    caip2_or_none,
    parse,
    svcpay_network,
    x402_version_of,
)

MAX_AMOUNT = 2**63 - 1  # the store holds amounts as i64
# What the Settler's refusals are in x402's words.
_REASONS = {
    "RateLimited": Reason.RATE_LIMITED,
    "UnknownPayTo": Reason.PAY_TO_NOT_REGISTERED,
    "SimulationFailed": Reason.SIMULATION_FAILED,
    "InsufficientFunds": Reason.SIMULATION_FAILED,
    "BlockhashExpired": Reason.SIMULATION_FAILED,
    "SettlementFailed": Reason.TRANSACTION_FAILED,
    "SettlementPending": Reason.SETTLEMENT_PENDING,
}


class PayloadV2(Wire):
    """A v2 paymentPayload as a request must carry it: a PaymentPayload object of its
    version. Its contents are judged as a payment: a malformed one is refused with 200 and
    invalid_exact_svm_payload (the client's fault, not the resource server's)."""

    x402_version: Literal[2]


class PayloadV1(Wire):
    """A v1 paymentPayload (PaymentPayloadV1), judged as PayloadV2 is."""

    x402_version: Literal[1]


class RequestV2(Wire):
    """A v2 `/verify` or `/settle` body; anything else is a 400."""

    x402_version: Literal[2]
    payment_payload: PayloadV2
    payment_requirements: Requirements


class RequestV1(Wire):
    """A v1 `/verify` or `/settle` body; anything else is a 400."""

    x402_version: Literal[1]
    payment_payload: PayloadV1
    payment_requirements: RequirementsV1


class BadRequest(Exception):
    """The request is not an x402 verify/settle request (HTTP 400)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class Refused(Exception):
    """The payment is refused with x402's `reason` (HTTP 200, isValid/success false)."""

    def __init__(self, reason: str, message: str, payer: str = "") -> None:
        super().__init__(message)
        self.reason, self.message, self.payer = reason, message, payer


@dataclass(frozen=True)
class Request:
    """A verify or settle request, both versions in one shape."""

    version: int
    network: str  # as the request spells it: answers name it the same way
    requirements: Requirements  # v1's are converted
    payload: dict[str, Any]  # the paymentPayload object, validated by `checked`


@dataclass(frozen=True)
class Checked:
    """A payment that passed every check that needs no chain: what to settle."""

    signed: VersionedTransaction  # co-signed by the fee payer
    transfer: svm.Transfer

    @property
    def payer(self) -> str:
        return str(self.transfer.authority)


def parse_request(body: dict[str, Any]) -> Request:
    """The request in `body`, validated strictly (no coercion: what the OpenAPI document
    refuses is refused); BadRequest naming the first defect. The payload itself is judged
    later, as a payment."""
    version = x402_version_of(body)
    model: type[RequestV2 | RequestV1]
    if version == 2:
        model = RequestV2
    elif version == 1:
        model = RequestV1
    else:
        raise BadRequest("x402Version must be 1 or 2")
    try:
        request = model.model_validate(body, strict=True)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "body"
        raise BadRequest(f"{where}: {first['msg'].removeprefix('Value error, ')}") from e
    requirements = (
        request.payment_requirements.as_v2()
        if isinstance(request, RequestV1)
        else request.payment_requirements
    )
    if int(requirements.amount) > MAX_AMOUNT:
        raise BadRequest(f"paymentRequirements: amount above {MAX_AMOUNT}")
    return Request(version, requirements.network, requirements, body["paymentPayload"])


class X402Facilitator:
    """`exact` on this facilitator's network, settled through `settler`."""

    def __init__(self, settler: SettlementEngine, network: str) -> None:
        self.settler, self.network = settler, network
        self.fee_payer = settler.fee_payer.pubkey()

    def supported(self) -> Supported:
        """Both wire versions on this network (CAIP-2 for v2, v1's name for v1; a network
        x402 does not know is listed under svcpay's own name)."""
        extra = {"feePayer": str(self.fee_payer)}
        v1 = V1_NETWORK.get(self.network, self.network)
        return Supported(
            kinds=[
                SupportedKind(
                    x402_version=2,
                    scheme=SCHEME,
                    network=caip2_or_none(self.network) or self.network,
                    extra=extra,
                ),
                SupportedKind(x402_version=1, scheme=SCHEME, network=v1, extra=extra),
            ],
            extensions=[],
            signers={"solana:*": [str(self.fee_payer)]},
        )

    async def verify(self, request: Request) -> VerifyResponse:
        """Every check /settle makes, then a simulation; nothing is sent or stored."""
        try:
            checked = await self.check(request)
            if not await self.settler.registered(str(checked.transfer.destination)):
                raise self._unregistered(checked)
            key = str(checked.signed.signatures[0])
            if await self.settler.known(key):
                raise Refused(
                    Reason.DUPLICATE_SETTLEMENT, "this transaction was settled", checked.payer
                )
            try:
                await self.settler.simulate(checked.signed)
            except SettlementError as e:
                if e.status == UNAVAILABLE:  # not an answer about the payment: HTTP 503
                    raise
                raise _refused(e, checked.payer) from e
        except Refused as e:
            return VerifyResponse(
                is_valid=False, invalid_reason=e.reason, invalid_message=e.message, payer=e.payer
            )
        return VerifyResponse(is_valid=True, payer=checked.payer)

    async def settle(self, request: Request) -> SettleResponse:
        """Checks, simulates, co-signs, sends and confirms, durably (as /authorize does).
        Success only for the one request that recorded the settlement."""
        try:
            checked = await self.check(request)
            transfer = checked.transfer
            try:
                await self.settler.admit(checked.payer, str(transfer.destination))
                row, won = await self.settler.settle(
                    checked.signed,
                    {
                        "payer": checked.payer,
                        "pay_to": str(transfer.destination),
                        "token": str(transfer.mint),
                        "amount": transfer.amount,
                        "fee": transfer.fee,
                        "memo": transfer.memos[0] if transfer.memos else "",
                    },
                    scheme=SCHEME_X402,
                    exclusive=True,
                    simulate=True,
                )
            except SettlementError as e:
                if e.status == UNAVAILABLE:  # not an answer about the payment: HTTP 503
                    raise
                refused = _refused(e, checked.payer)
                return SettleResponse(
                    success=False,
                    error_reason=refused.reason,
                    error_message=refused.message,
                    payer=checked.payer,
                    transaction=(
                        str(checked.signed.signatures[0]) if e.name == "SettlementPending" else ""
                    ),
                    network=request.network,
                )
            if not won and row["status"] != "settled" and row["scheme"] == SCHEME_X402:
                # Another live request is sending it: not settled yet, and maybe never.
                # A gate whose first settle got no answer reconciles on this (ADR 0027).
                return SettleResponse(
                    success=False,
                    error_reason=Reason.SETTLEMENT_PENDING,
                    error_message="another request is settling this transaction; ask again",
                    payer=checked.payer,
                    transaction=row["signature"],
                    network=request.network,
                )
            if not won:
                raise Refused(
                    Reason.DUPLICATE_SETTLEMENT,
                    "this transaction was settled by an earlier request",
                    checked.payer,
                )
        except Refused as e:
            return SettleResponse(
                success=False,
                error_reason=e.reason,
                error_message=e.message,
                payer=e.payer,
                transaction="",
                network=request.network,
            )
        return SettleResponse(
            success=True,
            payer=checked.payer,
            transaction=row["signature"],
            network=request.network,
            amount=str(transfer.amount),
        )

    async def check(self, request: Request) -> Checked:
        """The x402 and `exact` SVM rules (the chain is asked only what a Token-2022 mint
        does now); Refused with the reason, SettlementError 503 when the RPC node is away."""
        req = request.requirements
        if request.version == 2:
            try:
                payload = parse(PaymentPayload, request.payload)
            except ProtocolError as e:
                raise Refused(Reason.INVALID_PAYLOAD, f"paymentPayload: {e.reason}") from e
            accepted = payload.accepted
            if accepted.scheme != SCHEME or req.scheme != SCHEME:
                raise Refused(Reason.UNSUPPORTED_SCHEME, f"only {SCHEME!r} is settled here")
            if _network(accepted.network) != _network(req.network):
                raise Refused(Reason.NETWORK_MISMATCH, "accepted.network is not the required")
            transaction = payload.payload.transaction
        else:
            try:
                payload_v1 = parse(PaymentPayloadV1, request.payload)
            except ProtocolError as e:
                raise Refused(Reason.INVALID_PAYLOAD, f"paymentPayload: {e.reason}") from e
            if payload_v1.scheme != SCHEME or req.scheme != SCHEME:
                raise Refused(Reason.UNSUPPORTED_SCHEME, f"only {SCHEME!r} is settled here")
            if _network(payload_v1.network) != _network(req.network):
                raise Refused(Reason.NETWORK_MISMATCH, "the payload's network is not the required")
            transaction = payload_v1.payload.transaction
        if _network(req.network) != self.network:
            raise Refused(Reason.NETWORK_MISMATCH, f"this facilitator settles on {self.network}")
        if request.version == 2 and not accepted.same_terms(req):
            raise Refused(
                Reason.INVALID_PAYLOAD, "the payment's accepted terms are not the requirements"
            )
        if req.fee_payer is None:
            raise Refused(Reason.FEE_PAYER_MISSING, "extra.feePayer is required")
        if req.fee_payer != str(self.fee_payer):
            raise Refused(Reason.FEE_PAYER_NOT_MANAGED, f"extra.feePayer must be {self.fee_payer}")
        try:
            tx = svm.decode_transaction(transaction)
        except svm.Refusal as e:
            raise Refused(e.reason, e.message) from e
        try:
            mint = await self.settler.mint_for(tx, req.asset)
        except SettlementError as e:
            if e.status == UNAVAILABLE:
                raise
            raise Refused(Reason.MINT_MISMATCH, e.message, _payer_of(tx)) from e
        try:
            transfer = svm.check_payment(
                tx,
                fee_payer=self.fee_payer,
                asset=req.asset,
                pay_to=req.pay_to,
                amount=int(req.amount),
                memo=req.memo,
                mint=mint,
            )
        except svm.Refusal as e:
            raise Refused(e.reason, e.message, _payer_of(tx)) from e
        if transfer.amount > MAX_AMOUNT:
            raise Refused(Reason.INVALID_PAYLOAD, f"pays more than {MAX_AMOUNT}", _payer_of(tx))
        return Checked(self.settler.cosign(tx), transfer)

    def _unregistered(self, checked: Checked) -> Refused:
        return Refused(
            Reason.PAY_TO_NOT_REGISTERED,
            f"ATA(payTo, asset) = {checked.transfer.destination} is not registered with this "
            "facilitator: its provider registers it",
            checked.payer,
        )


def _network(name: str) -> str:
    """svcpay's name for a CAIP-2 id or v1 name (a name x402 does not know stays itself)."""
    return svcpay_network(name) or name


UNAVAILABLE = 503  # a SettlementError's status when the RPC node did not answer


def _refused(e: SettlementError, payer: str) -> Refused:
    return Refused(_REASONS.get(e.name, Reason.UNEXPECTED_SETTLE_ERROR), e.message, payer)


def _payer_of(tx: VersionedTransaction) -> str:
    """The third instruction's fourth account (a TransferChecked's authority), if any:
    x402 answers name the payer even when they refuse."""
    try:
        msg = tx.message
        keys = list(msg.account_keys)
        ix = msg.instructions[2]
        return str(keys[bytes(ix.accounts)[3]])
    except (IndexError, TypeError):
        return ""
