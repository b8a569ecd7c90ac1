"""svc_billing's session instructions with every account filled in (docs/adr/0024, 0026).

A session escrows a payer's deposit for vouchers (`svcpay.protocol.voucher`). A redeem
records the provider's claim (`redeem_session`, verified by the Ed25519 precompile in the
same transaction); `withdraw_session` pays it out. `redeem` returns the instructions that do
both (the precompile, the redeem pointing at it, the withdrawal), and `redeem_many` packs
several sessions' vouchers behind one precompile instruction. Amounts are integers in the
mint's base units.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from solders.instruction import AccountMeta, Instruction
from solders.pubkey import Pubkey
from solders.sysvar import INSTRUCTIONS
from spl.token.constants import TOKEN_PROGRAM_ID

from svcpay.program import pda
from svcpay.program.generated import instructions as gen
from svcpay.program.generated.accounts.session import Session
from svcpay.program.generated.types.open_session_args import OpenSessionArgs
from svcpay.program.generated.types.redeem_args import RedeemArgs
from svcpay.program.instructions import with_token_program
from svcpay.protocol.voucher import SignedVoucher, ed25519_instruction


def open_session(
    payer: Pubkey,
    session_id: int,
    *,
    signer: Pubkey,
    mint: Pubkey,
    payer_token: Pubkey,
    recipient: Pubkey,
    deposit: int,
    price: int,
    expires_at: int,
    dispute_secs: int,
    token_program: Pubkey = TOKEN_PROGRAM_ID,
    extra: Sequence[AccountMeta] = (),
) -> Instruction:
    """Opens `payer`'s session `session_id`, escrowing `deposit` from `payer_token` for
    vouchers by `signer`, redeemed to `recipient`. `extra`: a hooked mint's transfer-hook
    accounts (svcpay.program.tokens). A transfer-fee mint's fee is withheld on the way in:
    the session's deposit is what the vault received."""
    session = pda.session_address(payer, session_id)
    args = OpenSessionArgs(
        session_id=session_id,
        signer=signer,
        deposit=deposit,
        price=price,
        expires_at=expires_at,
        dispute_secs=dispute_secs,
    )
    ix = gen.open_session(
        {"args": args},
        {
            "payer": payer,
            "session": session,
            "vault": pda.vault_address(session),
            "mint": mint,
            "payer_token": payer_token,
            "recipient": recipient,
        },
    )
    return with_token_program(ix, token_program, extra)


def top_up(
    session: Session,
    address: Pubkey,
    amount: int,
    expires_at: int | None = None,
    *,
    extra: Sequence[AccountMeta] = (),
) -> Instruction:
    """Adds `amount` to the deposit of the session at `address` (its payer signs)."""
    ix = gen.top_up_session(
        {"amount": amount, "expires_at": expires_at},
        {
            "payer": session.payer,
            "session": address,
            "vault": pda.vault_address(address),
            "mint": session.mint,
            "payer_token": session.refund,
        },
    )
    return with_token_program(ix, session.token_program, extra)


def redeem_instruction(
    session: Session, address: Pubkey, voucher: SignedVoucher, ed25519_index: int
) -> Instruction:
    """`redeem_session` for `voucher`, verified by the precompile at `ed25519_index`: records
    the claim (no transfer)."""
    args = RedeemArgs(
        cumulative=voucher.cumulative, expiry=voucher.expiry, ed25519_index=ed25519_index
    )
    return gen.redeem_session({"args": args}, {"session": address, "instructions": INSTRUCTIONS})


def withdraw(
    session: Session, address: Pubkey, *, extra: Sequence[AccountMeta] = ()
) -> Instruction:
    """`withdraw_session`: pays the recipient what was redeemed and not yet paid out."""
    ix = gen.withdraw_session(
        {
            "session": address,
            "vault": pda.vault_address(address),
            "recipient": session.recipient,
            "mint": session.mint,
        }
    )
    return with_token_program(ix, session.token_program, extra)


def redeem(
    session: Session,
    address: Pubkey,
    voucher: SignedVoucher,
    at: int = 0,
    *,
    extra: Sequence[AccountMeta] = (),
) -> list[Instruction]:
    """The precompile instruction, the redeem and the withdrawal, for a transaction in which
    the precompile is instruction `at`."""
    return [
        ed25519_instruction([voucher]),
        redeem_instruction(session, address, voucher, at),
        withdraw(session, address, extra=extra),
    ]


def redeem_many(
    sessions: Sequence[tuple[Session, Pubkey, SignedVoucher]],
    at: int = 0,
    *,
    pay: bool = True,
    extra: Mapping[Pubkey, Sequence[AccountMeta]] | None = None,
) -> list[Instruction]:
    """One precompile instruction (at index `at`) verifying every voucher, a redeem per
    session, then (with `pay`) a withdrawal per session; `extra` (by session address): a
    hooked mint's transfer-hook accounts for that session's withdrawal."""
    extra = extra or {}
    ixs = [ed25519_instruction([v for _, _, v in sessions])]
    ixs += [redeem_instruction(s, a, v, at) for s, a, v in sessions]
    if pay:
        ixs += [withdraw(s, a, extra=extra.get(a, ())) for s, a, _ in sessions]
    return ixs


def request_close(session: Session, address: Pubkey) -> Instruction:
    """The payer asks to close: the provider keeps the dispute window to redeem."""
    return gen.request_close_session({"payer": session.payer, "session": address})


def close(
    session: Session,
    address: Pubkey,
    closer: Pubkey,
    *,
    extra: Sequence[AccountMeta] = (),
    fee_mint: bool = False,
) -> Instruction:
    """Pays the recipient what it is owed, refunds the rest of the vault to the payer and
    closes it; `closer` is the provider (any time) or the payer (after the dispute window).
    `fee_mint`: the mint is a Token-2022 transfer-fee mint, passed writable so the fees the
    vault withheld can be harvested into it before the vault closes."""
    ix = gen.close_session(
        {
            "closer": closer,
            "session": address,
            "vault": pda.vault_address(address),
            "refund": session.refund,
            "recipient": session.recipient,
            "payer": session.payer,
            "mint": session.mint,
        }
    )
    ix = with_token_program(ix, session.token_program, extra)
    if not fee_mint:
        return ix
    metas = [
        AccountMeta(m.pubkey, m.is_signer, True) if m.pubkey == session.mint else m
        for m in ix.accounts
    ]
    return Instruction(ix.program_id, ix.data, metas)
