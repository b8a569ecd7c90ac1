"""The facilitator as a running service: its parts wired together, and its background work.

`Facilitator(config)` opens the database (upgrading its schema), the RPC connection, and
builds the settler (and x402's /verify and /settle over it), the usage reporter and the
webhook deliverer. `run_background(stop)` runs, until `stop` is set: webhook delivery, the
billing crank, and the chain indexer (program events -> lifecycle events), each on its own
interval and each surviving its own errors. On start, settlements and usage reports
interrupted by a crash are recovered.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Confirmed
from solders.pubkey import Pubkey

from svcpay.facilitator import crank
from svcpay.facilitator.config import FacilitatorConfig
from svcpay.facilitator.db import redacted
from svcpay.facilitator.lifecycle import index_once
from svcpay.facilitator.settlement import RateLimit, Settler
from svcpay.facilitator.store import Store
from svcpay.facilitator.usage import UsageReporter
from svcpay.facilitator.webhooks import Deliverer, host_of
from svcpay.program.client import BillingClient
from svcpay.rpc_errors import rpc_unreachable
from svcpay.schemes.x402_exact.facilitator import X402Facilitator

log = logging.getLogger("svcpay.facilitator")
RECOVERY_INTERVAL_SECS = 30.0


class Facilitator:
    def __init__(self, config: FacilitatorConfig, store: Store | None = None) -> None:
        self.config = config
        self.keypair = config.keypair
        self.store = store or Store.open(config.database_url)
        self.rpc = AsyncClient(config.rpc_url, commitment=Confirmed)
        self.billing = BillingClient(self.rpc)
        self.settler = Settler(
            self.rpc,
            self.keypair,
            self.store,
            network=config.network,
            proof_ttl_secs=config.proof_ttl_secs,
            settle_unregistered=config.settle_unregistered,
            rate_limit=RateLimit(config.settle_rate_per_sec, config.settle_burst),
        )
        self.x402 = X402Facilitator(self.settler, config.network)
        self.usage = UsageReporter(self.store, self.billing, self.keypair)
        self.deliverer = Deliverer(self.store, allow_local=config.webhook_allow_local)
        self.past_due_retry_secs = config.past_due_retry_secs
        log.info(
            "facilitator %s: key %s, database %s, rpc host %s",
            config.instance,
            self.keypair.pubkey(),
            redacted(config.database_url),
            host_of(config.rpc_url),  # RPC URLs often carry an API key in the path or query
        )

    @property
    def public_key(self) -> str:
        return str(self.keypair.pubkey())

    async def recover(self) -> None:
        """Settlements and usage reports left unfinished (a crash, a timeout, a client or
        provider that never came back) are completed from the chain's answer."""
        finished = await self.settler.recover()
        handled = await self.usage.recover()
        if finished or handled:
            log.info("recovered %d settlements and %d usage reports", finished, handled)

    async def crank_once(
        self, progress: Callable[[crank.CrankSummary], None] | None = None
    ) -> crank.CrankSummary:
        """One billing run over the plans registered with this facilitator; `progress` is
        called after each transaction."""
        plans = [Pubkey.from_string(p) for p in await self.store.providers.plans()]
        summary = await crank.run_once(
            self.billing,
            self.keypair,
            plans,
            store=self.store,
            instance=self.config.instance,
            past_due_retry_secs=self.past_due_retry_secs,
            progress=progress,
        )
        if summary.due:
            log.info("billing run: %s", summary.to_json_dict())
        return summary

    async def index_once(self) -> int:
        return await index_once(self.rpc, self.store)

    async def run_background(self, stop: asyncio.Event) -> None:
        """The background loops; returns when `stop` is set."""
        loops: list[tuple[str, float, Callable[[], Awaitable[object]]]] = [
            ("recovery", RECOVERY_INTERVAL_SECS, self.recover),
            ("webhooks", self.config.webhook_interval_secs, self.deliverer.run_once),
            ("crank", self.config.crank_interval_secs, self.crank_once),
            ("indexer", self.config.indexer_interval_secs, self.index_once),
        ]
        rpc = RpcState()
        tasks = [
            asyncio.create_task(_every(name, interval, work, stop, rpc))
            for name, interval, work in loops
            if interval > 0
        ]
        await stop.wait()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def aclose(self) -> None:
        await self.deliverer.aclose()
        await self.rpc.close()
        await self.store.close()


class RpcState:
    """The RPC node's reachability as the background loops see it: one warning when it goes
    down, one when it is back, nothing per failed attempt in between."""

    def __init__(self) -> None:
        self.down_since: float | None = None

    def unreachable(self, reason: str) -> None:
        if self.down_since is None:
            self.down_since = time.monotonic()
            log.warning("rpc unreachable: %s (background work retries until it is back)", reason)

    def reachable(self, started: float) -> bool:
        """A pass that began at `started` (monotonic) succeeded. It proves the node is back
        only if it began after the outage was noticed: one that was already in flight says
        nothing. Returns whether the node counts as reachable."""
        if self.down_since is None:
            return True
        if started < self.down_since:
            return False
        log.warning("rpc back after %.0f s", time.monotonic() - self.down_since)
        self.down_since = None
        return True


async def _every(
    name: str,
    interval: float,
    work: Callable[[], Awaitable[object]],
    stop: asyncio.Event,
    rpc: RpcState | None = None,
) -> None:
    rpc = rpc or RpcState()
    failed_on_rpc = False
    while not stop.is_set():
        started = time.monotonic()
        try:
            await work()
        except Exception as e:  # each pass starts over from durable state; log, wait, retry
            reason = rpc_unreachable(e)
            if reason is None:
                log.exception("%s pass failed", name)
            else:
                failed_on_rpc = True
                rpc.unreachable(reason)
        else:
            if failed_on_rpc:  # this loop reached the node again
                failed_on_rpc = not rpc.reachable(started)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), interval)
