"""The gate's side of x402 `exact` on Solana (docs/adr/0018), versions 2 and 1.

Every 402 carries `PAYMENT-REQUIRED`: one `exact` entry per one-time option, paying the
wallet that owns the provider's token account (`payTo`), with the facilitator's fee payer
and the same HMAC memo as svcpay's body (`extra.memo`), so the gate checks statelessly that
a payment answers terms it issued. A payment (`PAYMENT-SIGNATURE`, or an x402 v1
`X-PAYMENT`) is admitted when: it parses (else 400); it answers such terms for this
resource, with that memo in its transaction (else 402); its transaction was not used before
(a claim in the replay store keyed by the message's hash; else 402); the facilitator
verifies it. Then, per `OneTime.settle`: "after" (x402's order) runs the handler and settles
only when it answered below 400, replacing the response with a 402 when settling fails;
"before" settles first. The answer carries `PAYMENT-RESPONSE` (v1: `X-PAYMENT-RESPONSE`
too). An unreachable facilitator is a 503 with Retry-After. With the `payment-identifier`
extension, a resend of the same payload gets the stored response (`idempotency`).

The facilitator is asked once per payment (docs/adr/0027): the gate checks the payment's
transaction itself with `exact`'s SVM rules (`svm.check_payment`: layout, amounts,
destination, fee-payer isolation, the client's signature) and only settles, since a
facilitator's /settle re-verifies (x402 requires it; `X402Options.remote_verify` restores
the /verify call for facilitators that want it). `settling.Guard` caps the payments waiting
for the facilitator and stops asking one that keeps failing (503 with Retry-After before the
handler runs); a settle that may have reached the facilitator but got no answer after the
handler ran is recorded as pending, its response delivered with `X-Svc-Settlement:
pending`, and reconciled later (`settling.Reconciler`).

The price is what the provider receives. Which token program moves `Terms.token` is told by
`Terms.pay_to` (the owner's associated token account under SPL Token or Token-2022): for an
SPL Token mint the check reads nothing. For a Token-2022 mint the gate reads the mint as it
is now (`mints`, cached: its fee schedule this epoch, its hook; docs/adr/0031), so a
transfer-fee mint's payment must leave `pay_to` the price after the fee, and a hooked mint's
may carry its hook's accounts.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import time
from dataclasses import dataclass
from typing import Any

from solders.pubkey import Pubkey
from spl.token.constants import TOKEN_2022_PROGRAM_ID, TOKEN_PROGRAM_ID
from spl.token.instructions import get_associated_token_address

from svcpay.protocol.memo import Memos
from svcpay.protocol.mints import MintReader
from svcpay.protocol.models import ProtocolError
from svcpay.protocol.pricing import OneTime, PricingEntry, Terms
from svcpay.protocol.programs import TOKEN_2022_PROGRAM, TOKEN_PROGRAM
from svcpay.protocol.replay import ReplayStore
from svcpay.schemes.decision import Admit, Offer, PaymentRequiredFn, RawHeaders, Reply, Request
from svcpay.schemes.x402_exact.facilitator_client import (
    FacilitatorUnavailable,
    X402Facilitator,
    X402FacilitatorClient,
)
from svcpay.schemes.x402_exact.idempotency import PaymentIdStore, fingerprint, shared_with
from svcpay.schemes.x402_exact.server_payment import GatePayment
from svcpay.schemes.x402_exact.settling import (
    Guard,
    OnSettlement,
    PendingSettlement,
    PendingSettlements,
    Reconciler,
)
from svcpay.schemes.x402_exact.settling import shared_with as pending_shared_with
from svcpay.schemes.x402_exact.wire import (
    PAYMENT_IDENTIFIER,
    SCHEME,
    PaymentPayload,
    PaymentPayloadV1,
    Reason,
    SettleResponse,
    caip2,
    decode_json,
    encode_header,
    parse,
    payment_identifier,
    payment_identifier_declaration,
    v1_network,
)

__all__ = [
    "X402Facilitator",
    "X402FacilitatorClient",
    "X402Options",
    "X402Server",
    "check_x402_terms",
    "terms_token_program",
]

log = logging.getLogger("svcpay.gate.x402")
RETRY_AFTER_SECS = 5


@dataclass(frozen=True)
class X402Options:
    """How the gate works with its x402 facilitator (docs/adr/0027).

    Args:
        remote_verify: also call the facilitator's /verify before the handler runs (the
            gate's own check always runs first); for facilitators whose /settle does not
            re-verify, or that want to see every payment twice.
        max_in_flight: payments admitted and not yet settled, at most; past it, 503.
        trip_after: consecutive facilitator failures that open the breaker (503 at once,
            for `retry_after` seconds, instead of running handlers that cannot be paid).
        retry_after: the Retry-After of those 503s, in seconds.
        pending: where settlements left without an answer wait to be reconciled (default:
            beside the replay store, `settling.shared_with`).
        on_settlement: told when a payment becomes pending and how each one ends.
    """

    remote_verify: bool = False
    max_in_flight: int = 256
    trip_after: int = 3
    retry_after: int = RETRY_AFTER_SECS
    pending: PendingSettlements | None = None
    on_settlement: OnSettlement | None = None


def check_x402_terms(terms: Terms) -> None:
    """ValueError naming what to fix when `terms` cannot be offered over x402."""
    if terms.owner is None:
        raise ValueError("x402 needs Terms.owner, the wallet that owns Terms.pay_to")
    if terms.fee_payer is None:
        raise ValueError(
            "x402 needs Terms.fee_payer, the facilitator's fee payer (its GET /supported "
            "lists it as extra.feePayer)"
        )
    caip2(terms.network)  # ValueError for a network x402 has no id for
    try:
        owner, mint, pay_to = (
            Pubkey.from_string(a) for a in (terms.owner, terms.token, terms.pay_to)
        )
        Pubkey.from_string(terms.fee_payer)
    except ValueError as e:
        raise ValueError("Terms.owner, fee_payer, token and pay_to must be addresses") from e
    atas = {
        get_associated_token_address(owner, mint, p)
        for p in (TOKEN_PROGRAM_ID, TOKEN_2022_PROGRAM_ID)
    }
    if pay_to not in atas:
        raise ValueError(
            f"x402 pays the associated token account of payTo, but Terms.pay_to {terms.pay_to} "
            f"is not the associated token account of owner {terms.owner} for mint "
            f"{terms.token} (that is {get_associated_token_address(owner, mint)}): receive "
            "into the owner's associated token account, or leave Terms.owner unset to turn "
            "x402 off"
        )
    if not 0 < terms.max_timeout_seconds <= 86_400:
        raise ValueError("Terms.max_timeout_seconds must be within 1 to 86400")


def terms_token_program(terms: Terms) -> Pubkey:
    """The token program of `terms.token`, as `terms.pay_to` tells it (the owner's
    associated token account under that program; `check_x402_terms` holds): Token-2022 when
    it is that program's, else SPL Token."""
    assert terms.owner is not None
    owner, mint = Pubkey.from_string(terms.owner), Pubkey.from_string(terms.token)
    t22 = get_associated_token_address(owner, mint, TOKEN_2022_PROGRAM_ID)
    return TOKEN_2022_PROGRAM if str(t22) == terms.pay_to else TOKEN_PROGRAM


