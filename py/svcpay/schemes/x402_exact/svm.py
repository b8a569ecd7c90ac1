"""x402 `exact` on Solana: what a payment transaction must look like, as pure functions over
solders transactions (x402-foundation/x402 `specs/schemes/exact/scheme_exact_svm.md` §2 and
§3.1, the "static layout" path). The facilitator applies `check_payment` before it co-signs;
the client side builds transactions that pass it.

Layout, in this order (3 to 7 instructions):
    0  ComputeBudget SetComputeUnitLimit   <= MAX_COMPUTE_UNIT_LIMIT
    1  ComputeBudget SetComputeUnitPrice   <= MAX_COMPUTE_UNIT_PRICE, and limit * price
                                              within MAX_PRIORITY_FEE_LAMPORTS
    2  TransferChecked (SPL Token or Token-2022) of `asset` to ATA(payTo, asset), at least
       the amount, its authority a signer other than the fee payer; for a Token-2022 mint
       with a transfer fee, what the payee receives (the amount less the fee withheld) is
       at least the amount asked for, and a transfer-hook mint's transfer carries its
       hook's accounts (docs/adr/0031)
    3+ Memo or Lighthouse instructions only
Lighthouse (`L2TE...S95`) instructions are accepted: Phantom and Solflare inject up to three
of these assertions into every transaction they sign (they can only make it fail, never move
funds), and x402's policy accepts them; the fee-payer isolation rule still applies to them.
The fee payer (the facilitator) is the transaction's fee payer and appears in no
instruction, so its signature authorizes nothing but the fee; exactly two signatures are
required (fee payer and token authority); address lookup tables are refused (every account
must be visible to these checks). docs/adr/0019.

What a Token-2022 mint does to a payment (its fee schedule this epoch, its hook) is the
caller's to say (`mint`, a `MintAtEpoch` read from the chain): the checks stay pure. Without
it a transfer is judged as an SPL Token one, no fee and no hook.
"""

from __future__ import annotations

import base64
import binascii
import struct
from dataclasses import dataclass
from functools import lru_cache

from solders.message import to_bytes_versioned
from solders.pubkey import Pubkey
from solders.transaction import VersionedTransaction

from svcpay.protocol.programs import ASSOCIATED_TOKEN_PROGRAM as ASSOCIATED_TOKEN_PROGRAM
from svcpay.protocol.programs import COMPUTE_BUDGET as COMPUTE_BUDGET
from svcpay.protocol.programs import MEMO_PROGRAM as MEMO_PROGRAM
from svcpay.protocol.programs import TOKEN_2022_PROGRAM as TOKEN_2022_PROGRAM
from svcpay.protocol.programs import TOKEN_PROGRAM as TOKEN_PROGRAM
from svcpay.protocol.programs import TOKEN_PROGRAMS as TOKEN_PROGRAMS
from svcpay.protocol.programs import TRANSFER_CHECKED as TRANSFER_CHECKED
from svcpay.protocol.token2022 import MintAtEpoch, shortfall, transfer_accounts_problem
from svcpay.schemes.x402_exact.wire import Reason

LIGHTHOUSE_PROGRAM = Pubkey.from_string("L2TExMFKdjpN9kozasaurPirfHy9P8sbXoAN1qA3S95")
OPTIONAL_PROGRAMS = (MEMO_PROGRAM, LIGHTHOUSE_PROGRAM)

SET_COMPUTE_UNIT_LIMIT = 2
SET_COMPUTE_UNIT_PRICE = 3
MIN_INSTRUCTIONS = 3
# Budget, price, transfer, then up to three Lighthouse assertions (Phantom) and a memo.
MAX_INSTRUCTIONS = 7
# x402's cap on the price (5 lamports a compute unit); the limit is capped with room for
# the transfer, a memo and wallet-injected assertions (about 20,000 units in all), and their
# product bounded as svcpay's /authorize bounds it: at most 50,000 lamports of priority fee
# per payment, whatever the split.
MAX_COMPUTE_UNIT_PRICE = 5_000_000  # micro-lamports per compute unit
MAX_COMPUTE_UNIT_LIMIT = 200_000
MAX_PRIORITY_FEE_LAMPORTS = 50_000
MAX_TRANSACTION_BASE64 = 1_644 * 2  # a packet is 1,232 bytes; room for padding and slack

