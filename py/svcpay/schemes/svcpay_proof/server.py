"""The gate's side of svcpay proofs: a valid proof is claimed in the replay store before the
handler runs (racing copies cannot both be served) and released when the handler fails
(status >= 400 or raised), so the client is not charged for a failed response."""

from __future__ import annotations

from svcpay.protocol.headers import SCHEME_EXACT
from svcpay.protocol.memo import Memos
from svcpay.protocol.models import PaymentOption, ProtocolError
from svcpay.protocol.pricing import OneTime, PricingEntry, Terms
from svcpay.protocol.proof import parse_payment_proof
from svcpay.protocol.replay import ReplayStore
from svcpay.protocol.verify import RemoteVerifier, verify_payment_proof_reason
from svcpay.schemes.decision import Admit, Offer, PaymentRequiredFn, RawHeaders, Reply, Request


class ProofScheme:
    """svcpay's own dialect: a facilitator's signed proof in `X-PAYMENT` (a `GateScheme`;
    registered after x402, which claims the `X-PAYMENT` values that are x402 payloads)."""

    name = "svcpay"
    headers = (b"x-payment",)

    def __init__(
        self,
        terms: Terms,
        memos: Memos,
        trusted: frozenset[str],
        replay: ReplayStore,
        remote: RemoteVerifier | None,
    ) -> None:
        self.terms, self.memos, self.trusted = terms, memos, trusted
        self.replay, self.remote = replay, remote
        self._options: dict[OneTime, PaymentOption] = {}

    def claims(self, request: Request, pricing: list[PricingEntry]) -> bool:
        return b"x-payment" in request.headers and any(isinstance(e, OneTime) for e in pricing)

    def offer(self, offer: Offer) -> RawHeaders:
        return []  # svcpay's terms are the 402's body, which the core builds

    async def admit(
        self,
        request: Request,
        pricing: list[PricingEntry],
        payment_required: PaymentRequiredFn,
    ) -> Reply | Admit:
        header = request.headers[b"x-payment"]
        entry = next(e for e in pricing if isinstance(e, OneTime))
        try:
            proof = parse_payment_proof(header)
        except ProtocolError as e:
            return payment_required(request, pricing, "InvalidPaymentProof", e.reason, None)
        verdict = await verify_payment_proof_reason(
            proof,
            self._option(entry),
            resource=request.resource,
            trusted_facilitators=self.trusted,
            memos=self.memos,
            replay=self.replay,
            remote=self.remote,
        )
        if not verdict.ok:
            return payment_required(request, pricing, "InvalidPaymentProof", verdict.reason, None)
        return _Claimed(self.replay, proof.replay_key)

    def _option(self, entry: OneTime) -> PaymentOption:
        """The terms a proof for `entry` must meet (validated once; the memo is checked
        from the proof itself, bound to the resource and price)."""
        option = self._options.get(entry)
        if option is None:
            option = PaymentOption(
                scheme=SCHEME_EXACT,
                network=self.terms.network,
                token=self.terms.token,
                amount=str(entry.amount),
                pay_to=self.terms.pay_to,
                memo="-",
            )
            self._options[entry] = option
        return option


class _Claimed(Admit):
    """A claimed proof: released unless the handler answered below 400."""

    __slots__ = ("key", "replay")

    def __init__(self, replay: ReplayStore, key: str) -> None:
        self.replay, self.key = replay, key

    async def end(self, status: int | None, body: bytes | None) -> None:
        if status is None or status >= 400:
            await self.replay.release(self.key)
