"""Hands a gate's served session vouchers to the facilitator, which redeems them on chain
(POST /v1/sessions/vouchers; docs/adr/0025).

`poke()` (the gate calls it after each served voucher) starts a background task in the
running loop, which reports every `interval` seconds while there is anything to report:
the ledger's highest served voucher per session, in batches. A voucher is marked reported
once the facilitator answered for it (kept, stale, or refused: a refusal is logged, never
retried), so a gate restarted after a crash reports what it had not; the facilitator keeps
only each session's highest, so reporting twice is harmless. Call `flush()` at start and
`aclose()` at shutdown.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

import httpx

from svcpay.schemes.session.ledger import VoucherLedger

log = logging.getLogger("svcpay.gate")
BATCH = 100  # what one report may carry (the API's limit)
CLOSE_TIMEOUT = 15.0  # how long aclose() tries to report what is left


class VoucherReporter:
    def __init__(
        self,
        ledger: VoucherLedger,
        facilitator_url: str,
        api_key: str,
        *,
        interval: float = 2.0,
        http: httpx.AsyncClient | None = None,
        close_timeout: float = CLOSE_TIMEOUT,
    ) -> None:
        self.ledger, self.interval, self.close_timeout = ledger, interval, close_timeout
        self.url = facilitator_url.rstrip("/") + "/v1/sessions/vouchers"
        self._headers = {"authorization": f"Bearer {api_key}"}
        self._http = http
        self._task: asyncio.Task[None] | None = None
        self._failing = False
        self._closing = asyncio.Event()

    def poke(self) -> None:
        if self._closing.is_set():
            return  # aclose() reports what is left
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._loop())

    async def _loop(self) -> None:
        # Stopped by `_closing`, never cancelled: a report cut off mid-request would cut the
        # facilitator's database transaction off too, where the facilitator is in-process.
        while not self._closing.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._closing.wait(), self.interval)
            if self._closing.is_set():
                return
            try:
                if not await self.flush():
                    return  # nothing left: the next served voucher starts a new task
            except Exception as e:  # the facilitator or the ledger is away: try again later
                if not self._failing:
                    log.warning("reporting session vouchers failed (%s); retrying", e)
                self._failing = True

    async def flush(self) -> int:
        """Reports everything unreported now; returns how many vouchers were reported."""
        total = 0
        while vouchers := await self.ledger.unreported(BATCH):
            body = {"vouchers": [v.to_json_dict() for v in vouchers]}
            http = self._http or httpx.AsyncClient(timeout=10)
            try:
                r = await http.post(self.url, json=body, headers=self._headers)
            finally:
                if self._http is None:
                    await http.aclose()
            r.raise_for_status()
            answers = r.json()["vouchers"]
            for voucher, answer in zip(vouchers, answers, strict=True):
                if answer.get("status") == "refused":
                    log.warning(
                        "the facilitator refused the voucher of session %s: %s",
                        voucher.channel,
                        answer.get("reason"),
                    )
                await self.ledger.reported(str(voucher.channel), voucher.cumulative)
            total += len(vouchers)
            if self._failing:
                log.info("reporting session vouchers works again")
                self._failing = False
        return total

    async def aclose(self) -> None:
        """Reports what is left and stops: the report in flight finishes, then what is left
        is reported, again after a transient failure (the facilitator answering 503 or 429,
        or unreachable) until `close_timeout` has passed. What still fails stays in the
        ledger, which reports it at the next start."""
        self._closing.set()
        deadline = time.monotonic() + self.close_timeout
        if self._task is not None:
            await asyncio.wait([self._task], timeout=self.close_timeout)
            if not self._task.done():  # a report that hangs past the deadline: given up
                self._task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._task
        delay = 0.1
        while True:
            try:
                left = max(deadline - time.monotonic(), 0.1)
                await asyncio.wait_for(self.flush(), left)  # a hung report ends at the deadline
                return
            except Exception as e:
                left = deadline - time.monotonic()
                if not (_transient(e) or isinstance(e, TimeoutError)) or left <= 0:
                    log.warning(
                        "session vouchers left unreported at close (%s); they are reported "
                        "at the next start",
                        e,
                    )
                    return
            await asyncio.sleep(min(delay, left))
            delay = min(delay * 2, 2.0)


def _transient(e: Exception) -> bool:
    """A failure a later try may not meet: the facilitator away, busy or throttling."""
    if isinstance(e, httpx.TransportError):
        return True
    if isinstance(e, httpx.HTTPStatusError):
        return e.response.status_code in (429, 502, 503, 504)
    return False
