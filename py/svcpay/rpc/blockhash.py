"""A blockhash worth signing with (issue 37, docs/adr/0036): one that can still land.

A node that lags (behind a load balancer, or stuck) can answer `getLatestBlockhash` with a
blockhash whose life is nearly or wholly spent. A transaction signed with it expires
unlanded, and whoever waits for it learns so only when the rebroadcast gives up, seconds
later; a renewal is that much late. So the block height is read beside the blockhash (one
more call, at the same time), and a blockhash with fewer than `MIN_BLOCKS_LEFT` blocks of
life is asked for again, once a second, for at most `wait_secs`; then `StaleBlockhash` says
that the node lags.
"""

from __future__ import annotations

import asyncio
import logging
import time

from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Commitment, Confirmed
from solders.rpc.responses import RpcBlockhash

log = logging.getLogger("svcpay.rpc")

# About 10 s at 400 ms a block: time for the first sends, their rebroadcasts and the polls
# that see them land. A fresh blockhash has about 150.
MIN_BLOCKS_LEFT = 25
WAIT_SECS = 15.0
ASK_AGAIN_SECS = 1.0


class StaleBlockhash(RuntimeError):
    """Every blockhash the node gave within the wait had (almost) expired: it lags."""


async def fresh_blockhash(
    rpc: AsyncClient, commitment: Commitment = Confirmed, *, wait_secs: float = WAIT_SECS
) -> RpcBlockhash:
    """The node's latest blockhash, once it has at least `MIN_BLOCKS_LEFT` blocks to live by
    the block height read beside it; raises `StaleBlockhash` after `wait_secs` without."""
    deadline = time.monotonic() + wait_secs
    while True:
        answer, height = await asyncio.gather(
            rpc.get_latest_blockhash(commitment), rpc.get_block_height(commitment)
        )
        latest = answer.value
        left = latest.last_valid_block_height - height.value
        if left >= MIN_BLOCKS_LEFT:
            return latest
        message = (
            f"the RPC node's latest blockhash {latest.blockhash} has {max(left, 0)} blocks "
            f"left (valid through height {latest.last_valid_block_height}, the chain is at "
            f"{height.value}): the node lags the cluster"
        )
        if time.monotonic() + ASK_AGAIN_SECS > deadline:
            raise StaleBlockhash(f"{message}; asked for {wait_secs:.0f} s, give another RPC URL")
        log.debug("%s; asking again", message)
        await asyncio.sleep(ASK_AGAIN_SECS)
