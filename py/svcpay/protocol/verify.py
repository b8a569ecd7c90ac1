"""Offline verification of a payment proof against the terms this server asked for."""

from __future__ import annotations

import time
from collections.abc import Collection
from dataclasses import dataclass

from svcpay.protocol.memo import Memos, MemoTerms
from svcpay.protocol.models import PaymentOption
from svcpay.protocol.proof import PaymentProof
from svcpay.protocol.replay import ReplayStore

CLOCK_SKEW_SECS = 60


@dataclass(frozen=True)
class Verdict:
    ok: bool
    reason: str = ""


async def verify_payment_proof_reason(
    proof: PaymentProof,
    terms: PaymentOption,
    *,
    resource: str,
    trusted_facilitators: Collection[str],
    memos: Memos,
    replay: ReplayStore,
    now: int | None = None,
) -> Verdict:
    """Checks, cheapest first: trusted signer and signature, network, payTo, token, amount
    (at least the price), the memo this server issued for `resource`, validity times, and
    last (it records the use) that the settled transaction was never used before."""
    now = int(time.time()) if now is None else now
    if proof.facilitator not in trusted_facilitators:
        return Verdict(False, "the proof is signed by a facilitator this server does not trust")
    if not proof.signature_valid():
        return Verdict(False, "the proof's signature does not verify")
    for field, want, got in (
        ("network", terms.network, proof.network),
        ("payTo", terms.pay_to, proof.pay_to),
        ("token", terms.token, proof.token),
    ):
        if want != got:
            return Verdict(False, f"the proof pays {field} {got}, the terms ask for {want}")
    if int(proof.amount) < terms.amount_units:
        return Verdict(False, f"the proof pays {proof.amount}, the price is {terms.amount}")
    memo_terms = MemoTerms(resource, terms.amount, terms.pay_to, terms.token)
    if why := memos.check(proof.memo, memo_terms, now):
        return Verdict(False, why)
    if proof.issued_at > now + CLOCK_SKEW_SECS:
        return Verdict(False, "the proof is issued in the future")
    if proof.expires_at < now:
        return Verdict(False, "the proof has expired")
    if not await replay.claim(
        f"{proof.network}:{proof.transaction}", proof.expires_at + CLOCK_SKEW_SECS
    ):
        return Verdict(False, "the proof was already used")
    return Verdict(True)


async def verify_payment_proof(proof: PaymentProof, terms: PaymentOption, **kwargs: object) -> bool:
    """`verify_payment_proof_reason(...).ok` (the spec's boolean form)."""
    return (await verify_payment_proof_reason(proof, terms, **kwargs)).ok  # type: ignore[arg-type]