_UNKNOWN_NTH = (Reason.UNKNOWN_FOURTH, Reason.UNKNOWN_FIFTH, Reason.UNKNOWN_SIXTH)


class Refusal(Exception):
    """The transaction does not pay as `exact` requires: `reason` is x402's string."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason, self.message = reason, message


@dataclass(frozen=True)
class Transfer:
    """The payment a checked transaction makes."""

    token_program: Pubkey
    source: Pubkey
    mint: Pubkey
    destination: Pubkey
    authority: Pubkey  # the payer: the token account's owner, who signed
    amount: int  # base units the payer sends (gross)
    decimals: int
    memos: tuple[str, ...]
    compute_unit_limit: int
    compute_unit_price: int  # micro-lamports per unit
    fee: int | None = None  # what a transfer-fee mint withholds in the destination; None
    # for a mint without a transfer fee

    @property
    def net(self) -> int:
        """What the payee receives."""
        return self.amount - (self.fee or 0)


@lru_cache(maxsize=4096)  # a PDA search per payment otherwise; a gate has a few payTo
def associated_token_address(owner: Pubkey, mint: Pubkey, token_program: Pubkey) -> Pubkey:
    """ATA(owner, mint) under `token_program` (Token or Token-2022)."""
    seeds = [bytes(owner), bytes(token_program), bytes(mint)]
    return Pubkey.find_program_address(seeds, ASSOCIATED_TOKEN_PROGRAM)[0]


def priority_fee_lamports(limit: int, price: int) -> int:
    """What the compute-unit price costs the fee payer at most, rounded up."""
    return -(-limit * price // 1_000_000)


def decode_transaction(payload: str) -> VersionedTransaction:
    """The base64 transaction of a payment payload; Refusal when it is none."""
    if len(payload) > MAX_TRANSACTION_BASE64:
        raise Refusal(Reason.UNDECODABLE, "the transaction is larger than a packet")
    try:
        return VersionedTransaction.from_bytes(base64.b64decode(payload, validate=True))
    except (binascii.Error, ValueError, TypeError) as e:
        raise Refusal(Reason.UNDECODABLE, f"not a base64 Solana transaction: {e}") from e


def check_payment(
    tx: VersionedTransaction,
    *,
    fee_payer: Pubkey,
    asset: str,
    pay_to: str,
    amount: int,
    memo: str | None = None,
    mint: MintAtEpoch | None = None,
) -> Transfer:
    """The transfer `tx` makes, if it pays at least `amount` of `asset` to ATA(`pay_to`) by
    the layout above with `fee_payer` as the sponsor; Refusal with x402's reason otherwise.

    Args:
        tx: the client-signed transaction (the fee payer's signature slot still empty).
        fee_payer: the sponsor's address (extra.feePayer, already known to be ours).
        asset, pay_to, amount: the requirements' mint, wallet and base units (what the
            payee must receive).
        memo: extra.memo: when given, exactly one memo instruction must carry it.
        mint: `asset` now, for a transfer through Token-2022 (`names_token_2022(tx)`):
            its token program, the fee schedule in force and its hook. None: no fee, no
            hook (an SPL Token mint needs none).
    """
    try:
        return _check(tx, fee_payer, asset, pay_to, amount, memo, mint)
    except IndexError as e:  # an index past the accounts the message carries
        raise Refusal(Reason.INVALID_PAYLOAD, "an instruction names accounts it lacks") from e


def _check(
    tx: VersionedTransaction,
    fee_payer: Pubkey,
    asset: str,
    pay_to: str,
    amount: int,
    memo: str | None,
    mint_now: MintAtEpoch | None,
) -> Transfer:
    msg = tx.message
    keys = list(msg.account_keys)
    if getattr(msg, "address_table_lookups", None):
        raise Refusal(Reason.INVALID_PAYLOAD, "address lookup tables are not accepted")
    if not keys or keys[0] != fee_payer:
        raise Refusal(Reason.FEE_PAYER_MISSING, f"the transaction's fee payer must be {fee_payer}")
    ixs = list(msg.instructions)
    programs = [keys[ix.program_id_index] for ix in ixs]
    accounts = [[keys[i] for i in bytes(ix.accounts)] for ix in ixs]
    datas = [bytes(ix.data) for ix in ixs]
    _check_shape(tx, fee_payer, programs, accounts)
    limit, price = _check_budget(programs, datas)
    program, data, transfer_accounts = programs[2], datas[2], accounts[2]
    _check_instructions(programs, data, transfer_accounts)
    source, mint, destination, authority = transfer_accounts[:4]
    memos = _check_memos(programs, datas, memo)
    _check_destination(transfer_accounts, program, asset, pay_to, mint_now)
    paid = struct.unpack_from("<Q", data, 1)[0]
    fee = _check_amount(paid, amount, mint_now)
    signer = keys.index(authority)
    if signer >= msg.header.num_required_signatures or not tx.signatures[signer].verify(
        authority, to_bytes_versioned(msg)
    ):
        raise Refusal(Reason.INVALID_PAYLOAD, "the token authority's signature does not verify")
    return Transfer(
        token_program=program,
        source=source,
        mint=mint,
        destination=destination,
        authority=authority,
        amount=paid,
        decimals=data[9],
        memos=memos,
        compute_unit_limit=limit,
        compute_unit_price=price,
        fee=fee,
    )


def _check_shape(
    tx: VersionedTransaction,
    fee_payer: Pubkey,
    programs: list[Pubkey],
    accounts: list[list[Pubkey]],
) -> None:
    """The fee payer isolated, two signers, an accepted number of instructions."""
    # Fee payer isolation (§2.1.1): named by no instruction, as program or account.
    if any(fee_payer == p or fee_payer in a for p, a in zip(programs, accounts, strict=True)):
        raise Refusal(Reason.FEE_PAYER_TRANSFERRING, "an instruction uses the fee payer's account")
    if tx.message.header.num_required_signatures != 2 or len(tx.signatures) != 2:
        raise Refusal(
            Reason.INVALID_PAYLOAD,
            "exactly two signers: the fee payer and the token authority",
        )
    if not MIN_INSTRUCTIONS <= len(programs) <= MAX_INSTRUCTIONS:
        raise Refusal(
            Reason.INSTRUCTIONS_LENGTH,
            f"{len(programs)} instructions; {MIN_INSTRUCTIONS} to {MAX_INSTRUCTIONS} are accepted",
        )


def _check_budget(programs: list[Pubkey], datas: list[bytes]) -> tuple[int, int]:
    """The compute unit limit and price the first two instructions set, within bounds."""
    limit = _budget(programs[0], datas[0], SET_COMPUTE_UNIT_LIMIT, "<I", Reason.COMPUTE_LIMIT)
    if limit > MAX_COMPUTE_UNIT_LIMIT:
        raise Refusal(Reason.COMPUTE_LIMIT, f"compute unit limit above {MAX_COMPUTE_UNIT_LIMIT}")
    price = _budget(programs[1], datas[1], SET_COMPUTE_UNIT_PRICE, "<Q", Reason.COMPUTE_PRICE)
    if price > MAX_COMPUTE_UNIT_PRICE:
        raise Refusal(
            Reason.COMPUTE_PRICE_TOO_HIGH,
            f"compute unit price above {MAX_COMPUTE_UNIT_PRICE} micro-lamports",
        )
    if priority_fee_lamports(limit, price) > MAX_PRIORITY_FEE_LAMPORTS:
        raise Refusal(
            Reason.COMPUTE_PRICE_TOO_HIGH,
            f"limit x price exceeds {MAX_PRIORITY_FEE_LAMPORTS} lamports of priority fee",
        )
    return limit, price


def _check_instructions(programs: list[Pubkey], data: bytes, transfer: list[Pubkey]) -> None:
    """A TransferChecked third, then only memos and Lighthouse."""
    if (
        programs[2] not in TOKEN_PROGRAMS
        or len(data) != 10
        or data[0] != TRANSFER_CHECKED
        or len(transfer) < 4
    ):
        raise Refusal(Reason.NO_TRANSFER, "the third instruction must be a TransferChecked")
    for index, program_id in enumerate(programs[3:]):
        if program_id not in OPTIONAL_PROGRAMS:
            raise Refusal(
                _UNKNOWN_NTH[min(index, len(_UNKNOWN_NTH) - 1)],
                f"instruction {index + 4} (program {program_id}) is neither a memo nor Lighthouse",
            )


def _check_memos(programs: list[Pubkey], datas: list[bytes], memo: str | None) -> tuple[str, ...]:
    """The memos after the transfer; exactly one, `memo`, when it is given."""
    optional = zip(programs[3:], datas[3:], strict=True)
    memos = tuple(d.decode("utf-8", "replace") for p, d in optional if p == MEMO_PROGRAM)
    if memo is not None:
        if len(memos) != 1:
            raise Refusal(Reason.MEMO_COUNT, f"{len(memos)} memo instructions; exactly one")
        if memos[0] != memo:
            raise Refusal(Reason.MEMO_MISMATCH, "the memo is not the one the terms give")
    return memos


def _check_destination(
    transfer: list[Pubkey],
    program: Pubkey,
    asset: str,
    pay_to: str,
    mint_now: MintAtEpoch | None,
) -> None:
    """The transfer moves `asset` through its token program to ATA(`pay_to`)."""
    mint, destination = transfer[1], transfer[2]
    if str(mint) != asset:
        raise Refusal(Reason.MINT_MISMATCH, f"the transfer's mint is {mint}, not {asset}")
    if mint_now is not None and mint_now.program != program:
        raise Refusal(
            Reason.MINT_MISMATCH,
            f"the transfer goes through {program}; {asset} is a mint of {mint_now.program}",
        )
    if (problem := transfer_accounts_problem(transfer, mint, mint_now)) is not None:
        raise Refusal(Reason.INVALID_PAYLOAD, problem)
    expected = associated_token_address(Pubkey.from_string(pay_to), mint, program)
    if destination != expected:
        raise Refusal(
            Reason.RECIPIENT_MISMATCH,
            f"the transfer goes to {destination}, not ATA(payTo, asset) = {expected}",
        )


def _check_amount(paid: int, amount: int, mint_now: MintAtEpoch | None) -> int | None:
    """The mint's fee on `paid` (None without one), once the payee receives `amount`."""
    fee = None
    if mint_now is not None and mint_now.has_fee:  # judged by what the payee receives
        fee = mint_now.fee_for(paid)
        if (short := shortfall(mint_now, paid, amount)) is not None:
            raise Refusal(Reason.AMOUNT_INSUFFICIENT, f"the transfer pays {paid}, {short}")
    elif paid < amount:
        raise Refusal(
            Reason.AMOUNT_INSUFFICIENT, f"the transfer pays {paid}, the price is {amount}"
        )
    return fee


def _budget(program: Pubkey, data: bytes, kind: int, layout: str, reason: str) -> int:
    size = struct.calcsize(layout)
    if program != COMPUTE_BUDGET or len(data) != 1 + size or data[0] != kind:
        what = "SetComputeUnitLimit" if kind == SET_COMPUTE_UNIT_LIMIT else "SetComputeUnitPrice"
        position = "first" if kind == SET_COMPUTE_UNIT_LIMIT else "second"
        raise Refusal(reason, f"the {position} instruction must be {what}")
    return int(struct.unpack_from(layout, data, 1)[0])
