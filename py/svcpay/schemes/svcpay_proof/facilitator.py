"""The facilitator's side of svcpay proofs: what a signed payment posted to `/authorize` must
look like before the facilitator co-signs it as fee payer (docs/adr/0008). Pure functions
over solders transactions; `svcpay.facilitator.settlement.Settler` applies `check_payment`,
then sends and confirms through its durable path and signs the proof.

The client builds and signs (as token authority) a v0 transaction whose fee payer is the
facilitator:
    - exactly one SetComputeUnitLimit (at most MAX_COMPUTE_UNIT_LIMIT) and, optionally, a
      SetComputeUnitPrice (at most MAX_COMPUTE_UNIT_PRICE; the runtime refuses a second);
    - one `TransferChecked` (SPL Token or Token-2022) of exactly the terms' amount of
      their mint to `payTo`, signed by its authority; for a Token-2022 mint with a transfer
      fee, of an amount whose recipient receives at least the terms' amount (the fee is
      withheld in `payTo`; the client sends `gross_for_net(amount)`), and for a
      transfer-hook mint with the hook's accounts after its four (docs/adr/0031);
    - one memo instruction carrying the terms' memo.
Anything else, lookup tables, a third signer, or any use of the facilitator's key beyond
paying the fee, is refused. x402's rules for the same transfer are
`svcpay.schemes.x402_exact.svm`. A Token-2022 mint's fee schedule and hook are the
caller's to read (`mint`, a `MintAtEpoch`); without it, no fee and no hook.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from solders.message import to_bytes_versioned
from solders.pubkey import Pubkey
from solders.transaction import VersionedTransaction

from svcpay.protocol.models import PaymentOption
from svcpay.protocol.programs import COMPUTE_BUDGET, MEMO_PROGRAM, TOKEN_PROGRAMS, TRANSFER_CHECKED
from svcpay.protocol.settlement import SettlementError
from svcpay.protocol.token2022 import MintAtEpoch, shortfall, transfer_accounts_problem

# What a payment may cost the facilitator: one signature's fee (the client's signature is
# the only other one) plus at most MAX_PRIORITY_FEE_LAMPORTS of priority fee (limit * price
# / 10^6), whatever the split. An SPL Token transfer and the memo need about 10,000 units; a
# Token-2022 transfer through a hook (its CPI, and the PDAs its extra accounts derive, whose
# bump searches cost more for some addresses than others) can need over 50,000: on
# solana-test-validator a fee-and-hook mint's payment at 50,000 once left the memo short.
MAX_COMPUTE_UNIT_LIMIT = 200_000
MAX_COMPUTE_UNIT_PRICE = 1_000_000  # micro-lamports per compute unit
MAX_PRIORITY_FEE_LAMPORTS = 50_000


def decode_payment(signed_payment: bytes) -> VersionedTransaction:
    """The transaction of `/authorize`'s `signedPayment`; SettlementError when it is none."""
    try:
        return VersionedTransaction.from_bytes(signed_payment)
    except ValueError as e:
        raise SettlementError(
            "InvalidTransaction", f"signedPayment is not a transaction: {e}"
        ) from e


@dataclass(frozen=True)
class Paid:
    """What a checked payment transfers."""

    payer: Pubkey  # the transfer's signing authority
    token_program: Pubkey
    amount: int  # what the payer sends (gross)
    fee: int | None = None  # what a transfer-fee mint withholds in `payTo`; None for a
    # mint without a transfer fee

    @property
    def net(self) -> int:
        """What `payTo` receives: at least the terms' amount."""
        return self.amount - (self.fee or 0)


def check_payment(
    tx: VersionedTransaction,
    option: PaymentOption,
    fee_payer: Pubkey,
    mint: MintAtEpoch | None = None,
) -> Pubkey:
    """The payer (the transfer's signing authority) if `tx` pays `option` with `fee_payer`
    as the sponsor by the rules above; SettlementError otherwise."""
    return check_transfer(tx, option, fee_payer, mint).payer


