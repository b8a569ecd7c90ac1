"""x402 `exact` payment transactions for facilitator tests, built from solders and spl
directly (not from svcpay's client, whose output is what the facilitator judges): the
layout an x402 wallet signs, and each part replaceable to build what must be refused."""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from solders.compute_budget import set_compute_unit_limit, set_compute_unit_price
from solders.hash import Hash
from solders.instruction import AccountMeta, Instruction
from solders.keypair import Keypair
from solders.message import MessageV0, to_bytes_versioned
from solders.pubkey import Pubkey
from solders.signature import Signature
from solders.transaction import VersionedTransaction
from spl.token.constants import TOKEN_PROGRAM_ID
from spl.token.instructions import get_associated_token_address, transfer_checked
from spl.token.models import TransferCheckedParams

MEMO_PROGRAM = Pubkey.from_string("MemoSq4gqABAXKb96qnH8TysNcWxMyWCqXgDLGmfcHr")


@dataclass(frozen=True)
class ExactPayment:
    """`payer` pays `amount` of `mint` to ATA(`pay_to`, `mint`), fee payer `fee_payer`.
    Fields left None take the standard value; `but(...)` returns a variant."""

    payer: Keypair
    fee_payer: Pubkey
    mint: Pubkey
    pay_to: Pubkey  # the merchant's wallet
    amount: int
    blockhash: Hash
    memo: str | None = "x402-test-memo"
    limit: int | None = 20_000
    price: int | None = 1
    decimals: int = 6
    destination: Pubkey | None = None  # default ATA(pay_to, mint)
    authority: Keypair | Pubkey | None = None  # default the payer
    extra: Sequence[Instruction] = field(default_factory=tuple)  # after the memo
    program: Pubkey = TOKEN_PROGRAM_ID  # the mint's token program
    transfer_extra: Sequence[AccountMeta] = ()  # after the transfer's four (a hook's)

    def but(self, **changes: object) -> ExactPayment:
        return replace(self, **changes)  # type: ignore[arg-type]

    def instructions(self) -> list[Instruction]:
        authority = self.authority if self.authority is not None else self.payer
        owner = authority.pubkey() if isinstance(authority, Keypair) else authority
        ixs = []
        if self.limit is not None:
            ixs.append(set_compute_unit_limit(self.limit))
        if self.price is not None:
            ixs.append(set_compute_unit_price(self.price))
        transfer = transfer_checked(
            TransferCheckedParams(
                program_id=self.program,
                source=self.source(),
                mint=self.mint,
                dest=self.destination
                or get_associated_token_address(self.pay_to, self.mint, self.program),
                owner=owner,
                amount=self.amount,
                decimals=self.decimals,
            )
        )
        if self.transfer_extra:
            metas = [*transfer.accounts, *self.transfer_extra]
            transfer = Instruction(transfer.program_id, transfer.data, metas)
        ixs.append(transfer)
        if self.memo is not None:
            ixs.append(Instruction(MEMO_PROGRAM, self.memo.encode(), []))
        return ixs + list(self.extra)

    def source(self) -> Pubkey:
        authority = self.authority if self.authority is not None else self.payer
        owner = authority.pubkey() if isinstance(authority, Keypair) else authority
        return get_associated_token_address(owner, self.mint, self.program)

    def transaction(self) -> VersionedTransaction:
        """Signed by the payer (and any other keypair that must sign), the fee payer's
        signature left empty for the facilitator."""
        message = MessageV0.try_compile(self.fee_payer, self.instructions(), [], self.blockhash)
        data = to_bytes_versioned(message)
        signers = {self.payer.pubkey(): self.payer}
        if isinstance(self.authority, Keypair):
            signers[self.authority.pubkey()] = self.authority
        keys = list(message.account_keys)
        sigs = [
            signers[k].sign_message(data) if k in signers else Signature.default()
            for k in keys[: message.header.num_required_signatures]
        ]
        return VersionedTransaction.populate(message, sigs)

    def base64(self) -> str:
        return base64.b64encode(bytes(self.transaction())).decode()


def memo_with_signer(text: str, signer: Pubkey) -> Instruction:
    """A memo instruction that names `signer` among its accounts."""
    return Instruction(MEMO_PROGRAM, text.encode(), [AccountMeta(signer, True, False)])
