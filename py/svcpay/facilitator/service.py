"""The facilitator as a running service: its parts wired together, and its background work.

`Facilitator(config)` opens the database (upgrading its schema), the RPC connection, and
builds the settler (and x402's /verify and /settle over it), the usage reporter, the
session redeemer and the webhook deliverer. `run_background(stop)` runs, until `stop` is
set: webhook delivery, the billing crank, session redeems, and the chain indexer (program
events -> lifecycle events), each on its own interval and each surviving its own errors. On
start, settlements and usage reports interrupted by a crash are recovered.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace

from solders.pubkey import Pubkey

from svcpay.facilitator import crank
from svcpay.facilitator.config import FacilitatorConfig
from svcpay.facilitator.crank import MIN_NEXT_RUN_SECS, NEXT_RUN_MARGIN_SECS
from svcpay.facilitator.db import redacted
from svcpay.facilitator.indexer import Backlog
from svcpay.facilitator.lifecycle import index_once
from svcpay.facilitator.outage import Dependencies
from svcpay.facilitator.sessions import RedeemSummary, SessionRedeemer
from svcpay.facilitator.settlement import RateLimit, Settler
from svcpay.facilitator.store import Store
from svcpay.facilitator.usage import UsageReporter
from svcpay.facilitator.webhooks import Deliverer, host_of
from svcpay.program.client import BillingClient
from svcpay.rpc import RpcSettings, connect
from svcpay.rpc.fees import FeeSettings, PriorityFees
from svcpay.schemes.mpp_charge.facilitator import ChargeFacilitator
from svcpay.schemes.x402_exact.facilitator import X402Facilitator

log = logging.getLogger("svcpay.facilitator")
RECOVERY_INTERVAL_SECS = 30.0
# After a failed pass: the next one 1 s later, doubling to 5 s, so work resumes within
# seconds of the database or the RPC node coming back.
BACKOFF_FIRST_SECS = 1.0
BACKOFF_MOST_SECS = 5.0
WATCH_INTERVAL_SECS = 1.0
STOP_GRACE_SECS = 5.0


class Facilitator:
    def __init__(self, config: FacilitatorConfig, store: Store | None = None) -> None:
        self.config = config
        self.keypair = config.keypair
        self.store = store or Store.open(config.database_url)
        self.rpc = connect(RpcSettings.parse(config.rpc_url, config.rpc_rate))
        fee_settings = FeeSettings(config.priority_fee_percentile, cap=config.priority_fee_cap)
        self.billing = BillingClient(self.rpc, fees=PriorityFees(self.rpc, fee_settings))
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
        self.mpp_charge = ChargeFacilitator(self.settler)
        self.usage = UsageReporter(self.store, self.billing, self.keypair)
        self.sessions = SessionRedeemer(
            self.store,
            self.billing,
            self.keypair,
            instance=config.instance,
            redeem_secs=config.session_redeem_secs,
            redeem_at=config.session_redeem_at,
            lease_secs=config.crank_lease_secs,
        )
        self.deliverer = Deliverer(
            self.store,
            allow_local=config.webhook_allow_local,
            first_retry_secs=config.webhook_retry_secs,
        )
        self.past_due_retry_secs = config.past_due_retry_secs
        self.dependencies = Dependencies()  # what routes and loops saw of the database, RPC
        self.backlog = Backlog()  # the indexer's listed, unread transactions: listed once
        log.info(
            "facilitator %s: key %s, database %s, rpc host %s",
            config.instance,
            self.keypair.pubkey(),
            redacted(config.database_url),
            host_of(config.rpc_url),  # RPC URLs often carry an API key in the path or query
        )

    def on_network(self, network: str) -> None:
        """Settles and names `network` from now on: the RPC node's cluster, read at start
        (`svcpay facilitator serve`; docs/adr/0038)."""
        self.config = replace(self.config, network=network)
        self.settler.network = self.x402.network = network

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
            lease_secs=self.config.crank_lease_secs,
            past_due_retry_secs=self.past_due_retry_secs,
            progress=progress,
        )
        if summary.due:
            log.info("billing run: %s", summary.to_json_dict())
        return summary

    async def redeem_once(self) -> RedeemSummary:
        summary = await self.sessions.run_once()
        if summary.due or summary.failed:
            log.info("session redeems: %s", summary.to_json_dict())
        return summary

    async def index_once(self) -> int:
        return await index_once(self.rpc, self.store, backlog=self.backlog)

    async def run_background(self, stop: asyncio.Event) -> None:
        """The background loops; returns when `stop` is set (a pass still running then is
        cancelled after STOP_GRACE_SECS, its leases given back)."""
        loops: list[tuple[str, float, Callable[[], Awaitable[object]]]] = [
            ("recovery", RECOVERY_INTERVAL_SECS, self.recover),
            ("webhooks", self.config.webhook_interval_secs, self.deliverer.run_once),
            ("crank", self.config.crank_interval_secs, self.crank_once),
            ("indexer", self.config.indexer_interval_secs, self.index_once),
            ("sessions", self.config.session_interval_secs, self.redeem_once),
        ]
        tasks = [
            asyncio.create_task(_every(name, interval, work, stop, self.dependencies))
            for name, interval, work in loops
            if interval > 0
        ]
        tasks.append(asyncio.create_task(self._watch(stop)))
        await stop.wait()
        _, running = await asyncio.wait(tasks, timeout=STOP_GRACE_SECS)
        for task in running:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _watch(self, stop: asyncio.Event) -> None:
        """While the database or the RPC node is down, asks it every WATCH_INTERVAL_SECS
        whether it is back, so the log says so at once (the loops retry on their own backoff,
        at most BACKOFF_MOST_SECS apart)."""
        deps = self.dependencies
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), WATCH_INTERVAL_SECS)
            for dep, probe in ((deps.database, self.store.ping), (deps.rpc, self._rpc_answers)):
                started = time.monotonic()
                if dep.down and await probe():
                    dep.answered(started)

    async def _rpc_answers(self) -> bool:
        try:
            await asyncio.wait_for(self.rpc.get_slot(), WATCH_INTERVAL_SECS)
        except Exception:  # any failure to answer is "still down"
            return False
        return True

    async def aclose(self) -> None:
        await self.deliverer.aclose()
        await self.settler.lander.aclose()  # a flight left is recovered after a restart
        await self.billing.lander.aclose()  # renewals and redeems: retried by the next pass
        await self.rpc.close()
        await self.store.close()


def next_run_delay(interval: float, hint: float, took: float) -> float:
    """How long to wait after a pass that took `took` seconds and asked for the next one
    `hint` seconds after it read the clock (near its start): a slow pass (dropped sends,
    429s) must not push every later renewal back by its own length."""
    return min(interval, max(MIN_NEXT_RUN_SECS, hint + NEXT_RUN_MARGIN_SECS - took))


async def _every(
    name: str,
    interval: float,
    work: Callable[[], Awaitable[object]],
    stop: asyncio.Event,
    dependencies: Dependencies | None = None,
) -> None:
    """Runs `work` every `interval` seconds until `stop` is set. A pass that fails waits
    BACKOFF_FIRST_SECS, doubling to BACKOFF_MOST_SECS (never longer than `interval`), before
    the next; an outage is logged once by `dependencies`, any other error once until a pass
    succeeds. A pass may ask for the next one sooner (a CrankSummary's `next_run_in`)."""
    deps = dependencies or Dependencies()
    failures = 0
    last_error = ""
    while not stop.is_set():
        delay = interval
        began = time.monotonic()
        try:
            done = await work()
        except Exception as e:  # each pass starts over from durable state
            failures += 1
            delay = min(interval, BACKOFF_FIRST_SECS * 2 ** (failures - 1), BACKOFF_MOST_SECS)
            if deps.failed(e) is None:
                error = f"{type(e).__name__}: {e}"
                if error != last_error:
                    log.exception("%s pass failed (logged once until a pass succeeds)", name)
                    last_error = error
                else:
                    log.debug("%s pass failed again", name, exc_info=True)
        else:
            failures, last_error = 0, ""
            hint = getattr(done, "next_run_in", None)
            if isinstance(hint, int | float):
                delay = next_run_delay(interval, hint, time.monotonic() - began)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), delay)
