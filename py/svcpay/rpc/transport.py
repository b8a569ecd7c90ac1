"""One way to talk to the chain (issue 37): an HTTP transport under solana-py's AsyncClient
that treats a real cluster's RPC providers as they are.

- **Transient is not down.** HTTP 429, a 5xx, a timeout or a dropped connection makes the
  endpoint rest (for the `Retry-After` it sent, else an exponential backoff with jitter, at
  most 2 s) and the call go on: to the next endpoint, or to the same one once it has rested,
  until the call's budget (`RpcSettings.budget_secs`) is spent. Only then does the caller see
  the failure, which `svcpay.rpc_errors` classifies as the RPC node being unreachable (a 503
  with Retry-After, never a 500). An endpoint that refuses the connection is down: a call
  with no other endpoint to try fails at once (an outage is answered in milliseconds, and
  noticed over within 2 s of the node's return).
- **Under the provider's limit, not at it.** Each endpoint takes at most `rate` requests a
  second (spaced evenly), so a burst of payments queues here instead of being refused there.
- **Several URLs.** Reads go to the first endpoint that is not resting, in the order given
  (fail-over); `sendTransaction` goes to every endpoint that is not resting, at once, and the
  first answer is the call's.
- **One log line per state change** of an endpoint (rate-limited, down, back; down only
  with several URLs: one URL's outage is its caller's line to log), as the
  database's outages are logged: rate-limiting is over once 30 s pass without a 429, so a
  provider that refuses one call in five is one line, not two per refusal. URLs are logged
  without path or query (they hold API keys).
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import logging
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx2

log = logging.getLogger("svcpay.rpc")

# Methods whose copies go to every endpoint: a transaction lands through any leader path.
SEND_METHODS = frozenset({"sendTransaction"})
BACKOFF_FIRST_SECS = 0.25
BACKOFF_MOST_SECS = 2.0  # a node back from an outage is used again within this
RETRY_AFTER_MOST_SECS = 60.0  # a provider's Retry-After is honoured up to this
QUIET_SECS = 30.0  # rate-limiting has stopped after this long without a 429


@dataclass(frozen=True)
class RpcSettings:
    """How the facilitator, the gate and the clients talk to the RPC provider.

    urls: one or more endpoints of one cluster; reads fail over in this order, sends go to
        all of them.
    rate: requests a second to each endpoint at most (None: no limit of ours). Set it under
        the provider's plan limit.
    budget_secs: how long one call keeps trying through 429s, 5xxs and timeouts before its
        caller sees the failure.
    timeout_secs: one HTTP request's timeout.
    """

    urls: tuple[str, ...]
    rate: float | None = None
    budget_secs: float = 10.0
    timeout_secs: float = 10.0

    def __post_init__(self) -> None:
        if not self.urls:
            raise ValueError("at least one RPC URL")
        for url in self.urls:
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError(f"{url!r} is not an http(s) URL of an RPC node")
        if self.rate is not None and not self.rate > 0:
            raise ValueError(f"the RPC rate must be above 0 requests a second, not {self.rate}")
        if not self.budget_secs >= 0:
            raise ValueError(f"the RPC retry budget must be 0 s or more, not {self.budget_secs}")

    @classmethod
    def parse(cls, urls: str | Sequence[str], rate: float | None = None) -> RpcSettings:
        """From one URL, a comma-separated list, or a sequence of them."""
        listed = urls.split(",") if isinstance(urls, str) else list(urls)
        return cls(tuple(u.strip() for u in listed if u.strip()), rate)


def shown(url: str) -> str:
    """`url` as logs show it: scheme, host and port (a path or query may hold an API key)."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc.rsplit('@', 1)[-1]}" if parts.netloc else "?"


def _retry_after(response: httpx2.Response) -> float | None:
    """The seconds a 429 or 503 asks to wait (delta-seconds or an HTTP date), if it says."""
    value = response.headers.get("retry-after", "").strip()
    if not value:
        return None
    if value.isdigit():
        return min(float(value), RETRY_AFTER_MOST_SECS)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, min(when.timestamp() - time.time(), RETRY_AFTER_MOST_SECS))