def check_transfer(
    tx: VersionedTransaction,
    option: PaymentOption,
    fee_payer: Pubkey,
    mint: MintAtEpoch | None = None,
) -> Paid:
    """`check_payment`, telling what the transfer pays: gross, the mint's fee, net.
    `mint`: the terms' mint now, for a transfer through Token-2022 (None: no fee, no hook)."""
    try:
        return _check(tx, option, fee_payer, mint)
    except IndexError as e:  # an index past the accounts or signatures it carries
        raise SettlementError(
            "InvalidTransaction", "the transaction names accounts or signatures it lacks"
        ) from e


def _check(
    tx: VersionedTransaction, option: PaymentOption, me: Pubkey, mint_now: MintAtEpoch | None
) -> Paid:
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
    limit, price = 0, 0
    for ix in msg.instructions:
        program = keys[ix.program_id_index]
        accounts = [keys[i] for i in bytes(ix.accounts)]
        if me in accounts:
            raise SettlementError("InvalidTransaction", "an instruction uses the facilitator's key")
        data = bytes(ix.data)
        if program == COMPUTE_BUDGET:
            limits += _budget(data)
            if data[:1] == b"\x02":
                limit = struct.unpack_from("<I", data, 1)[0]
            else:
                price = struct.unpack_from("<Q", data, 1)[0]
        elif (
            program in TOKEN_PROGRAMS and data[:1] == bytes([TRANSFER_CHECKED]) and len(data) == 10
        ):
            transfers.append((program, accounts, struct.unpack_from("<Q", data, 1)[0]))
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
    if limit * price > MAX_PRIORITY_FEE_LAMPORTS * 1_000_000:
        raise SettlementError(
            "InvalidTransaction",
            f"priority fee above {MAX_PRIORITY_FEE_LAMPORTS} lamports (compute unit limit "
            "times price)",
        )
    if len(transfers) != 1 or len(memos) != 1:
        raise SettlementError("InvalidTransaction", "need exactly one TransferChecked and one memo")
    (program, accounts, amount), memo = transfers[0], memos[0]
    if len(accounts) < 4:
        raise SettlementError("InvalidTransaction", "TransferChecked lacks accounts")
    _, mint, destination, authority = accounts[:4]
    for what, got, want in (
        ("mint", str(mint), option.token),
        ("destination", str(destination), option.pay_to),
    ):
        if got != want:
            raise SettlementError(
                "TermsMismatch", f"the transfer's {what} is {got}, the terms say {want}"
            )
    if mint_now is not None and mint_now.program != program:
        raise SettlementError(
            "TermsMismatch",
            f"the transfer goes through {program}; {mint} is a mint of {mint_now.program}",
        )
    price, fee = int(option.amount), None
    if mint_now is not None and mint_now.has_fee:  # judged by what payTo receives
        fee = mint_now.fee_for(amount)
        if (short := shortfall(mint_now, amount, price)) is not None:
            raise SettlementError("TermsMismatch", f"the transfer's amount is {amount}, {short}")
    elif amount != price:
        raise SettlementError(
            "TermsMismatch", f"the transfer's amount is {amount}, the terms say {price}"
        )
    if memo != (option.memo or ""):
        raise SettlementError(
            "TermsMismatch", f"the transfer's memo is {memo}, the terms say {option.memo or ''}"
        )
    signer_index = keys.index(authority)
    if signer_index >= msg.header.num_required_signatures:
        raise SettlementError("InvalidTransaction", "the token authority must sign")
    if not tx.signatures[signer_index].verify(authority, to_bytes_versioned(msg)):
        raise SettlementError(
            "InvalidTransaction", "the token authority's signature does not verify"
        )
    if (problem := transfer_accounts_problem(accounts, mint, mint_now)) is not None:
        raise SettlementError("InvalidTransaction", problem)
    return Paid(authority, program, amount, fee)


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
