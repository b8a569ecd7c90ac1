"""Sessions on chain, for payers, providers and the facilitator (docs/adr/0024).

`Sessions(billing)` opens, tops up, redeems and closes sessions through a `BillingClient`;
`redeem` packs the newest vouchers of many sessions into as few transactions as the size
limit allows, one Ed25519 precompile instruction each.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping, Sequence

from solana.rpc.commitment import Confirmed
from solders.hash import Hash
from solders.instruction import AccountMeta
from solders.keypair import Keypair
from solders.message import MessageV0
from solders.pubkey import Pubkey
from spl.token.instructions import get_associated_token_address

from svcpay.program import pda, sessions
from svcpay.program.client import BillingClient, Receipt
from svcpay.program.generated.accounts.session import Session
from svcpay.protocol.voucher import SignedVoucher

MAX_TX_BYTES = 1232  # Solana's packet limit for a serialized transaction


class Sessions:
    def __init__(self, billing: BillingClient) -> None:
        self.billing = billing

    async def fetch(self, address: Pubkey) -> Session | None:
        """The session at `address`; None when there is none, or only a closed session's
        tombstone (`buried`)."""
        info = (await self.billing.rpc.get_account_info(address, Confirmed)).value
        # The owner first: anyone can make an account whose bytes look like a session.
        if info is None or info.owner != self.billing.program_id:
            return None
        if bytes(info.data[:8]) != Session.discriminator:
            return None
        return Session.decode(bytes(info.data))

    async def buried(self, address: Pubkey) -> bool:
        """Whether `address` holds a closed session's tombstone: an empty account of the
        program, which keeps the address (and its vouchers) from reuse (docs/adr/0037)."""
        info = (await self.billing.rpc.get_account_info(address, Confirmed)).value
        return info is not None and info.owner == self.billing.program_id and not info.data

    async def token_amount(self, account: Pubkey) -> int | None:
        """The balance of a token account in base units; None if it is not one."""
        info = (await self.billing.rpc.get_account_info(account, Confirmed)).value
        if info is None or len(info.data) < 72:
            return None
        return int.from_bytes(bytes(info.data[64:72]), "little")

    async def open(
        self,
        payer: Keypair,
        *,
        mint: Pubkey,
        recipient: Pubkey,
        deposit: int,
        price: int,
        expires_at: int,
        dispute_secs: int,
        signer: Pubkey | None = None,
        session_id: int | None = None,
        payer_token: Pubkey | None = None,
    ) -> Pubkey:
        """Opens a session of `payer` (its associated token account of `mint` pays the
        deposit unless `payer_token` names another; vouchers are signed by `signer`, the
        payer by default); returns its address, the vouchers' channel id."""
        mint_info = (await self.billing.rpc.get_account_info(mint, Confirmed)).value
        if mint_info is None:
            raise ValueError(f"the mint {mint} does not exist on this cluster")
        token_program = mint_info.owner
        session_id = secrets.randbits(64) if session_id is None else session_id
        source = payer_token or get_associated_token_address(payer.pubkey(), mint, token_program)
        address = pda.session_address(payer.pubkey(), session_id, self.billing.program_id)
        route = await self.billing.tokens.route(
            mint,
            source=source,
            destination=pda.vault_address(address, self.billing.program_id),
            authority=payer.pubkey(),
            amount=deposit,
        )
        ix = sessions.open_session(
            payer.pubkey(), session_id, signer=signer or payer.pubkey(), mint=mint,
            payer_token=source, recipient=recipient, deposit=deposit, price=price,
            expires_at=expires_at, dispute_secs=dispute_secs, token_program=token_program,
            extra=route.extra,
        )  # fmt: skip
        await self.billing.send([ix], [payer])
        return pda.session_address(payer.pubkey(), session_id)

    async def _session(self, address: Pubkey) -> Session:
        found = await self.fetch(address)
        if found is None:
            raise ValueError(f"no session at {address}")
        return found

    async def top_up(
        self, address: Pubkey, payer: Keypair, amount: int, expires_at: int | None = None
    ) -> Receipt:
        session = await self._session(address)
        route = await self.billing.tokens.route(
            session.mint,
            source=session.refund,
            destination=session.vault,
            authority=session.payer,
            amount=amount,
        )
        ix = sessions.top_up(session, address, amount, expires_at, extra=route.extra)
        return await self.billing.send([ix], [payer])

    async def request_close(self, address: Pubkey, payer: Keypair) -> Receipt:
        ix = sessions.request_close(await self._session(address), address)
        return await self.billing.send([ix], [payer])

    async def close(self, address: Pubkey, closer: Keypair) -> Receipt:
        session = await self._session(address)
        route = await self.billing.tokens.route(
            session.mint,
            source=session.vault,
            destination=session.recipient,
            authority=address,
            amount=max(session.deposit - session.withdrawn, 0),
        )
        fee_mint = route.mint is not None and route.mint.fee_config is not None
        ix = sessions.close(session, address, closer.pubkey(), extra=route.extra, fee_mint=fee_mint)
        return await self.billing.send([ix], [closer])

    async def redeem(self, vouchers: Sequence[SignedVoucher], fee_payer: Keypair) -> list[Receipt]:
        """Redeems `vouchers` (at most one per session: the newest), as many sessions per
        transaction as fit; returns a receipt per transaction."""
        states = [(await self._session(v.channel), v.channel, v) for v in vouchers]
        extra = await withdraw_extras(self.billing, states)
        receipts = []
        limit = MAX_TX_BYTES - self.billing.budget_bytes
        for group in pack(states, fee_payer.pubkey(), extra=extra, limit=limit):
            ixs = sessions.redeem_many(group, extra=extra)
            receipts.append(await self.billing.send(ixs, [fee_payer]))
        return receipts