class Endpoint:
    """One RPC URL: its connection pool, its request spacing, its state."""

    def __init__(self, url: str, rate: float | None, *, announce_down: bool = True) -> None:
        self.url = url
        # With one URL, its outage is the caller's to log (the facilitator's "rpc
        # unreachable", the gate's 503): a second line would say the same.
        self.announce_down = announce_down
        self.name = shown(url)
        self.transport = httpx2.AsyncHTTPTransport()
        self.spacing = 1.0 / rate if rate else 0.0
        self.next_slot = 0.0  # monotonic time of the next request this endpoint may take
        self.resting_until = 0.0
        self.failures = 0
        self.state = "ok"  # ok, rate-limited, down
        self.unreachable = False  # the last failure was a refused connection
        self.requests = 0
        self.refused = 0  # 429s, 5xxs and failed connections seen
        self.refused_before = 0  # `refused` when the current state began
        self.since = 0.0  # when the current state began
        self.last_refusal = 0.0

    async def slot(self) -> None:
        """Waits for this endpoint's next request slot (`rate`)."""
        if not self.spacing:
            return
        now = time.monotonic()
        at = max(now, self.next_slot)
        self.next_slot = at + self.spacing
        if at > now:
            await asyncio.sleep(at - now)

    def resting(self, now: float) -> bool:
        return self.resting_until > now

    def _backoff(self) -> float:
        step = min(BACKOFF_MOST_SECS, BACKOFF_FIRST_SECS * 2 ** min(self.failures, 10))
        return random.uniform(step / 2, step)

    def answered(self) -> None:
        now = time.monotonic()
        self.failures, self.resting_until, self.unreachable = 0, 0.0, False
        if self.state == "ok":
            return
        # Back from an outage at its first answer; back from rate-limiting only after
        # QUIET_SECS without a refusal (a provider that refuses one call in five is still
        # rate-limiting: one line when it starts, one when it has stopped).
        if self.state == "rate-limited" and now - self.last_refusal < QUIET_SECS:
            return
        if self.state == "down" and not self.announce_down:
            self.state = "ok"
            return
        log.warning(
            "rpc %s back (%d calls refused since %.0f s ago, each retried)",
            self.name, self.refused - self.refused_before, now - self.since,
        )  # fmt: skip
        self.state = "ok"

    def _enter(self, state: str) -> bool:
        """Records a refusal; True when it starts a new state (to be logged)."""
        now = time.monotonic()
        self.last_refusal = now
        if self.state == state:
            return False
        if self.state == "ok":
            self.since, self.refused_before = now, self.refused - 1
        self.state = state
        return True

    def throttled(self, status: int, retry_after: float | None) -> None:
        self.refused += 1
        wait = retry_after if retry_after is not None else self._backoff()
        self.failures += 1
        self.resting_until = time.monotonic() + wait
        self.unreachable = False
        if self._enter("rate-limited"):
            log.warning(
                "rpc %s rate-limited (HTTP %d; resting %.1f s; calls go on through the "
                "other endpoints or after the rest)",
                self.name, status, wait,
            )  # fmt: skip

    def failed(self, reason: str, *, unreachable: bool = False) -> None:
        self.refused += 1
        wait = self._backoff()
        self.failures += 1
        self.resting_until = time.monotonic() + wait
        self.unreachable = unreachable
        if self._enter("down") and self.announce_down:
            log.warning("rpc %s unreachable: %s (retrying with backoff)", self.name, reason)


# What a call's last failed try left: a refusing answer (429, 5xx), an error, or nothing yet.
Failure = httpx2.Response | Exception | None


def _method(body: bytes) -> str | None:
    try:
        parsed = json.loads(body)
    except ValueError:
        return None
    return parsed.get("method") if isinstance(parsed, dict) else None


