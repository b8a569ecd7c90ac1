"""The facilitator's side of svcpay proofs: what a signed payment posted to `/authorize` must
look like before the facilitator co-signs it as fee payer (docs/adr/0008). Pure functions
over solders transactions; `svcpay.facilitator.settlement.Settler` applies `check_payment`,
then sends and confirms through its durable path and signs the proof.

The client builds and signs (as token authority) a v0 transaction whose fee payer is the
facilitator:
    - exactly one SetComputeUnitLimit (at most MAX_COMPUTE_UNIT_LIMIT) and, optionally, a
      SetComputeUnitPrice (at most MAX_COMPUTE_UNIT_PRICE; the runtime refuses a second);
    - one SPL Token `TransferChecked` of exactly the terms' amount of their mint to `payTo`,
      signed by its authority;
    - one memo instruction carrying the terms' memo.
Anything else, lookup tables, a third signer, or any use of the facilitator's key beyond
paying the fee, is refused. x402's rules for the same transfer are
`svcpay.schemes.x402_exact.svm`.
"""

from __future__ import annotations

import struct

from solders.message import to_bytes_versioned
from solders.pubkey import Pubkey
from solders.transaction import VersionedTransaction

from svcpay.protocol.models import PaymentOption
from svcpay.protocol.programs import COMPUTE_BUDGET, MEMO_PROGRAM, TOKEN_PROGRAM, TRANSFER_CHECKED
from svcpay.protocol.settlement import SettlementError

# What a payment may cost the facilitator: one signature's fee (the client's signature is
# the only other one) plus at most MAX_COMPUTE_UNIT_LIMIT * MAX_COMPUTE_UNIT_PRICE / 10^6
# lamports of priority fee (50,000 lamports). The transfer and the memo need about 10,000.
MAX_COMPUTE_UNIT_LIMIT = 50_000
MAX_COMPUTE_UNIT_PRICE = 1_000_000  # micro-lamports per compute unit


def decode_payment(signed_payment: bytes) -> VersionedTransaction:
    """The transaction of `/authorize`'s `signedPayment`; SettlementError when it is none."""
    try:
        return VersionedTransaction.from_bytes(signed_payment)
    except ValueError as e:
        raise SettlementError(
            "InvalidTransaction", f"signedPayment is not a transaction: {e}"
        ) from e


def check_payment(tx: VersionedTransaction, option: PaymentOption, fee_payer: Pubkey) -> Pubkey:
    """The payer (the transfer's signing authority) if `tx` pays exactly `option` with
    `fee_payer` as the sponsor by the rules above; SettlementError otherwise."""
    try:
        return _check(tx, option, fee_payer)
    except IndexError as e:  # an index past the accounts or signatures it carries
        raise SettlementError(
            "InvalidTransaction", "the transaction names accounts or signatures it lacks"
        ) from e


def _check(tx: VersionedTransaction, option: PaymentOption, me: Pubkey) -> Pubkey:
    msg = tx.message
    keys = list(msg.account_keys)
    if not keys or keys[0] != me:
        raise SettlementError("InvalidTransaction", f"the fee payer must be the facilitator {me}")
    if msg.header.num_required_signatures != 2:
        raise SettlementError(
            "InvalidTransaction",
            "exactly two signers: the facilitator (fee payer) and the token authority",
        )
    if getattr(msg, "address_table_lookups", None):
        raise SettlementError("InvalidTransaction", "address lookup tables are not allowed")
    if int(option.amount) == 0:
        raise SettlementError("InvalidRequest", "the amount must be positive")
    transfers, memos, limits = [], [], 0
    for ix in msg.instructions:
        program = keys[ix.program_id_index]
        accounts = [keys[i] for i in bytes(ix.accounts)]
        if me in accounts:
            raise SettlementError("InvalidTransaction", "an instruction uses the facilitator's key")
        data = bytes(ix.data)
        if program == COMPUTE_BUDGET:
            limits += _budget(data)
        elif program == TOKEN_PROGRAM and data[:1] == bytes([TRANSFER_CHECKED]) and len(data) == 10:
            transfers.append((accounts, struct.unpack_from("<Q", data, 1)[0]))
        elif program == MEMO_PROGRAM:
            memos.append(data.decode("utf-8", "replace"))
        else:
            raise SettlementError(
                "InvalidTransaction", f"instruction of program {program} is not allowed"
            )
    if limits != 1:
        raise SettlementError(
            "InvalidTransaction",
            f"need exactly one SetComputeUnitLimit (at most {MAX_COMPUTE_UNIT_LIMIT})",
        )
    if len(transfers) != 1 or len(memos) != 1:
        raise SettlementError("InvalidTransaction", "need exactly one TransferChecked and one memo")
    (accounts, amount), memo = transfers[0], memos[0]
    if len(accounts) < 4:
        raise SettlementError("InvalidTransaction", "TransferChecked lacks accounts")
    _, mint, destination, authority = accounts[:4]
    checks = (
        ("mint", str(mint), option.token),
        ("destination", str(destination), option.pay_to),
        ("amount", str(amount), option.amount),
        ("memo", memo, option.memo or ""),
    )
    for what, got, want in checks:
        if got != want:
            raise SettlementError(
                "TermsMismatch", f"the transfer's {what} is {got}, the terms say {want}"
            )
    signer_index = keys.index(authority)
    if signer_index >= msg.header.num_required_signatures:
        raise SettlementError("InvalidTransaction", "the token authority must sign")
    if not tx.signatures[signer_index].verify(authority, to_bytes_versioned(msg)):
        raise SettlementError(
            "InvalidTransaction", "the token authority's signature does not verify"
        )
    return authority


def _budget(data: bytes) -> int:
    """1 for a SetComputeUnitLimit within the cap, 0 for a SetComputeUnitPrice within its
    cap; anything else is refused."""
    if data[:1] == b"\x02" and len(data) == 5:  # SetComputeUnitLimit(u32)
        if struct.unpack_from("<I", data, 1)[0] > MAX_COMPUTE_UNIT_LIMIT:
            raise SettlementError(
                "InvalidTransaction", f"compute unit limit above {MAX_COMPUTE_UNIT_LIMIT}"
            )
        return 1
    if data[:1] == b"\x03" and len(data) == 9:  # SetComputeUnitPrice(u64)
        if struct.unpack_from("<Q", data, 1)[0] > MAX_COMPUTE_UNIT_PRICE:
            raise SettlementError(
                "InvalidTransaction", f"compute unit price above {MAX_COMPUTE_UNIT_PRICE}"
            )
        return 0
    raise SettlementError(
        "InvalidTransaction", "only compute unit limit and price instructions are allowed"
    )
