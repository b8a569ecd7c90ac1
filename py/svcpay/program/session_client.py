"""Sessions on chain, for payers, providers and the facilitator (docs/adr/0024).

`Sessions(billing)` opens, tops up, redeems and closes sessions through a `BillingClient`;
`redeem` packs the newest vouchers of many sessions into as few transactions as the size
limit allows, one Ed25519 precompile instruction each.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence

from solana.rpc.commitment import Confirmed
from solders.hash import Hash
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
        info = (await self.billing.rpc.get_account_info(address, Confirmed)).value
        # The owner first: anyone can make an account whose bytes look like a session.
        if info is None or info.owner != self.billing.program_id:
            return None
        if bytes(info.data[:8]) != Session.discriminator:
            return None
        return Session.decode(bytes(info.data))

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
        ix = sessions.open_session(
            payer.pubkey(), session_id, signer=signer or payer.pubkey(), mint=mint,
            payer_token=source, recipient=recipient, deposit=deposit, price=price,
            expires_at=expires_at, dispute_secs=dispute_secs, token_program=token_program,
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
        ix = sessions.top_up(await self._session(address), address, amount, expires_at)
        return await self.billing.send([ix], [payer])

    async def request_close(self, address: Pubkey, payer: Keypair) -> Receipt:
        ix = sessions.request_close(await self._session(address), address)
        return await self.billing.send([ix], [payer])

    async def close(self, address: Pubkey, closer: Keypair) -> Receipt:
        ix = sessions.close(await self._session(address), address, closer.pubkey())
        return await self.billing.send([ix], [closer])

    async def redeem(self, vouchers: Sequence[SignedVoucher], fee_payer: Keypair) -> list[Receipt]:
        """Redeems `vouchers` (at most one per session: the newest), as many sessions per
        transaction as fit; returns a receipt per transaction."""
        states = [(await self._session(v.channel), v.channel, v) for v in vouchers]
        receipts = []
        for group in pack(states, fee_payer.pubkey()):
            receipts.append(await self.billing.send(sessions.redeem_many(group), [fee_payer]))
        return receipts


def pack(
    items: Sequence[tuple[Session, Pubkey, SignedVoucher]], payer: Pubkey, *, pay: bool = True
) -> list[list[tuple[Session, Pubkey, SignedVoucher]]]:
    """Greedy groups of redeems (withdrawals too, with `pay`) whose transaction fits in
    MAX_TX_BYTES."""
    groups: list[list[tuple[Session, Pubkey, SignedVoucher]]] = []
    for item in items:
        if groups and _size([*groups[-1], item], payer, pay) <= MAX_TX_BYTES:
            groups[-1].append(item)
        else:
            groups.append([item])
    return groups


def _size(group: list[tuple[Session, Pubkey, SignedVoucher]], payer: Pubkey, pay: bool) -> int:
    ixs = sessions.redeem_many(group, pay=pay)
    message = MessageV0.try_compile(payer, ixs, [], Hash.default())
    return 1 + 64 * message.header.num_required_signatures + len(bytes(message))
