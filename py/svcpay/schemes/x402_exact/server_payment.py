"""One x402 payment through the gate (`server.X402Server.admit_payment`): the terms it
answers, its transaction checked with `exact`'s SVM rules, its replay claim, the facilitator's
verdict when asked for, settling before the handler when the terms say so; then `Paid`, which
settles after the handler and adds the receipt to the response."""

from __future__ import annotations

import hashlib
import time
from typing import Any, Protocol

from solders.message import to_bytes_versioned
from solders.pubkey import Pubkey
from solders.transaction import VersionedTransaction

from svcpay.protocol.memo import Memos, MemoTerms
from svcpay.protocol.mints import MintReader, MintUnavailable
from svcpay.protocol.pricing import OneTime, PricingEntry, Terms
from svcpay.protocol.programs import MEMO_PROGRAM
from svcpay.protocol.replay import ReplayStore
from svcpay.protocol.token2022 import MintAtEpoch
from svcpay.schemes.decision import Admit, PaymentRequiredFn, RawHeaders, Reply, Request
from svcpay.schemes.x402_exact import svm
from svcpay.schemes.x402_exact.facilitator_client import FacilitatorUnavailable, X402Facilitator
from svcpay.schemes.x402_exact.idempotency import PaymentIdStore
from svcpay.schemes.x402_exact.settling import Guard, PendingSettlement
from svcpay.schemes.x402_exact.wire import (
    SCHEME,
    PaymentPayload,
    PaymentPayloadV1,
    Reason,
    SettleResponse,
)


class _Options(Protocol):
    @property
    def remote_verify(self) -> bool: ...


class PaymentServer(Protocol):
    """What a payment reads of its gate (`server.X402Server`), named here so that this
    module needs nothing of `server`, which builds payments (no import circle)."""

    terms: Terms
    memos: Memos
    replay: ReplayStore
    facilitator: X402Facilitator
    payment_ids: PaymentIdStore
    guard: Guard
    mints: MintReader | None
    mint: Pubkey
    fee_payer: Pubkey
    token_program: Pubkey
    token_2022: bool
    network_v1: str

    @property
    def options(self) -> _Options: ...

    def requirements(self, entry: OneTime, memo: str) -> dict[str, Any]: ...

    def requirements_v1(self, entry: OneTime, memo: str, request: Request) -> dict[str, Any]: ...

    def unavailable(self, error: FacilitatorUnavailable | str) -> Reply: ...

    def receipt_headers(self, receipt: SettleResponse, version: int) -> RawHeaders: ...

    async def settle(
        self, payment: GatePayment, *, served: bool
    ) -> SettleResponse | Reply | PendingSettlement: ...


CLAIM_MARGIN_SECS = 60


