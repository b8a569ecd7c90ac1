"""Offline verification of a payment proof against the terms this server asked for."""

from __future__ import annotations

import time
from collections.abc import Collection
from dataclasses import dataclass
from typing import Protocol

import httpx

from svcpay.protocol.memo import Memos, MemoTerms
from svcpay.protocol.models import PaymentOption
from svcpay.protocol.proof import PaymentProof
from svcpay.protocol.replay import ReplayStore

CLOCK_SKEW_SECS = 60


class RemoteVerifier(Protocol):
    async def check(self, proof: PaymentProof) -> str | None:
        """None if the facilitator vouches for `proof`, else its reason."""
        ...


class FacilitatorVerifier:
    """Verification through the facilitator's `POST /verify` (instead of the offline
    signature check): it also confirms the settled transaction succeeded on chain."""

    def __init__(self, http: httpx.AsyncClient) -> None:
        self.http = http  # with base_url = the facilitator's URL

    async def check(self, proof: PaymentProof) -> str | None:
        try:
            reply = await self.http.post("/verify", json={"proof": proof.to_json_dict()})
            body = reply.json()
        except (httpx.HTTPError, ValueError):
            return "the facilitator could not be asked to verify the proof"
        if reply.status_code != 200 or not isinstance(body, dict):
            return f"the facilitator refused to verify the proof ({reply.status_code})"
        return (
            None
            if body.get("valid") is True
            else str(body.get("reason") or "rejected by the facilitator")
        )


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
    remote: RemoteVerifier | None = None,
) -> Verdict:
    """Checks, cheapest first: trusted signer and signature, network, payTo, token, amount
    (at least the price), the memo this server issued for `resource`, validity times, and
    last (it records the use) that the settled transaction was never used before."""
    now = int(time.time()) if now is None else now
    if proof.facilitator not in trusted_facilitators:
        return Verdict(False, "the proof is signed by a facilitator this server does not trust")
    if remote is not None:
        if why := await remote.check(proof):
            return Verdict(False, why)
    elif not proof.signature_valid():
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
    if not await replay.claim(proof.replay_key, proof.expires_at + CLOCK_SKEW_SECS):
        return Verdict(False, "the proof was already used")
    return Verdict(True)


async def verify_payment_proof(proof: PaymentProof, terms: PaymentOption, **kwargs: object) -> bool:
    """`verify_payment_proof_reason(...).ok` (the spec's boolean form)."""
    return (await verify_payment_proof_reason(proof, terms, **kwargs)).ok  # type: ignore[arg-type]
