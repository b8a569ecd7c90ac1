"""Facilitator-signed proofs for gate tests (no settlement behind them: the gate verifies
offline, so a proof's signature, terms and memo are what it checks)."""

from __future__ import annotations

import time

from solders.keypair import Keypair
from solders.pubkey import Pubkey

from svcpay.gate.pricing import Terms
from svcpay.protocol.proof import PaymentProof


def proof_header(terms: Terms, memo: str, amount: int, signer: Keypair) -> str:
    """An X-PAYMENT value: a fresh proof of `amount` to `terms`, for `memo`, signed by
    `signer` and valid for two minutes."""
    now = int(time.time())
    return (
        PaymentProof(
            network="solana-mainnet",
            transaction=str(Keypair().sign_message(b"settled")),
            payer=str(Pubkey.new_unique()),
            pay_to=terms.pay_to,
            token=terms.token,
            amount=str(amount),
            memo=memo,
            issued_at=now,
            expires_at=now + 120,
            facilitator=str(signer.pubkey()),
        )
        .signed_by(signer)
        .to_header()
    )
