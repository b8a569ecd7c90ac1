"""Whether an x402 payment this client signed can never land and never did, so that signing
a new one pays once (issue 37; docs/adr/0036).

An x402 transaction's id is the facilitator's signature, which the client never sees, so it
cannot ask for its status. It can tell two things alone: the block height is past the last
valid height of the blockhash it signed with (read with that blockhash; a lagging node only
answers "not yet"), so the transfer can never land from now on; and the payer's token
account shows no transaction with the message it signed, so it did not land before. Both,
and only both, make a refused payment safe to sign again. A question the node cannot answer
counts as "it may have landed".
"""

from __future__ import annotations

import logging

from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Confirmed
from solders.signature import Signature
from solders.transaction import VersionedTransaction

log = logging.getLogger("svcpay.client")
HISTORY = 50  # the payer's latest transactions looked through for the one it signed


async def expired_unpaid(
    rpc: AsyncClient, tx: VersionedTransaction, last_valid_block_height: int | None
) -> bool:
    """True when `tx` (a payer-signed x402 transfer: its third instruction is the transfer,
    whose first account is the payer's token account) can no longer land and did not."""
    if last_valid_block_height is None:
        return False  # a blockhash this client did not read (the server's): cannot tell
    try:
        # One read gives the height and the slot it was read at; the history must come from
        # a node at least that far along (a failed-over or load-balanced node that lags
        # refuses rather than answering without the transfer).
        epoch = (await rpc.get_epoch_info(Confirmed)).value
        if epoch.block_height <= last_valid_block_height:
            return False  # it may still land
        keys = tx.message.account_keys
        source = keys[tx.message.instructions[2].accounts[0]]
        found = (
            await rpc.get_signatures_for_address(
                source, limit=HISTORY, commitment=Confirmed, min_context_slot=epoch.absolute_slot
            )
        ).value
        for entry in found:
            if await _may_be(rpc, entry.signature, tx):
                return False  # it landed (or cannot be ruled out): never paid twice
        return len(found) < HISTORY  # else it may be older than what was looked through
    except Exception as e:  # the node cannot say: as if it may have landed
        log.debug("cannot tell whether an x402 payment landed: %s", e)
        return False


async def _may_be(rpc: AsyncClient, signature: Signature, tx: VersionedTransaction) -> bool:
    """Whether the transaction `signature` may be `tx` (True unless it reads as another)."""
    landed = (
        await rpc.get_transaction(
            signature, "base64", commitment=Confirmed, max_supported_transaction_version=0
        )
    ).value
    if landed is None:
        return True  # listed but not readable (not indexed yet, pruned): cannot rule it out
    found = landed.transaction.transaction
    return not isinstance(found, VersionedTransaction) or bytes(found.message) == bytes(tx.message)
