"""The facilitator's side of MPP Solana `charge`: a pulled transaction is checked
(`svm.check_charge`), co-signed, simulated, sent and confirmed through the settlement engine
every scheme shares (one transaction settles once, whichever protocol brings it); a pushed
signature is looked up on chain at `confirmed`, checked the same way, and recorded through
the same engine, so it too is used once. A transfer through Token-2022 is checked against
its mint now (the engine's `mint_for`: a fee mint's charge is what the recipient receives,
a hooked mint's transfer carries its hook's accounts; docs/adr/0031). Every payment gets
HTTP 200 and a `ChargeAnswer`; a body that is not a charge is the caller's 400
(`ProtocolError`)."""

from __future__ import annotations

import base64
import binascii
from typing import Any

from pydantic import ValidationError
from solders.pubkey import Pubkey
from solders.transaction import VersionedTransaction

from svcpay.protocol.models import ProtocolError
from svcpay.protocol.settlement import SCHEME_MPP, SettlementEngine, SettlementError
from svcpay.schemes.mpp_charge.svm import Charge, ChargeRefused, check_charge, require_fully_signed
from svcpay.schemes.mpp_charge.wire import ChargeAnswer, ChargeRequest, SettleCharge, VerifyCharge

UNAVAILABLE = 503
MAX_AMOUNT = 2**63 - 1  # the store holds amounts as i64


def parse_body(model: type[SettleCharge] | type[VerifyCharge], body: Any) -> Any:
    try:
        return model.model_validate(body)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "body"
        raise ProtocolError(f"{where}: {first['msg']}") from e


class ChargeFacilitator:
    """MPP `charge` settled through `engine`."""

    def __init__(self, engine: SettlementEngine) -> None:
        self.engine = engine
        self.fee_payer = engine.fee_payer.pubkey()

    async def settle(self, body: Any) -> ChargeAnswer:
        """A charge's transaction: check, co-sign as fee payer (or, on a `feePayer: false`
        challenge, take it fully signed by the client), send, confirm (durably, once)."""
        charge = parse_body(SettleCharge, body)
        request = charge.request
        try:
            raw = base64.b64decode(charge.transaction, validate=True)
            tx = VersionedTransaction.from_bytes(raw)
        except (binascii.Error, ValueError) as e:
            return _refused("malformed-credential", f"not a base64 transaction: {e}")
        details = request.method_details
        if details.fee_payer and details.fee_payer_key != str(self.fee_payer):
            return _refused(
                "verification-failed",
                f"this facilitator pays fees as {self.fee_payer}: the request must say so",
            )
        # `feePayer: false`: the client signed as fee payer too; sent as it is.
        fee_payer = self.fee_payer if details.fee_payer else None
        try:
            paid = await self._check(tx, request, fee_payer)
            if fee_payer is None:
                require_fully_signed(tx)
        except ChargeRefused as e:
            return _refused("verification-failed", str(e))
        signed = self.engine.cosign(tx) if fee_payer is not None else tx
        record = self._record(paid, request)
        try:
            await self.engine.admit(str(paid.payer), str(paid.destination))
            row, won = await self.engine.settle(
                signed, record, scheme=SCHEME_MPP, exclusive=True, simulate=True
            )
        except SettlementError as e:
            if e.status == UNAVAILABLE:  # not an answer about the payment
                raise
            if e.name == "SettlementPending":
                return ChargeAnswer(
                    success=False,
                    pending=True,
                    reference=str(signed.signatures[0]),
                    message=e.message,
                    payer=str(paid.payer),
                )
            kind = (
                "payment-insufficient" if e.name == "InsufficientFunds" else "verification-failed"
            )
            return _refused(kind, e.message, str(paid.payer))
        return self._answer(row, won, paid)

    async def verify(self, body: Any) -> ChargeAnswer:
        """A pushed charge: the payer sent it; find it at `confirmed`, check, record once."""
        charge = parse_body(VerifyCharge, body)
        if charge.request.method_details.fee_payer:
            return _refused(
                "verification-failed", "push mode is refused when the server pays the fee"
            )
        try:
            tx = await self.engine.landed_transaction(charge.signature)
        except ValueError as e:
            return _refused("malformed-credential", f"not a transaction signature: {e}")
        if tx is None:
            return _refused(
                "verification-failed",
                "no successful transaction with that signature is confirmed yet",
            )
        try:
            paid = await self._check(tx, charge.request, None)
        except ChargeRefused as e:
            return _refused("verification-failed", str(e))
        if not await self.engine.registered(str(paid.destination)):
            return _refused(
                "verification-failed", f"{paid.destination} is not registered with this facilitator"
            )
        try:
            row, won = await self.engine.settle(
                tx, self._record(paid, charge.request), scheme=SCHEME_MPP, exclusive=True
            )
        except SettlementError as e:
            if e.status == UNAVAILABLE:
                raise
            return _refused("verification-failed", e.message, str(paid.payer))
        return self._answer(row, won, paid)

    async def _check(
        self, tx: VersionedTransaction, request: ChargeRequest, fee_payer: Pubkey | None
    ) -> Charge:
        """The charge `tx` pays (SettlementError 503 when the mint cannot be read)."""
        if int(request.amount) > MAX_AMOUNT:
            raise ChargeRefused(f"amount above {MAX_AMOUNT}")
        try:
            mint = await self.engine.mint_for(tx, request.currency)
        except SettlementError as e:
            if e.status == UNAVAILABLE:
                raise
            raise ChargeRefused(e.message) from e
        paid = check_charge(
            tx,
            mint=request.currency,
            recipient=request.recipient,
            amount=int(request.amount),
            decimals=request.method_details.decimals,
            memo=request.external_id,
            fee_payer=fee_payer,
            mint_now=mint,
        )
        return paid

    @staticmethod
    def _record(paid: Charge, request: ChargeRequest) -> dict[str, Any]:
        return {
            "payer": str(paid.payer),
            "pay_to": str(paid.destination),
            "token": request.currency,
            "amount": paid.amount,
            "fee": paid.fee,
            "memo": request.external_id,
        }

    @staticmethod
    def _answer(row: dict[str, Any], won: bool, paid: Charge) -> ChargeAnswer:
        if won:
            return ChargeAnswer(success=True, reference=row["signature"], payer=str(paid.payer))
        if row["status"] != "settled" and row["scheme"] == SCHEME_MPP:
            return ChargeAnswer(
                success=False,
                pending=True,
                reference=row["signature"],
                message="another request is settling this transaction; ask again",
                payer=str(paid.payer),
            )
        return _refused("verification-failed", "this transaction was already used", str(paid.payer))


def _refused(problem: str, message: str, payer: str = "") -> ChargeAnswer:
    return ChargeAnswer(success=False, problem=problem, message=message, payer=payer)  # type: ignore[arg-type]
