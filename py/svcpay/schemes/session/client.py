"""The payer's side of sessions (docs/adr/0025): read a gate's `session` challenge, open a
session on chain to its terms, and sign one voucher per request.

`SessionOffer.parse(challenge)` reads a `WWW-Authenticate: Payment` challenge of intent
`session` on `svc_billing`. `Tab` holds one open session: `sign(price)` makes the next voucher
(the highest accepted plus the price), `credential(offer, voucher)` the `Authorization`
value; `accepted(receipt)` and `resync(problem)` keep the count in step with the gate, which
tells the accepted cumulative in both. `Tabs` keeps tabs per gate, in memory or in a JSON
file (`svcpay pay --session` reuses its session across runs).
"""

from __future__ import annotations

import asyncio
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import base58
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
    network: str = "mainnet"  # methodDetails.network (MPP's default)

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
                str(details.get("network", "mainnet")),
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

    def to_json_dict(self) -> dict[str, Any]:
        """The tab as `Tabs` files keep it (the session key included: it signs vouchers of
        this session only, up to its deposit)."""
        return {
            "channel": str(self.channel),
            "key": base58.b58encode(bytes(self.key)).decode(),
            "deposit": str(self.deposit),
            "cumulative": str(self.cumulative),
        }

    @classmethod
    def from_json_dict(cls, data: dict[str, Any]) -> Tab:
        key = Keypair.from_bytes(base58.b58decode(data["key"]))
        return cls(
            Pubkey.from_string(data["channel"]), key, int(data["deposit"]), int(data["cumulative"])
        )


def tab_key(offer: SessionOffer) -> str:
    """Tabs are per (program, recipient token account, mint): one gate's sessions."""
    return f"{offer.program}:{offer.recipient_token}:{offer.currency}"


class Tabs:
    """Open tabs by `tab_key`; with `path`, kept in that JSON file (mode 0600) after each
    change."""

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = None if path is None else Path(path)
        self._tabs: dict[str, Tab] = {}
        if self.path is not None and self.path.exists():
            data = json.loads(self.path.read_text())
            self._tabs = {k: Tab.from_json_dict(v) for k, v in data.get("tabs", {}).items()}

    def get(self, key: str) -> Tab | None:
        return self._tabs.get(key)

    def put(self, key: str, tab: Tab) -> None:
        self._tabs[key] = tab
        self.save()

    def drop(self, key: str) -> None:
        self._tabs.pop(key, None)
        self.save()

    def items(self) -> list[tuple[str, Tab]]:
        return list(self._tabs.items())

    def save(self) -> None:
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        body = json.dumps({"tabs": {k: t.to_json_dict() for k, t in self._tabs.items()}}, indent=1)
        tmp = self.path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(body)
        os.replace(tmp, self.path)
