"""MPP's Solana `charge` (tempoxyz/mpp-specs `specs/methods/solana/draft-solana-charge-00.md`):
what a payment transaction must be, as pure functions over solders transactions. The gate
checks a credential's transaction with `check_charge` before it runs the handler; the
facilitator checks it again before it co-signs (pull) or records it (push).

Accepted, in any order (pay-kit puts the price before the limit; the spec fixes no order):
    ComputeBudget SetComputeUnitLimit   at most once, <= MAX_COMPUTE_UNIT_LIMIT
    ComputeBudget SetComputeUnitPrice   at most once, <= MAX_COMPUTE_UNIT_PRICE, and
                                        limit x price within MAX_PRIORITY_FEE_LAMPORTS
    TransferChecked (SPL Token or Token-2022), exactly one: exactly `amount` of `mint`,
        `decimals` as the request says, to ATA(recipient, mint), its authority a signer;
        for a Token-2022 mint with a transfer fee, an amount whose recipient receives at
        least `amount` (the client sends `gross_for_net(amount)`), and for a transfer-hook
        mint the hook's accounts after its four (docs/adr/0031: `mint_now`, read by the
        caller, says what the mint does now)
    Memo (v2, no accounts), exactly one, carrying the request's `externalId`
Nothing else (no splits: the gate offers none). With a fee payer (pull mode, `feePayer:
true`) it is the transaction's fee payer, named by no instruction, and two signatures are
required; address lookup tables are refused (every account must be visible to these checks).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from solders.message import to_bytes_versioned
from solders.pubkey import Pubkey
from solders.transaction import VersionedTransaction

from svcpay.protocol.programs import COMPUTE_BUDGET, MEMO_PROGRAM, TOKEN_PROGRAMS, TRANSFER_CHECKED
from svcpay.protocol.token2022 import MintAtEpoch, shortfall, transfer_accounts_problem
from svcpay.schemes.x402_exact.svm import (
    MAX_COMPUTE_UNIT_LIMIT,
    MAX_COMPUTE_UNIT_PRICE,
    MAX_PRIORITY_FEE_LAMPORTS,
    associated_token_address,
    priority_fee_lamports,
)

MAX_INSTRUCTIONS = 4
MAX_TRANSACTION_BYTES = 1_232


class ChargeRefused(Exception):
    """The transaction does not pay the charge; `message` says why."""


@dataclass(frozen=True)
class Charge:
    """The payment a checked transaction makes."""

    token_program: Pubkey
    source: Pubkey
    destination: Pubkey
    payer: Pubkey  # the transfer's authority, who signed
    amount: int  # what the payer sends (gross)
    fee: int | None = None  # what a transfer-fee mint withholds in the destination; None
    # for a mint without a transfer fee

    @property
    def net(self) -> int:
        """What the recipient receives."""
        return self.amount - (self.fee or 0)


def check_charge(
    tx: VersionedTransaction,
    *,
    mint: str,
    recipient: str,
    amount: int,
    decimals: int,
    memo: str,
    fee_payer: Pubkey | None,
    mint_now: MintAtEpoch | None = None,
) -> Charge:
    """The transfer `tx` makes if it pays the charge as above (`fee_payer`: the server's key
    in pull mode, None in push mode; `mint_now`: the mint now, for a transfer through
    Token-2022, None for no fee and no hook); ChargeRefused otherwise."""
    try:
        return _check(tx, mint, recipient, amount, decimals, memo, fee_payer, mint_now)
    except (IndexError, struct.error) as e:  # an index past the accounts, short data
        raise ChargeRefused("an instruction names accounts or data it lacks") from e


def _check(
    tx: VersionedTransaction,
    mint: str,
    recipient: str,
    amount: int,
    decimals: int,
    memo: str,
    fee_payer: Pubkey | None,
    mint_now: MintAtEpoch | None,
) -> Charge:
    msg = tx.message
    if len(bytes(tx)) > MAX_TRANSACTION_BYTES:
        raise ChargeRefused("the transaction is larger than a packet")
    if getattr(msg, "address_table_lookups", None):
        raise ChargeRefused("address lookup tables are not accepted")
    keys = list(msg.account_keys)
    ixs = list(msg.instructions)
    if not 1 <= len(ixs) <= MAX_INSTRUCTIONS:
        raise ChargeRefused(f"{len(ixs)} instructions; a charge has at most {MAX_INSTRUCTIONS}")
    if fee_payer is not None:
        if not keys or keys[0] != fee_payer:
            raise ChargeRefused(f"the transaction's fee payer must be {fee_payer}")
        if msg.header.num_required_signatures != 2 or len(tx.signatures) != 2:
            raise ChargeRefused("exactly two signers: the fee payer and the token authority")
    limit = price = None
    transfers: list[tuple[Pubkey, list[Pubkey], bytes]] = []
    memos: list[bytes] = []
    for ix in ixs:
        program = keys[ix.program_id_index]
        accounts = [keys[i] for i in bytes(ix.accounts)]
        data = bytes(ix.data)
        if fee_payer is not None and fee_payer in accounts:
            raise ChargeRefused("an instruction uses the fee payer's account")
        if program == COMPUTE_BUDGET and not accounts and data[:1] == b"\x02" and len(data) == 5:
            if limit is not None:
                raise ChargeRefused("two SetComputeUnitLimit instructions")
            limit = struct.unpack_from("<I", data, 1)[0]
        elif program == COMPUTE_BUDGET and not accounts and data[:1] == b"\x03" and len(data) == 9:
            if price is not None:
                raise ChargeRefused("two SetComputeUnitPrice instructions")
            price = struct.unpack_from("<Q", data, 1)[0]
        elif program in TOKEN_PROGRAMS and data[:1] == bytes([TRANSFER_CHECKED]):
            if len(data) != 10 or len(accounts) < 4:
                raise ChargeRefused("a TransferChecked with the wrong shape")
            transfers.append((program, accounts, data))
        elif program == MEMO_PROGRAM and not accounts:
            memos.append(data)
        else:
            raise ChargeRefused(f"instruction for program {program} is not part of a charge")
    limit = 200_000 if limit is None else limit  # the runtime's default per instruction
    if limit > MAX_COMPUTE_UNIT_LIMIT:
        raise ChargeRefused(f"compute unit limit above {MAX_COMPUTE_UNIT_LIMIT}")
    if (price or 0) > MAX_COMPUTE_UNIT_PRICE:
        raise ChargeRefused(f"compute unit price above {MAX_COMPUTE_UNIT_PRICE} micro-lamports")
    if priority_fee_lamports(limit, price or 0) > MAX_PRIORITY_FEE_LAMPORTS:
        raise ChargeRefused(f"limit x price exceeds {MAX_PRIORITY_FEE_LAMPORTS} lamports")
    if len(transfers) != 1:
        raise ChargeRefused(f"{len(transfers)} TransferChecked instructions; exactly one")
    if memos != [memo.encode()]:
        raise ChargeRefused("exactly one memo, carrying the request's externalId")
    program, accounts, data = transfers[0]
    source, paid_mint, destination, authority = accounts[:4]
    if str(paid_mint) != mint:
        raise ChargeRefused(f"the transfer's mint is {paid_mint}, not {mint}")
    if mint_now is not None and mint_now.program != program:
        raise ChargeRefused(f"the transfer goes through {program}; {mint} is not its mint")
    if (problem := transfer_accounts_problem(accounts, paid_mint, mint_now)) is not None:
        raise ChargeRefused(problem)
    expected = associated_token_address(Pubkey.from_string(recipient), paid_mint, program)
    if destination != expected:
        raise ChargeRefused(f"the transfer goes to {destination}, not ATA(recipient) {expected}")
    paid, paid_decimals = struct.unpack_from("<QB", data, 1)
    fee = None
    if mint_now is not None and mint_now.has_fee:  # judged by what the recipient receives
        fee = mint_now.fee_for(paid)
        if (short := shortfall(mint_now, paid, amount)) is not None:
            raise ChargeRefused(f"the transfer pays {paid}, {short}")
    elif paid != amount:
        raise ChargeRefused(f"the transfer pays {paid}, the charge is {amount}")
    if paid_decimals != decimals:
        raise ChargeRefused(f"the transfer says {paid_decimals} decimals, the mint has {decimals}")
    if fee_payer is not None and authority == fee_payer:
        raise ChargeRefused("the fee payer cannot be the transfer's authority")
    signer = keys.index(authority)
    if signer >= msg.header.num_required_signatures or not tx.signatures[signer].verify(
        authority, to_bytes_versioned(msg)
    ):
        raise ChargeRefused("the token authority's signature does not verify")
    return Charge(program, source, destination, authority, paid, fee)


def require_fully_signed(tx: VersionedTransaction) -> None:
    """ChargeRefused unless every signature `tx` requires is there and verifies: a
    transaction the client pays the fee for is broadcast as-is (`feePayer: false`)."""
    msg = tx.message
    keys = list(msg.account_keys)
    needed = msg.header.num_required_signatures
    if len(tx.signatures) != needed or needed > len(keys):
        raise ChargeRefused("the transaction does not carry every signature it requires")
    message = to_bytes_versioned(msg)
    for key, signature in zip(keys[:needed], tx.signatures, strict=True):
        if not signature.verify(key, message):
            raise ChargeRefused(f"the signature of {key} does not verify")