def check_mints(terms: Terms, mints: MintReader | None, what: str) -> bool:
    """Whether payments in `terms.token` need the mint read (Token-2022); ValueError when
    they do and there is no `mints` to read it with."""
    if terms_token_program(terms) != TOKEN_2022_PROGRAM:
        return False
    if mints is None:
        raise ValueError(
            f"Terms.token {terms.token} is a Token-2022 mint: {what} needs `mints` (e.g. "
            "svcpay.gate.chain.ChainMints(AsyncClient(rpc_url))) to read its transfer fee "
            "and hook"
        )
    return True


class X402Server:
    """x402 on one gate (a `GateScheme`). `facilitator` defaults to an
    `X402FacilitatorClient` of `Terms.facilitator`; `payment_ids` to a store beside
    `replay`'s (`idempotency.shared_with`)."""

    name = "x402"
    headers = (b"payment-signature", b"x-payment")

    def __init__(
        self,
        terms: Terms,
        memos: Memos,
        replay: ReplayStore,
        facilitator: X402Facilitator | None = None,
        *,
        payment_ids: PaymentIdStore | None = None,
        options: X402Options | None = None,
        mints: MintReader | None = None,
    ) -> None:
        check_x402_terms(terms)
        self.token_program = terms_token_program(terms)
        self.token_2022 = check_mints(terms, mints, "x402")
        self.mints, self.mint = mints, Pubkey.from_string(terms.token)
        if facilitator is None:
            if terms.facilitator is None:
                raise ValueError("x402 needs a facilitator: set Terms.facilitator (its URL)")
            facilitator = X402FacilitatorClient(terms.facilitator)
        self.terms, self.memos, self.replay, self.facilitator = terms, memos, replay, facilitator
        self.payment_ids = payment_ids if payment_ids is not None else shared_with(replay)
        self.network = caip2(terms.network)
        self.network_v1 = v1_network(terms.network)
        self._declaration = {PAYMENT_IDENTIFIER: payment_identifier_declaration()}
        options = options or X402Options()
        if options.max_in_flight < 1 or options.trip_after < 1 or options.retry_after < 1:
            raise ValueError("X402Options: max_in_flight, trip_after, retry_after must be >= 1")
        self.options = options
        self.fee_payer = Pubkey.from_string(str(terms.fee_payer))
        self.guard = Guard(options.max_in_flight, options.trip_after, options.retry_after)
        self.pending = (
            options.pending if options.pending is not None else pending_shared_with(replay)
        )
        self.reconciler = Reconciler(
            self.pending, facilitator.settle, replay, on_settlement=options.on_settlement
        )

    # -- terms ---------------------------------------------------------------------------
    def requirements(self, entry: OneTime, memo: str) -> dict[str, Any]:
        """The v2 `PaymentRequirements` of `entry` under `memo` (JSON, as on the wire)."""
        terms = self.terms
        return {
            "scheme": SCHEME,
            "network": self.network,
            "asset": terms.token,
            "amount": str(entry.amount),
            "payTo": terms.owner,
            "maxTimeoutSeconds": terms.max_timeout_seconds,
            "extra": {"feePayer": terms.fee_payer, "memo": memo},
        }

    def requirements_v1(self, entry: OneTime, memo: str, request: Request) -> dict[str, Any]:
        terms = self.terms
        return {
            "scheme": SCHEME,
            "network": self.network_v1,
            "maxAmountRequired": str(entry.amount),
            "resource": request.url,
            "description": "",
            "mimeType": "",
            "payTo": terms.owner,
            "maxTimeoutSeconds": terms.max_timeout_seconds,
            "asset": terms.token,
            "extra": {"feePayer": terms.fee_payer, "memo": memo},
        }

    def payment_required(
        self, request: Request, memos: list[tuple[OneTime, str]], error: str | None
    ) -> dict[str, Any]:
        """The `PAYMENT-REQUIRED` object: the one-time options under their memos."""
        required: dict[str, Any] = {
            "x402Version": 2,
            "resource": {"url": request.url},
            "accepts": [self.requirements(entry, memo) for entry, memo in memos],
            "extensions": self._declaration,
        }
        if error:
            required["error"] = error
        return required

    def payment_required_headers(
        self, request: Request, memos: list[tuple[OneTime, str]], error: str | None
    ) -> RawHeaders:
        if not memos:
            return []
        value = encode_header(self.payment_required(request, memos, error))
        return [(b"payment-required", value.encode()), (b"cache-control", b"no-store")]

    def offer(self, offer: Offer) -> RawHeaders:
        return self.payment_required_headers(
            offer.request, offer.memos, offer.reason or offer.message
        )

    # -- a payment -----------------------------------------------------------------------
    def claims(self, request: Request, pricing: list[PricingEntry]) -> bool:
        """`PAYMENT-SIGNATURE`, or an `X-PAYMENT` that is an x402 payload, on a route with a
        one-time price."""
        if not any(isinstance(e, OneTime) for e in pricing):
            return False
        if b"payment-signature" in request.headers:
            return True
        pay = request.headers.get(b"x-payment")
        return pay is not None and x402_version(pay) is not None

    async def admit(
        self, request: Request, pricing: list[PricingEntry], payment_required: PaymentRequiredFn
    ) -> Reply | Admit:
        signature = request.headers.get(b"payment-signature")
        if signature is not None:
            return await self.admit_payment(request, pricing, signature, 2, payment_required)
        pay = request.headers[b"x-payment"]
        version = x402_version(pay)
        if version != 1:
            return Reply.json(
                400,
                {
                    "error": "InvalidPaymentHeader",
                    "message": f"X-PAYMENT carries x402 version {version}; send version 2 in "
                    "PAYMENT-SIGNATURE",
                },
            )
        return await self.admit_payment(request, pricing, pay, 1, payment_required)

    async def admit_payment(
        self,
        request: Request,
        pricing: list[PricingEntry],
        header: bytes,
        version: int,
        payment_required: PaymentRequiredFn,
    ) -> Reply | Admit:
        """Admits a request paying with x402 `version` (`header` is its payment header)."""
        name = "PAYMENT-SIGNATURE" if version == 2 else "X-PAYMENT"
        payload: PaymentPayload | PaymentPayloadV1
        try:
            data = decode_json(header.strip())
            if version == 2:
                payload = parse(PaymentPayload, data)
                pid = payment_identifier(payload.extensions)
            else:
                payload, pid = parse(PaymentPayloadV1, data), None
        except ProtocolError as e:
            return Reply.json(400, {"error": "InvalidPaymentHeader", "message": f"{name}: {e}"})
        # Looked up before verification: a resend may no longer verify once settled.
        if pid is not None and (
            stored := await self.payment_ids.begin(request.resource, pid, fingerprint(data))
        ):
            return stored
        payment = GatePayment(self, request, pricing, payment_required, version, data, pid)
        try:
            decision = await payment.check(payload.payload.transaction, payload)
        except BaseException:
            await payment.abandon_id()
            raise
        if isinstance(decision, Reply):
            await payment.abandon_id()
        return decision

    async def settle(
        self, payment: GatePayment, *, served: bool
    ) -> SettleResponse | Reply | PendingSettlement:
        """Settles `payment` (already checked and claimed): its receipt; the reply that
        replaces the response when settling failed (the claim is released); or, when the
        facilitator may have the payment but gave no answer, its pending record (the claim
        is kept). `served`: whether the handler has run."""
        try:
            receipt = await self.facilitator.settle(
                payment.version, payment.data, payment.requirements
            )
        except FacilitatorUnavailable as e:
            self.guard.failed()
            if e.maybe_sent:
                return await self.park(payment, served, str(e))
            await payment.release()
            return self.unavailable(e)
        self.guard.succeeded()
        if receipt.error_reason == Reason.SETTLEMENT_PENDING:
            return await self.park(payment, served, receipt.error_message or "not yet confirmed")
        if not receipt.success:
            await payment.release()
            why = receipt.error_message or receipt.error_reason or "the facilitator did not settle"
            reply = payment.refuse(receipt.error_reason or Reason.UNEXPECTED_SETTLE_ERROR, why)
            reply.headers.extend(self.receipt_headers(receipt, payment.version))
            return reply
        payment.done()
        return receipt

    async def park(self, payment: GatePayment, served: bool, why: str) -> PendingSettlement:
        """Records `payment` as pending (its settle may be under way at the facilitator)."""
        assert payment.claim is not None
        now = time.time()
        entry = PendingSettlement(
            payment.claim,
            payment.version,
            payment.data,
            payment.requirements,
            payment.request.resource,
            now,
            next_at=now + self.options.retry_after,
        )
        try:
            await self.pending.add(entry)
        except Exception as e:  # its database is away: the facilitator still finishes the
            # settlement durably and its payment.settled event says so; the answer stands
            log.warning(
                "x402 settle for %s is pending, and recording it failed (%s): "
                "the facilitator's payment.settled event is its only record",
                payment.request.resource,
                e,
            )
        payment.done()
        log.warning(
            "x402 settle for %s got no answer (%s): %s; reconciling it later",
            payment.request.resource,
            why,
            "its response is served" if served else "answering 503",
        )
        await self.reconciler.notify("pending", entry)
        self.reconciler.poke()
        return entry

    def unavailable(self, error: FacilitatorUnavailable | str) -> Reply:
        return unavailable(error, self.options.retry_after)

    @staticmethod
    def receipt_headers(receipt: SettleResponse, version: int) -> RawHeaders:
        value = encode_header(receipt).encode()
        headers = [(b"payment-response", value)]
        if version == 1:
            headers.append((b"x-payment-response", value))
        return headers


def unavailable(error: FacilitatorUnavailable | str, retry_after: int = RETRY_AFTER_SECS) -> Reply:
    if isinstance(error, FacilitatorUnavailable):
        log.warning("x402 facilitator unavailable: %s", error)
        message = f"the payment facilitator cannot be reached ({error}); retry shortly"
    else:
        message = f"payments cannot be settled now ({error}); retry shortly"
    return Reply.json(
        503,
        {"error": "FacilitatorUnavailable", "message": message},
        [(b"retry-after", str(retry_after).encode())],
    )


def x402_version(header: bytes) -> int | None:
    """`x402Version` of an `X-PAYMENT` value that is an x402 payload (base64 of a JSON object
    with that key), None for anything else (svcpay's proof, or garbage its parser names)."""
    try:
        raw = base64.b64decode(header.strip(), validate=True)
    except (binascii.Error, ValueError):
        return None
    if b'"x402Version"' not in raw:  # cheap: svcpay proofs never carry the key
        return None
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    version = data.get("x402Version") if isinstance(data, dict) else None
    return version if isinstance(version, int) and not isinstance(version, bool) else -1
