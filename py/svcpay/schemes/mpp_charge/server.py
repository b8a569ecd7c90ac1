"""The gate's side of MPP Solana `charge` (an intent of `schemes.payment_auth`; ADR 0029).

Every 402 of a route with a one-time price carries, per price, a `WWW-Authenticate: Payment
method="solana", intent="charge"` challenge whose `request` is the charge (amount in base
units, `currency` the mint, `recipient` the wallet whose associated token account receives,
`externalId` the same HMAC memo svcpay's body and x402 carry, bound to the resource and
price, and `methodDetails` with the network, decimals, token program and the facilitator's
fee payer). With `push` on, a second challenge per price has `feePayer: false`, for payers
that send the transfer themselves.

A credential (`Authorization: Payment`) is admitted when the challenge is ours (its HMAC
id), unexpired, for this route's price and resource, and its payload pays it:
- `{"type": "transaction"}` (pull): the gate checks the transaction itself
  (`svm.check_charge`), claims it (concurrent copies: one is served), runs the handler and,
  below 400, has the facilitator co-sign, send and confirm it (`POST /mpp/charge/settle`);
  a refusal there replaces the response with a 402. `OneTime(settle="before")` settles
  first.
- `{"type": "signature"}` (push, only for a `feePayer: false` challenge): the facilitator
  finds the transaction at `confirmed`, checks it the same way and records it once
  (`POST /mpp/charge/verify`) before the handler runs.
A paid answer carries `Payment-Receipt` (`{status, method, timestamp, reference,
challengeId, externalId}`). On a non-idempotent method (POST, PUT, PATCH, DELETE) an
`Idempotency-Key` with the same credential gets the first paid answer again (with another
credential, a 409), kept beside the replay store as x402's payment identifiers are.
Failures are 402 problems of the draft's types with fresh challenges. The facilitator's
back-pressure (`settling.Guard`) is the x402 path's: at most that many payments wait for
it, and a breaker answers 503 while it keeps failing.

The charge's `amount` is what the recipient receives. For a Token-2022 mint (`tokenProgram`)
the gate reads the mint as it is now (`mints`, cached; docs/adr/0031): a transfer-fee mint's
transfer must leave the recipient the amount after the fee (the client sends
`gross_for_net(amount)`), a hooked mint's may carry its hook's accounts.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from solders.message import to_bytes_versioned
from solders.pubkey import Pubkey
from solders.transaction import VersionedTransaction

from svcpay.protocol import mpp
from svcpay.protocol.memo import Memos, MemoTerms
from svcpay.protocol.mints import MintReader, MintUnavailable
from svcpay.protocol.models import ProtocolError
from svcpay.protocol.pricing import OneTime, PricingEntry, Terms
from svcpay.protocol.programs import TOKEN_2022_PROGRAM, TOKEN_PROGRAM
from svcpay.protocol.replay import ReplayStore
from svcpay.protocol.token2022 import MintAtEpoch
from svcpay.schemes.decision import Admit, RawHeaders, Reply, Request
from svcpay.schemes.mpp_charge.facilitator_client import ChargeSettler, FacilitatorUnavailable
from svcpay.schemes.mpp_charge.svm import ChargeRefused, check_charge, require_fully_signed
from svcpay.schemes.mpp_charge.wire import (
    INTENT,
    METHOD,
    NETWORKS,
    ChargeAnswer,
    ChargeRequest,
    SettleCharge,
    VerifyCharge,
    parse_charge_request,
)
from svcpay.schemes.x402_exact.idempotency import PaymentIdStore
from svcpay.schemes.x402_exact.settling import Guard

log = logging.getLogger("svcpay.gate.mpp")
CHALLENGE_SECS = 300
IDEMPOTENT = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})
MAX_IDEMPOTENCY_KEY = 255
CLAIM_MARGIN_SECS = 60


class ChargeIntent:
    """MPP `charge` on one gate (see the module's docstring)."""

    method, intent = METHOD, INTENT

    def __init__(
        self,
        terms: Terms,
        memos: Memos,
        issuer: mpp.ChallengeIssuer,
        replay: ReplayStore,
        facilitator: ChargeSettler,
        guard: Guard,
        *,
        decimals: int = 6,
        token_program: str = str(TOKEN_PROGRAM),
        push: bool = True,
        challenge_secs: int = CHALLENGE_SECS,
        clock: Callable[[], float] = time.time,
        payment_ids: PaymentIdStore | None = None,
        mints: MintReader | None = None,
    ) -> None:
        """`mints` reads a Token-2022 mint (`token_program`) as it is now; required then."""
        if terms.owner is None or terms.fee_payer is None:
            raise ValueError("MPP charge needs Terms.owner and Terms.fee_payer, as x402 does")
        self.token_2022 = token_program == str(TOKEN_2022_PROGRAM)
        if self.token_2022 and mints is None:
            raise ValueError(
                f"Terms.token {terms.token} is a Token-2022 mint: MPP charge needs `mints` "
                "to read its transfer fee and hook"
            )
        self.mints, self.mint = mints, Pubkey.from_string(terms.token)
        self.terms, self.memos, self.issuer, self.replay = terms, memos, issuer, replay
        self.facilitator, self.guard = facilitator, guard
        self.decimals, self.token_program, self.push = decimals, token_program, push
        self.challenge_secs, self.clock = challenge_secs, clock
        self.payment_ids = payment_ids
        self.fee_payer = Pubkey.from_string(terms.fee_payer)
        self.network = NETWORKS.get(terms.network, "localnet")

    # -- challenges ------------------------------------------------------------------------
    def serves(self, pricing: list[PricingEntry]) -> bool:
        return any(isinstance(e, OneTime) for e in pricing)

    def request_json(
        self, request: Request, entry: OneTime, *, pull: bool, memo: str | None = None
    ) -> dict[str, Any]:
        """The charge's `request`; `memo` (bound to the resource and price) is issued here
        unless given."""
        terms = self.terms
        if memo is None:
            memo = self.memos.issue(
                MemoTerms(request.resource, str(entry.amount), terms.pay_to, terms.token)
            )
        details: dict[str, Any] = {
            "network": self.network,
            "decimals": self.decimals,
            "tokenProgram": self.token_program,
            "feePayer": pull,
        }
        if pull:
            details["feePayerKey"] = terms.fee_payer
        asked: dict[str, Any] = {
            "amount": str(entry.amount),
            "currency": terms.token,
            "recipient": terms.owner,
            "externalId": memo,
            "methodDetails": details,
        }
        if entry.description:
            asked["description"] = entry.description
        return asked

    def challenges(
        self,
        request: Request,
        pricing: list[PricingEntry],
        memos: Mapping[Any, str] | None = None,
    ) -> RawHeaders:
        """One challenge per one-time price to pull (and one to push), each bound to the
        price's memo: the one svcpay's body issued when given, else one issued here."""
        expires = int(self.clock()) + self.challenge_secs
        terms = self.terms
        headers: RawHeaders = []
        for entry in pricing:
            if not isinstance(entry, OneTime):
                continue
            memo = (memos or {}).get(entry) or self.memos.issue(
                MemoTerms(request.resource, str(entry.amount), terms.pay_to, terms.token)
            )
            for pull in (True, False) if self.push else (True,):
                asked = self.request_json(request, entry, pull=pull, memo=memo)
                challenge = self.issuer.issue(
                    METHOD, INTENT, asked, expires=expires, description=entry.description
                )
                headers.append((b"www-authenticate", challenge.header().encode()))
        return headers

    # -- a credential ----------------------------------------------------------------------
    async def admit(
        self, request: Request, pricing: list[PricingEntry], header: bytes
    ) -> Reply | Admit:
        key = request.headers.get(b"idempotency-key")
        if key is None or request.method in IDEMPOTENT or self.payment_ids is None:
            return await self._admit(request, pricing, header)
        if not 0 < len(key) <= MAX_IDEMPOTENCY_KEY:
            return Reply.json(
                400,
                {
                    "error": "InvalidIdempotencyKey",
                    "message": f"Idempotency-Key must be 1 to {MAX_IDEMPOTENCY_KEY} bytes",
                },
            )
        pid = "idem:" + key.decode("latin-1")
        fingerprint = hashlib.sha256(header).digest()
        if (stored := await self.payment_ids.begin(request.resource, pid, fingerprint)) is not None:
            return stored
        try:
            decided = await self._admit(request, pricing, header)
        except BaseException:
            await self.payment_ids.abandon(request.resource, pid)
            raise
        if isinstance(decided, _Charge):
            decided.keep_as(self.payment_ids, request.resource, pid)
        else:
            await self.payment_ids.abandon(request.resource, pid)
        return decided

    async def _admit(
        self, request: Request, pricing: list[PricingEntry], header: bytes
    ) -> Reply | Admit:
        refuse = _Refuser(self, request, pricing)
        try:
            credential = mpp.parse_credential(header.decode("latin-1"))
        except mpp.MppError as e:
            return refuse(e.problem, str(e))
        echo = credential.challenge
        if not self.issuer.recognises(echo):
            return refuse("invalid-challenge", "the challenge was not issued here")
        expires = mpp.parse_rfc3339(echo.expires) if echo.expires else None
        if expires is None or expires < self.clock():
            return refuse("payment-expired", "the challenge has expired: pay a fresh one")
        try:
            charge = parse_charge_request(echo.request_json)
        except (ProtocolError, mpp.MppError) as e:
            return refuse("invalid-challenge", str(e))
        terms = self.terms
        entry = next(
            (e for e in pricing if isinstance(e, OneTime) and str(e.amount) == charge.amount),
            None,
        )
        stale = self.memos.check(
            charge.external_id,
            MemoTerms(request.resource, charge.amount, terms.pay_to, terms.token),
        )
        if entry is None or stale is not None:
            why = stale or f"this route does not charge {charge.amount}"
            return refuse("invalid-challenge", f"the challenge is for other terms: {why}")
        payload = credential.payload
        kind = payload.get("type")
        # A transaction on either challenge: co-signed as fee payer (`feePayer: true`), or
        # broadcast as the client signed it, fee and all (`feePayer: false`: the Solana
        # charge draft lets clients send either credential type then).
        if kind == "transaction":
            return await self._pull(refuse, entry, echo, charge, payload.get("transaction"))
        if kind == "signature" and not charge.method_details.fee_payer:
            return await self._push(refuse, echo, charge, payload.get("signature"))
        if kind == "signature":
            return refuse("malformed-credential", "this challenge does not take a pushed signature")
        return refuse("malformed-credential", "payload.type must be transaction or signature")

    async def _pull(
        self,
        refuse: _Refuser,
        entry: OneTime,
        echo: mpp.Challenge,
        charge: ChargeRequest,
        encoded: Any,
    ) -> Reply | Admit:
        if not isinstance(encoded, str) or len(encoded) > 4096:
            return refuse("malformed-credential", "payload.transaction must be base64")
        try:
            tx = VersionedTransaction.from_bytes(base64.b64decode(encoded, validate=True))
        except (binascii.Error, ValueError) as e:
            return refuse("malformed-credential", f"payload.transaction is not one: {e}")
        mint: MintAtEpoch | None = None
        if self.token_2022:  # what the mint does now: its fee, its hook (SPL: nothing)
            assert self.mints is not None
            try:
                mint = await self.mints.at_epoch(self.mint)
            except MintUnavailable as e:
                return _unavailable(f"the mint cannot be read: {e}", self.guard.retry_after)
            except ValueError as e:
                return refuse("verification-failed", f"{self.terms.token} is no mint: {e}")
        ours = charge.method_details.fee_payer  # else the client pays the fee: as signed
        try:
            check_charge(
                tx,
                mint=charge.currency,
                recipient=charge.recipient,
                amount=int(charge.amount),
                decimals=charge.method_details.decimals,
                memo=charge.external_id,
                fee_payer=self.fee_payer if ours else None,
                mint_now=mint,
            )
            if not ours:
                require_fully_signed(tx)
        except ChargeRefused as e:
            return refuse("verification-failed", str(e))
        key = "tx:" + hashlib.sha256(to_bytes_versioned(tx.message)).hexdigest()
        claimed = await self._claim(refuse, key)
        if isinstance(claimed, Reply):
            return claimed
        paid = _Charge(
            self, refuse, key, echo, charge, SettleCharge(request=charge, transaction=encoded)
        )
        if entry.settle == "before":
            receipt = await paid.settle(served=False)
            if isinstance(receipt, Reply):
                return receipt
        return paid

    async def _push(
        self, refuse: _Refuser, echo: mpp.Challenge, charge: ChargeRequest, signature: Any
    ) -> Reply | Admit:
        if not isinstance(signature, str) or not 64 <= len(signature) <= 90:
            return refuse("malformed-credential", "payload.signature must be a base58 signature")
        key = "sig:" + signature
        claimed = await self._claim(refuse, key)
        if isinstance(claimed, Reply):
            return claimed
        paid = _Charge(self, refuse, key, echo, charge, None)
        try:
            answer = await self.facilitator.verify(
                VerifyCharge(request=charge, signature=signature)
            )
        except FacilitatorUnavailable as e:
            self.guard.failed()
            await paid.release()
            return _unavailable(str(e), self.guard.retry_after)
        except BaseException:
            await paid.release()
            raise
        self.guard.succeeded()
        paid.done()
        if not answer.success:
            if answer.problem:  # the facilitator recorded nothing: the signature stays unused
                await paid.release()
            return refuse(answer.problem or "verification-failed", answer.message)
        paid.receipt = answer
        return paid

    async def _claim(self, refuse: _Refuser, key: str) -> Reply | None:
        if (busy := self.guard.refuses()) is not None:
            return _unavailable(busy, self.guard.retry_after)
        expires = int(self.clock()) + self.memos.ttl_secs + CLAIM_MARGIN_SECS
        if not await self.replay.claim(key, expires):
            return refuse("verification-failed", "this payment was already used")
        self.guard.in_flight += 1
        return None


class _Refuser:
    """A 402 problem with fresh challenges for the request being answered."""

    def __init__(self, intent: ChargeIntent, request: Request, pricing: list[PricingEntry]) -> None:
        self.intent, self.request, self.pricing = intent, request, pricing

    def __call__(self, kind: str, detail: str) -> Reply:
        body = mpp.problem(kind, detail)
        headers = (
            self.intent.challenges(self.request, self.pricing) if body["status"] == 402 else []
        )
        reply = Reply.json(body["status"], body, [*headers, (b"cache-control", b"no-store")])
        reply.headers[0] = (b"content-type", b"application/problem+json")
        return reply


class _Charge(Admit):
    """A checked charge whose handler runs: settled (pull) when the handler answers below
    400, or already recorded (push); the receipt goes on the answer."""

    wants_start = True

    def __init__(
        self,
        intent: ChargeIntent,
        refuse: _Refuser,
        key: str,
        echo: mpp.Challenge,
        charge: ChargeRequest,
        pull: SettleCharge | None,
    ) -> None:
        self.intent, self.refuse, self.key, self.echo, self.charge = (
            intent,
            refuse,
            key,
            echo,
            charge,
        )
        self.pull = pull
        self.receipt: ChargeAnswer | None = None
        self.pending = False
        self.claimed, self.counted = True, True
        self.kept: tuple[PaymentIdStore, str, str] | None = None
        self.sent: RawHeaders = []

    def keep_as(self, store: PaymentIdStore, scope: str, pid: str) -> None:
        """Store the paid answer under the request's Idempotency-Key."""
        self.kept, self.capture = (store, scope, pid), True

    def done(self) -> None:
        if self.counted:
            self.counted = False
            self.intent.guard.in_flight -= 1

    async def release(self) -> None:
        self.done()
        if self.claimed:
            self.claimed = False
            await self.intent.replay.release(self.key)

    async def settle(self, *, served: bool) -> ChargeAnswer | Reply:
        intent = self.intent
        assert self.pull is not None
        try:
            answer = await intent.facilitator.settle(self.pull)
        except FacilitatorUnavailable as e:
            intent.guard.failed()
            if e.maybe_sent and served:
                return self._pending(str(e))
            if e.maybe_sent:  # before the handler: the claim stays, the client must not repay
                self.done()
                log.warning("MPP charge settle got no answer (%s): not served", e)
                return _unavailable(
                    "the payment was sent for settlement but not confirmed; do not pay again yet",
                    intent.guard.retry_after,
                )
            await self.release()
            return _unavailable(str(e), intent.guard.retry_after)
        except BaseException:
            await self.release()
            raise
        intent.guard.succeeded()
        if answer.pending:
            if served:
                return self._pending(answer.message)
            self.done()  # the claim stays: the transaction may still land
            return _unavailable(answer.message, intent.guard.retry_after)
        if not answer.success:
            await self.release()
            return self.refuse(answer.problem or "verification-failed", answer.message)
        self.done()
        self.receipt = answer
        return answer

    def _pending(self, why: str) -> ChargeAnswer:
        self.done()
        self.pending = True
        log.warning(
            "MPP charge for %s got no settle answer (%s): its response is served; the "
            "facilitator finishes the settlement and its payment.settled event says so",
            self.charge.external_id,
            why,
        )
        return ChargeAnswer(success=False, pending=True, message=why)

    async def start(self, status: int, headers: RawHeaders) -> Reply | RawHeaders:
        if self.receipt is None and not self.pending:
            if status >= 400:  # not settled: the client keeps its money
                return []
            result = await self.settle(served=True)
            if isinstance(result, Reply):
                return result
        if self.pending:
            self.sent = [*headers, (b"x-svc-settlement", b"pending")]
            return [(b"x-svc-settlement", b"pending")]
        assert self.receipt is not None
        receipt = mpp.Receipt(
            METHOD,
            self.receipt.reference,
            int(self.intent.clock()),
            challenge_id=self.echo.id,
            extra={"externalId": self.charge.external_id},
        )
        extra = [(b"payment-receipt", receipt.header().encode())]
        self.sent = [*headers, *extra]
        return extra

    async def end(self, status: int | None, body: bytes | None) -> None:
        paid = self.receipt is not None or self.pending
        if not paid:  # the handler or settling failed
            await self.release()
        if self.kept is not None:
            store, scope, pid = self.kept
            if paid and status is not None and body is not None and self.sent:
                await store.finish(scope, pid, status, self.sent, body)
            else:
                await store.abandon(scope, pid)


def _unavailable(why: str, retry_after: int) -> Reply:
    return Reply.json(
        503,
        {"error": "FacilitatorUnavailable", "message": f"payments cannot be settled now ({why})"},
        [(b"retry-after", str(retry_after).encode())],
    )