class GatePayment:
    """One x402 payment through the gate: its checks, its claim, its payment id."""

    def __init__(
        self,
        server: PaymentServer,
        request: Request,
        pricing: list[PricingEntry],
        payment_required: PaymentRequiredFn,
        version: int,
        data: dict[str, Any],
        pid: str | None,
    ) -> None:
        self.server, self.request, self.pricing = server, request, pricing
        self.payment_required, self.version, self.data, self.pid = (
            payment_required,
            version,
            data,
            pid,
        )
        self.requirements: dict[str, Any] = {}
        self.entry: OneTime | None = None
        self.claim: str | None = None
        self.counted = False  # in the guard's in-flight count

    def refuse(self, reason: str, message: str) -> Reply:
        return self.payment_required(self.request, self.pricing, "InvalidPayment", message, reason)

    async def check(
        self, transaction: str, payload: PaymentPayload | PaymentPayloadV1
    ) -> Reply | Admit:
        try:
            tx = svm.decode_transaction(transaction)
        except svm.Refusal as e:
            return self.refuse(e.reason, f"the payment's transaction could not be decoded: {e}")
        answered = self.answers(tx, payload)
        if isinstance(answered, Reply):
            return answered
        entry, memo = answered
        self.entry = entry
        if (refused := await self.check_transfer(tx, entry, memo)) is not None:
            return refused
        if (refused := await self.claim_transaction(tx)) is not None:
            return refused
        if self.server.options.remote_verify and (refused := await self.verify()) is not None:
            return refused
        if entry.settle == "before":
            return await self.settle_before()
        return Paid(self, None)

    def answers(
        self, tx: VersionedTransaction, payload: PaymentPayload | PaymentPayloadV1
    ) -> Reply | tuple[OneTime, str]:
        """The one-time option and memo the payment answers (its requirements kept), or the
        refusal of a payment that answers none of this gate's terms."""
        keys = tx.message.account_keys
        tx_memos = {
            bytes(ix.data)
            for ix in tx.message.instructions
            if ix.program_id_index < len(keys) and keys[ix.program_id_index] == MEMO_PROGRAM
        }
        one_time = [e for e in self.pricing if isinstance(e, OneTime)]
        if isinstance(payload, PaymentPayload):
            return self.answers_v2(payload, tx_memos, one_time)
        return self.answers_v1(payload, tx_memos, one_time)

    def answers_v2(
        self, payload: PaymentPayload, tx_memos: set[bytes], one_time: list[OneTime]
    ) -> Reply | tuple[OneTime, str]:
        """v2 echoes the terms it accepted: they must be ones this gate offers now."""
        server, terms, resource = self.server, self.server.terms, self.request.resource
        accepted = payload.accepted
        memo = accepted.memo
        entry = next((e for e in one_time if str(e.amount) == accepted.amount), None)
        if entry is None:
            asked = " or ".join(repr(str(e.amount)) for e in one_time)
            return self.refuse(
                "no_matching_requirements",
                f"accepted.amount is {accepted.amount!r}; this gate asks for {asked}",
            )
        if memo is None:
            return self.refuse(
                "no_matching_requirements",
                "accepted.extra.memo is missing: pay the terms of a fresh PAYMENT-REQUIRED",
            )
        expected = server.requirements(entry, memo)
        if (differs := _mismatch(expected, accepted.to_json_dict())) is not None:
            return self.refuse("no_matching_requirements", differs)
        memo_terms = MemoTerms(resource, accepted.amount, terms.pay_to, terms.token)
        if (stale := server.memos.check(memo, memo_terms)) is not None:
            return self.refuse("no_matching_requirements", stale)
        if memo.encode() not in tx_memos:
            return self.refuse(Reason.MEMO_MISMATCH, "the transaction's memo is not extra.memo")
        self.requirements = expected
        return entry, memo

    def answers_v1(
        self, payload: PaymentPayloadV1, tx_memos: set[bytes], one_time: list[OneTime]
    ) -> Reply | tuple[OneTime, str]:
        """v1 names only scheme and network: the memo in its transaction names the terms."""
        server, terms, resource = self.server, self.server.terms, self.request.resource
        if payload.scheme != SCHEME:
            return self.refuse(
                Reason.UNSUPPORTED_SCHEME, f"scheme {payload.scheme!r} is not offered"
            )
        if payload.network != server.network_v1:
            why = f"the payment is on {payload.network}, this gate takes {server.network_v1}"
            return self.refuse(Reason.NETWORK_MISMATCH, why)
        found = _issued(server.memos, tx_memos, one_time, resource, terms)
        if found is None:
            why = f"the transaction carries no memo this gate issued for {resource}"
            return self.refuse(Reason.MEMO_MISMATCH, why)
        entry, memo = found
        self.requirements = server.requirements_v1(entry, memo, self.request)
        return entry, memo

    async def check_transfer(
        self, tx: VersionedTransaction, entry: OneTime, memo: str
    ) -> Reply | None:
        """What the facilitator's /verify would check without the chain, here: the refusal,
        or None when the transaction pays `entry`."""
        server, terms = self.server, self.server.terms
        mint: MintAtEpoch | None = None
        if server.token_2022:  # what the mint does now: its fee, its hook (SPL: nothing)
            assert server.mints is not None
            try:
                mint = await server.mints.at_epoch(server.mint)
            except MintUnavailable as e:
                return server.unavailable(f"the mint {terms.token} cannot be read: {e}")
            except ValueError as e:
                return self.refuse(Reason.MINT_MISMATCH, f"{terms.token} is no mint: {e}")
        try:
            transfer = svm.check_payment(
                tx,
                fee_payer=server.fee_payer,
                asset=terms.token,
                pay_to=str(terms.owner),
                amount=entry.amount,
                memo=memo,
                mint=mint,
            )
        except svm.Refusal as e:
            return self.refuse(e.reason, e.message)
        if transfer.token_program != server.token_program:
            why = (
                f"{terms.token} moves through {server.token_program}, not {transfer.token_program}"
            )
            return self.refuse(Reason.MINT_MISMATCH, why)
        return None

    async def claim_transaction(self, tx: VersionedTransaction) -> Reply | None:
        """Claims the transaction against replay and counts the payment in flight, or the
        refusal (the facilitator too busy, the transaction used before)."""
        server = self.server
        if (busy := server.guard.refuses()) is not None:
            return server.unavailable(busy)
        key = "x402:" + hashlib.sha256(to_bytes_versioned(tx.message)).hexdigest()
        expires = int(time.time()) + server.memos.ttl_secs + CLAIM_MARGIN_SECS
        if not await server.replay.claim(key, expires):
            return self.refuse(Reason.DUPLICATE_SETTLEMENT, "this transaction was already used")
        self.claim = key
        server.guard.in_flight += 1
        self.counted = True
        return None

    async def verify(self) -> Reply | None:
        """The facilitator's /verify (`X402Options.remote_verify`): None when it is valid,
        else the refusal (the claim released)."""
        server = self.server
        try:
            verdict = await server.facilitator.verify(self.version, self.data, self.requirements)
        except FacilitatorUnavailable as e:
            server.guard.failed()
            await self.release()
            return server.unavailable(e)
        except BaseException:
            await self.release()
            raise
        server.guard.succeeded()
        if not verdict.is_valid:
            await self.release()
            reason = verdict.invalid_reason or "invalid_payment"
            return self.refuse(reason, verdict.invalid_message or reason)
        return None

    async def settle_before(self) -> Reply | Admit:
        """Settles before the handler runs (`OneTime.settle == "before"`)."""
        server = self.server
        try:
            receipt = await server.settle(self, served=False)
        except BaseException:
            await self.release()
            raise
        if isinstance(receipt, PendingSettlement):
            return server.unavailable(
                "the payment was sent for settlement but not confirmed; it is being "
                "reconciled, so do not pay again yet"
            )
        if isinstance(receipt, Reply):
            return receipt
        return Paid(self, receipt)

    def done(self) -> None:
        """No longer waiting for the facilitator (settled, or parked as pending)."""
        if self.counted:
            self.counted = False
            self.server.guard.in_flight -= 1

    async def release(self) -> None:
        self.done()
        if self.claim is not None:
            key, self.claim = self.claim, None
            await self.server.replay.release(key)

    async def abandon_id(self) -> None:
        if self.pid is not None:
            await self.server.payment_ids.abandon(self.request.resource, self.pid)

    async def keep(self, status: int, headers: RawHeaders, body: bytes) -> None:
        if self.pid is not None:
            await self.server.payment_ids.finish(
                self.request.resource, self.pid, status, headers, body
            )


