"""The payer's side of sessions (docs/adr/0025): read a gate's `session` challenge, open a
session on chain to its terms, and sign one voucher per request.

`SessionOffer.parse(challenge)` reads a `WWW-Authenticate: Payment` challenge of intent
`session` on `svc_billing`. `Tab` holds one open session: `credential(offer, price)` signs the
next voucher (the highest accepted plus the price) and returns the `Authorization` value;
`accepted(receipt)` and `refused(problem)` keep the count in step with the gate, which tells
the accepted cumulative in both.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from solders.keypair import Keypair
from solders.pubkey import Pubkey

from svcpay.protocol import mpp
from svcpay.protocol.voucher import SignedVoucher
from svcpay.schemes.session.server import INTENT, METHOD


@dataclass(frozen=True)
class SessionOffer:
    challenge: mpp.Challenge
    amount: int  # base units per unit
    currency: Pubkey  # the mint
    recipient_token: Pubkey  # the session's recipient: the gate's token account
    program: Pubkey  # svc_billing
    suggested_deposit: int
    min_dispute_secs: int

    @classmethod
    def parse(cls, challenge: mpp.Challenge) -> SessionOffer | None:
        """The offer in `challenge`, or None when it is not an svc_billing session."""
        if (challenge.method, challenge.intent) != (METHOD, INTENT):
            return None
        try:
            request = challenge.request_json
            details = request["methodDetails"]
            return cls(
                challenge,
                int(request["amount"]),
                Pubkey.from_string(request["currency"]),
                Pubkey.from_string(details["recipientTokenAccount"]),
                Pubkey.from_string(details["channelProgram"]),
                int(request.get("suggestedDeposit") or 0),
                int(details.get("minDisputeSeconds", 0)),
            )
        except (mpp.MppError, KeyError, TypeError, ValueError):
            return None


@dataclass
class Tab:
    """One open session, as its payer tracks it."""

    channel: Pubkey
    key: Keypair  # signs the vouchers
    deposit: int
    cumulative: int = 0  # the highest the gate accepted
    lock: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False)

    def left(self) -> int:
        return self.deposit - self.cumulative

    def sign(self, price: int) -> SignedVoucher:
        return SignedVoucher.sign(self.key, self.channel, self.cumulative + price)

    def credential(self, offer: SessionOffer, voucher: SignedVoucher) -> str:
        payload: dict[str, Any] = {
            "action": "voucher",
            "channelId": str(self.channel),
            "voucher": voucher.to_json_dict(),
        }
        return mpp.Credential(offer.challenge, payload, f"solana:{self.key.pubkey()}").header()

    def accepted(self, receipt: mpp.Receipt) -> None:
        value = receipt.extra.get("acceptedCumulative")
        if isinstance(value, str) and value.isdigit():
            self.cumulative = max(self.cumulative, int(value))

    def resync(self, problem: dict[str, Any]) -> bool:
        """Takes the gate's accepted cumulative from a refusal; whether it moved (then a
        voucher signed anew may pass)."""
        value = problem.get("acceptedCumulative")
        if isinstance(value, str) and value.isdigit() and int(value) != self.cumulative:
            self.cumulative = int(value)
            return True
        return False
