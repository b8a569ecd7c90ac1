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
import ipaddress
import logging
import random
import socket
import time
from urllib.parse import urlsplit

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
        allow_local: bool = False,
    ) -> None:
        """Unless `allow_local`, deliveries go only to public addresses over https (a
        provider's URL must not reach the facilitator's own network)."""
        self.store = store
        self.http = http or httpx.AsyncClient(timeout=timeout, follow_redirects=False)
        self.batch, self.lease_secs = batch, lease_secs
        self.first_retry_secs, self.give_up_after_secs = first_retry_secs, give_up_after_secs
        self._slots = asyncio.Semaphore(concurrency)
        self.allow_local = allow_local
        self.delivered = self.failed = 0
        self._unrecorded: list[DeliveryOutcome] = []  # sent, but not yet recorded

    async def run_once(self) -> int:
        """One pass: sends every due delivery (in batches); returns how many were tried.

        Outcomes the database could not take (it went away mid-pass) are kept and recorded
        first in the next pass, before anything is claimed: a delivery that succeeded is
        never sent again for want of its record. Only a crash between sending and recording
        loses an outcome; then the lease lapses and the delivery is sent again (at least
        once; receivers dedupe by event id)."""
        if self._unrecorded:
            await self.store.webhooks.record_attempts(self._unrecorded)
            self._unrecorded = []
        tried = 0
        while True:
            due = await self.store.webhooks.claim(limit=self.batch, lease_secs=self.lease_secs)
            if not due:
                return tried
            outcomes = await asyncio.gather(*(self._send(d) for d in due))
            try:
                await self.store.webhooks.record_attempts(outcomes)
            except Exception:
                self._unrecorded = list(outcomes)
                raise
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
            target, extensions = d.url, {}
            if not self.allow_local:
                address, refused = await resolve_public(d.url)
                if refused or address is None:
                    self.failed += 1
                    log.info("webhook %s to %s refused: %s", d.event_id, host_of(d.url), refused)
                    return DeliveryOutcome(d.id, False, None, f"refused: {refused}", None)
                # Connect to the address just checked (no second lookup an attacker's DNS
                # could answer differently); the name stays in Host and in TLS (SNI and the
                # certificate check).
                parts = urlsplit(d.url)
                headers["Host"] = parts.netloc
                extensions = {"sni_hostname": parts.hostname or ""}
                literal = f"[{address}]" if ":" in address else address
                netloc = literal + (f":{parts.port}" if parts.port else "")
                target = parts._replace(netloc=netloc).geturl()
            try:
                response = await self.http.post(
                    target, content=d.body, headers=headers, extensions=extensions
                )
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
        log.info(
            "webhook %s to %s failed (%s), attempt %d", d.event_id, host_of(d.url), error, attempts
        )
        return DeliveryOutcome(d.id, False, status, error, retry_at)

    async def aclose(self) -> None:
        await self.http.aclose()


def host_of(url: str) -> str:
    """For logs: the URL's host only (paths and queries may carry tokens)."""
    try:
        return urlsplit(url).hostname or "?"
    except ValueError:
        return "?"


def local_address(address: str) -> bool:
    """Loopback, private, link-local, shared (CGNAT), multicast, reserved or unspecified."""
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
        ip = ip.ipv4_mapped
    return not ip.is_global or ip.is_multicast


def check_endpoint_url(url: str, *, allow_local: bool) -> str | None:
    """Why `url` cannot be a webhook endpoint, or None. Without `allow_local`: https only,
    and a literal address must be public (names are checked again at each delivery)."""
    try:
        parts = urlsplit(url)
        host = parts.hostname
    except ValueError:
        return "url must be an absolute http(s) URL"
    if parts.scheme not in ("http", "https") or not host:
        return "url must be an absolute http(s) URL"
    if parts.username is not None or parts.password is not None:
        return "url must not carry credentials (user:password@)"
    if allow_local:
        return None
    if parts.scheme != "https":
        return "url must use https"
    try:
        if local_address(host):
            return "url must not point at a private, loopback or link-local address"
    except ValueError:
        pass  # a name: resolved and checked when delivering
    return None


async def refused_destination(url: str) -> str | None:
    """Why a delivery to `url` must not be made now, or None."""
    return (await resolve_public(url))[1]


async def resolve_public(url: str) -> tuple[str | None, str | None]:
    """(the address to deliver to, None), or (None, why not): the host must resolve, and
    only to public addresses. Checked at every delivery, since DNS can change."""
    try:
        parts = urlsplit(url)
        host, port = parts.hostname or "", parts.port or 443
    except ValueError:
        return None, "not a URL"
    if parts.scheme != "https":
        return None, "only https endpoints are allowed"
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as e:
        return None, f"{host} does not resolve ({e.strerror or e})"
    addresses = [str(info[4][0]) for info in infos]
    if not addresses or any(local_address(a) for a in addresses):
        return None, f"{host} resolves to a private, loopback or link-local address"
    return addresses[0], None