async def withdraw_extras(
    billing: BillingClient, items: Sequence[tuple[Session, Pubkey, SignedVoucher]]
) -> dict[Pubkey, tuple[AccountMeta, ...]]:
    """The transfer-hook accounts of each session's withdrawal (none for most mints: a mint
    is read once a minute, a hooked one's accounts per withdrawal)."""
    found: dict[Pubkey, tuple[AccountMeta, ...]] = {}
    for session, address, voucher in items:
        route = await billing.tokens.route(
            session.mint,
            source=session.vault,
            destination=session.recipient,
            authority=address,
            amount=max(voucher.cumulative - session.withdrawn, 0),
        )
        if route.extra:
            found[address] = route.extra
    return found


def pack(
    items: Sequence[tuple[Session, Pubkey, SignedVoucher]],
    payer: Pubkey,
    *,
    pay: bool = True,
    extra: Mapping[Pubkey, Sequence[AccountMeta]] | None = None,
    limit: int = MAX_TX_BYTES,
) -> list[list[tuple[Session, Pubkey, SignedVoucher]]]:
    """Greedy groups of redeems (withdrawals too, with `pay`, each with its `extra` hook
    accounts) whose transaction fits in `limit` bytes (less than MAX_TX_BYTES when a
    compute budget goes in front: BillingClient.budget_bytes)."""
    groups: list[list[tuple[Session, Pubkey, SignedVoucher]]] = []
    for item in items:
        if groups and _size([*groups[-1], item], payer, pay, extra) <= limit:
            groups[-1].append(item)
        else:
            groups.append([item])
    return groups


def _size(
    group: list[tuple[Session, Pubkey, SignedVoucher]],
    payer: Pubkey,
    pay: bool,
    extra: Mapping[Pubkey, Sequence[AccountMeta]] | None = None,
) -> int:
    ixs = sessions.redeem_many(group, pay=pay, extra=extra)
    message = MessageV0.try_compile(payer, ixs, [], Hash.default())
    return 1 + 64 * message.header.num_required_signatures + len(bytes(message))