class Paid(Admit):
    """A checked payment whose handler runs: settles it (unless settled before) when the
    handler starts answering below 400, and adds the receipt to the response."""

    wants_start = True

    def __init__(self, payment: GatePayment, receipt: SettleResponse | None) -> None:
        self.payment, self.receipt = payment, receipt
        self.pending = False
        self.capture = payment.pid is not None
        self.sent: RawHeaders = []

    async def start(self, status: int, headers: RawHeaders) -> Reply | RawHeaders:
        payment = self.payment
        if self.receipt is None:
            if status >= 400:  # not settled: the client keeps its money and its transaction
                return []
            try:
                result = await payment.server.settle(payment, served=True)
            except BaseException:
                await payment.release()
                raise
            if isinstance(result, Reply):
                return result
            if isinstance(result, PendingSettlement):
                self.pending = True
                extra: RawHeaders = [(b"x-svc-settlement", b"pending")]
                self.sent = [*headers, *extra]
                return extra
            self.receipt = result
        extra = payment.server.receipt_headers(self.receipt, payment.version)
        self.sent = [*headers, *extra]
        return extra

    async def end(self, status: int | None, body: bytes | None) -> None:
        payment = self.payment
        if self.receipt is None and not self.pending:  # the handler or settling failed
            await payment.release()
            await payment.abandon_id()
        elif status is not None and body is not None and self.sent:
            await payment.keep(status, self.sent, body)
        else:
            await payment.abandon_id()


def _mismatch(expected: dict[str, Any], accepted: dict[str, Any]) -> str | None:
    """Which term of `accepted` differs from what this gate offers, or None."""
    for field in ("scheme", "network", "asset", "amount", "payTo"):
        if accepted.get(field) != expected[field]:
            got, want = accepted.get(field), expected[field]
            return f"accepted.{field} is {got!r}; this gate asks for {want!r}"
    extra = accepted.get("extra") or {}
    if extra.get("feePayer") != expected["extra"]["feePayer"]:
        return (
            f"accepted.extra.feePayer is not this gate's fee payer {expected['extra']['feePayer']}"
        )
    return None


def _issued(
    memos: Memos, tx_memos: set[bytes], one_time: list[OneTime], resource: str, terms: Terms
) -> tuple[OneTime, str] | None:
    """The one-time option and memo a v1 payment's transaction answers (v1 payloads do not
    echo the terms: the memo this gate issued, bound to resource and price, names them)."""
    for raw in tx_memos:
        try:
            memo = raw.decode()
        except UnicodeDecodeError:
            continue
        for entry in one_time:
            if (
                memos.check(memo, MemoTerms(resource, str(entry.amount), terms.pay_to, terms.token))
                is None
            ):
                return entry, memo
    return None
