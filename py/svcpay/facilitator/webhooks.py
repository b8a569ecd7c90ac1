"""Webhook delivery from the durable outbox (store.webhook_deliveries).

Each pass claims due deliveries under a lease, POSTs them concurrently with a signature
(svcpay.webhooks), and records the outcome: 2xx is delivered; anything else (a status, a
timeout, a refused connection) is retried with exponential backoff (30 s doubling to at
most 6 h, with jitter) until three days after the event, then the delivery is dead. A
crash mid-delivery only delays it: the lease lapses and the next pass sends it again, so
delivery is at least once and receivers dedupe by event id.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time

import httpx

from svcpay.facilitator.store import Delivery, DeliveryOutcome, Store
from svcpay.webhooks import EVENT_ID_HEADER, SIGNATURE_HEADER, sign_webhook

log = logging.getLogger("svcpay.webhooks")

FIRST_RETRY_SECS = 30
MAX_RETRY_SECS = 6 * 3600
GIVE_UP_AFTER_SECS = 3 * 86400


def retry_delay(attempts: int, *, first: int = FIRST_RETRY_SECS) -> int:
    """Seconds before the next try after `attempts` failed ones (1, 2, ...), +-10% jitter."""
    base = min(first * 2 ** max(attempts - 1, 0), MAX_RETRY_SECS)
    return max(1, int(base * random.uniform(0.9, 1.1)))


class Deliverer:
    def __init__(
        self,
        store: Store,
        http: httpx.AsyncClient | None = None,
        *,
        batch: int = 50,
        concurrency: int = 16,
        timeout: float = 10.0,
        lease_secs: int = 60,
        first_retry_secs: int = FIRST_RETRY_SECS,
        give_up_after_secs: int = GIVE_UP_AFTER_SECS,
    ) -> None:
        self.store = store
        self.http = http or httpx.AsyncClient(timeout=timeout, follow_redirects=False)
        self.batch, self.lease_secs = batch, lease_secs
        self.first_retry_secs, self.give_up_after_secs = first_retry_secs, give_up_after_secs
        self._slots = asyncio.Semaphore(concurrency)
        self.delivered = self.failed = 0

    async def run_once(self) -> int:
        """One pass: sends every due delivery (in batches); returns how many were tried."""
        tried = 0
        while True:
            due = await self.store.claim_deliveries(limit=self.batch, lease_secs=self.lease_secs)
            if not due:
                return tried
            outcomes = await asyncio.gather(*(self._send(d) for d in due))
            await self.store.record_attempts(outcomes)
            tried += len(due)

    async def run(self, stop: asyncio.Event, interval: float = 1.0) -> None:
        """Delivers until `stop` is set, polling the outbox every `interval` seconds."""
        while not stop.is_set():
            try:
                await self.run_once()
            except Exception:  # the outbox keeps everything; log and try again later
                log.exception("webhook delivery pass failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), interval)

    async def _send(self, d: Delivery) -> DeliveryOutcome:
        async with self._slots:
            headers = {
                "Content-Type": "application/json",
                "User-Agent": "svcpay-webhooks/1",
                SIGNATURE_HEADER: sign_webhook(d.secret, d.body),
                EVENT_ID_HEADER: d.event_id,
            }
            status: int | None = None
            try:
                response = await self.http.post(d.url, content=d.body, headers=headers)
                status = response.status_code
                if 200 <= status < 300:
                    self.delivered += 1
                    return DeliveryOutcome(d.id, True, status)
                error = f"HTTP {status}"
            except httpx.HTTPError as e:
                error = f"{type(e).__name__}: {e}"
        self.failed += 1
        attempts = d.attempts + 1
        retry_at: int | None = int(time.time()) + retry_delay(attempts, first=self.first_retry_secs)
        if d.created_at + self.give_up_after_secs < (retry_at or 0):
            retry_at = None
        log.info("webhook %s to %s failed (%s), attempt %d", d.event_id, d.url, error, attempts)
        return DeliveryOutcome(d.id, False, status, error, retry_at)

    async def aclose(self) -> None:
        await self.http.aclose()