class RpcTransport(httpx2.AsyncBaseTransport):
    """The transport behind every AsyncClient that `svcpay.rpc.connect` makes."""

    def __init__(self, settings: RpcSettings) -> None:
        self.settings = settings
        several = len(settings.urls) > 1
        self.endpoints = [
            Endpoint(url, settings.rate, announce_down=several) for url in settings.urls
        ]
        self._background: set[asyncio.Future[Any]] = set()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        body = await request.aread()
        deadline = time.monotonic() + self.settings.budget_secs
        fan_out = _method(body) in SEND_METHODS
        last: Failure = None
        tried_down = False
        while True:
            now = time.monotonic()
            ready = [e for e in self.endpoints if not e.resting(now)]
            if not ready and not tried_down:
                # Nothing but URLs that refused the connection: each gets one try per call
                # (a refusal costs a millisecond), so a node is used again the moment it
                # is back, not after its backoff.
                ready = [e for e in self.endpoints if e.unreachable]
                tried_down = True
            if ready:
                if fan_out and len(ready) > 1:
                    answer, last = await self._to_all(ready, request, body, last)
                else:
                    answer, last = await self._in_turn(ready, request, body, last)
                if answer is not None:
                    return answer
            # Waited for: endpoints that refused or failed (429, 5xx, a timeout). One that
            # refused the connection is down: waiting for it would only delay the answer
            # (a 503 upstream), so a call with nothing else to wait for ends now.
            waiting = [e.resting_until for e in self.endpoints if not e.unreachable]
            wake = min(waiting, default=deadline)
            if wake >= deadline:
                break
            await asyncio.sleep(max(0.0, wake - time.monotonic()) + random.uniform(0, 0.05))
        if isinstance(last, httpx2.Response):
            return last  # the caller sees the 429 or 5xx (an outage: a 503 upstream)
        if last is not None:
            raise last
        raise httpx2.ConnectError("no RPC endpoint could be tried", request=request)

    async def _in_turn(
        self,
        ready: list[Endpoint],
        request: httpx2.Request,
        body: bytes,
        last: Failure,
    ) -> tuple[httpx2.Response | None, Failure]:
        for endpoint in ready:
            answer, outcome = await self._once(endpoint, request, body)
            if answer is not None:
                return answer, last
            last = outcome
        return None, last

    async def _to_all(
        self,
        ready: list[Endpoint],
        request: httpx2.Request,
        body: bytes,
        last: Failure,
    ) -> tuple[httpx2.Response | None, Failure]:
        """The same request to every endpoint at once: the first good answer returns; the
        other copies still go out (and their answers are read and dropped)."""
        tasks = [asyncio.create_task(self._once(e, request, body)) for e in ready]
        pending = set(tasks)
        answer: httpx2.Response | None = None
        # A refusal from one node (its preflight, maybe on a lagging bank) is only the
        # answer if no other node accepted the transaction: one that did may land it, and
        # "refused" would then read as "not paid".
        refusal: httpx2.Response | None = None
        while pending and answer is None:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                got, outcome = task.result()
                if got is None:
                    last = outcome
                    continue
                await got.aread()
                if answer is None and b'"error"' not in got.content:
                    answer = got
                elif refusal is None and b'"error"' in got.content:
                    refusal = got
                else:
                    await got.aclose()
        answer = answer or refusal
        for task in pending:  # the slower copies: let them go out, close what they get
            self._background.add(task)
            task.add_done_callback(self._settled)
        return answer, last

    def _settled(self, task: asyncio.Future[Any]) -> None:
        self._background.discard(task)
        if not task.cancelled() and task.exception() is None:
            got, _ = task.result()
            if got is not None:
                closing = asyncio.ensure_future(got.aclose())
                self._background.add(closing)
                closing.add_done_callback(self._background.discard)

    async def _once(
        self, endpoint: Endpoint, request: httpx2.Request, body: bytes
    ) -> tuple[httpx2.Response | None, httpx2.Response | Exception]:
        """(the answer, None) when `endpoint` answered; (None, what failed) when it refused
        or could not be reached (the endpoint then rests)."""
        await endpoint.slot()
        endpoint.requests += 1
        headers = [
            (k, v) for k, v in request.headers.raw if k.lower() not in (b"host", b"content-length")
        ]
        copy = httpx2.Request(
            request.method, endpoint.url, headers=headers, content=body,
            extensions=request.extensions,
        )  # fmt: skip
        try:
            response = await endpoint.transport.handle_async_request(copy)
        except httpx2.TransportError as e:
            endpoint.failed(
                f"{type(e).__name__}: {e}" if str(e) else type(e).__name__,
                unreachable=isinstance(e, httpx2.ConnectError | httpx2.ConnectTimeout),
            )
            return None, e
        if response.status_code == 429 or response.status_code >= 500:
            await response.aread()
            await response.aclose()
            if response.status_code in (429, 503):
                endpoint.throttled(response.status_code, _retry_after(response))
            else:
                endpoint.failed(f"HTTP {response.status_code}")
            return None, response
        endpoint.answered()
        return response, response

    async def aclose(self) -> None:
        for task in list(self._background):
            task.cancel()
        for endpoint in self.endpoints:
            await endpoint.transport.aclose()
