"""Landing what we send (issue 37, docs/adr/0036): a signed transaction is rebroadcast, as
the same bytes, until it is confirmed or its blockhash has expired by block height.

A node that accepted `sendTransaction` has only accepted it: under load a leader drops a
large share. So a `Flight` sends the transaction (preflight first, `maxRetries: 0`), then
sends the same bytes again without preflight (a signature executes at most once), while one
poller per `Lander` asks `getSignatureStatuses` for every signature in flight at once, each
tick. A copy goes out `unseen_secs` (1 s) after the last one while no node has seen the
transaction (no status at all: it was most likely dropped, and waiting longer only adds to
the payer's wait), and every `rebroadcast_secs` (2 s) once it is `processed` (in a block
that may still be dropped with its fork). The flight ends:

- **Landed**: `confirmed` or `finalized` (a `processed` status is not landed: its fork may
  still be dropped); `err` says whether it failed there.
- **Unsent**: the first send reached no node (connection refused, or every endpoint still
  rate-limiting after svcpay.rpc's retries): nothing went out, the caller may answer 503.
- **Rejected**: preflight refused it for a reason of its own (insufficient funds, a program
  error). Nothing was sent. A `BlockhashNotFound` is no such reason: a node that lags may not
  know a valid blockhash yet, so the flight keeps trying.
- **Expired**: its blockhash can no longer land it. Decided by block height, never by a
  `BlockhashNotFound`: past `last_valid_block_height` when we built it; else
  `isBlockhashValid` false at a node at least as far along (`minContextSlot`) as the one
  that first said it was valid. A blockhash no node has called valid is given up only
  `never_seen_valid_secs` (90 s) after the transaction was first received, here or by
  another process (`received_at`): until then a node may only lag behind it, and only this
  rule reads a clock. A last status read with history then makes sure.

`land()` waits at most `wait_secs` and answers `Pending` when the flight goes on: the same
transaction submitted again joins the flight in progress (never a second send loop, never a
lock), so a client's retry returns as soon as it lands.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import time
from dataclasses import dataclass, field
from typing import Any

import httpx2
from solana.rpc.async_api import AsyncClient
from solders.transaction import VersionedTransaction

from svcpay.rpc.calls import RpcCallError, call

log = logging.getLogger("svcpay.rpc")

REBROADCAST_SECS = 2.0  # a copy this long after the last, once a node has processed it
UNSEEN_SECS = 1.0  # a copy this long after the last, while no node has seen it
POLL_SECS = 0.4
MAX_STATUSES = 256  # getSignatureStatuses takes at most this many per call
# A blockhash no node of ours has ever called valid is given up after this: it was expired
# (or never existed) when we got it. About 150 blocks at 400 ms, with room for lag.
NEVER_SEEN_VALID_SECS = 90.0
LANDED = ("confirmed", "finalized")


@dataclass(frozen=True)
class Landed:
    signature: str
    slot: int
    err: Any = None  # the transaction's error on chain, None if it succeeded


@dataclass(frozen=True)
class Rejected:
    signature: str
    message: str  # what preflight said
    data: Any = None


@dataclass(frozen=True)
class Unsent:
    signature: str
    reason: str  # no node could be reached, or each refused it (429): nothing went out
    error: BaseException | None = None


@dataclass(frozen=True)
class Expired:
    signature: str


@dataclass(frozen=True)
class Pending:
    signature: str


Outcome = Landed | Rejected | Unsent | Expired | Pending


def not_sent(e: BaseException) -> bool:
    """Whether a failed send certainly reached no node: a refused connection, or a 429 (a
    timeout, a reset or a 5xx may have been read by the node)."""
    if isinstance(e, httpx2.ConnectError | httpx2.ConnectTimeout | ConnectionRefusedError):
        return True
    response = getattr(e, "response", None)
    return isinstance(e, httpx2.HTTPStatusError) and getattr(response, "status_code", 0) == 429


def blockhash_unknown(message: str) -> bool:
    return "BlockhashNotFound" in message or "Blockhash not found" in message


@dataclass
class Flight:
    tx: VersionedTransaction
    signature: str
    last_valid_block_height: int | None
    # When the transaction was first received (monotonic; earlier than this flight for a
    # repeat of one stored before): the never-seen-valid window counts from it.
    received: float = field(default_factory=time.monotonic)
    done: asyncio.Future[Outcome] = field(init=False)
    status: dict[str, Any] | None = None  # the last status the poller saw
    valid_at: int | None = None  # a slot at which a node called the blockhash valid
    sends: int = 0
    accepted: bool = False  # a node accepted it: from now on, sends skip preflight
    polled: bool = False  # the poller has asked for its status at least once

    def __post_init__(self) -> None:
        self.done = asyncio.get_running_loop().create_future()


class Lander:
    """Lands transactions on `rpc` (one per process: its poller reads every flight's status
    in one call a tick). `on_change(flights)` is called when the number in flight changes."""

    def __init__(
        self,
        rpc: AsyncClient,
        *,
        rebroadcast_secs: float = REBROADCAST_SECS,
        unseen_secs: float = UNSEEN_SECS,
        poll_secs: float = POLL_SECS,
        never_seen_valid_secs: float = NEVER_SEEN_VALID_SECS,
    ) -> None:
        self.rpc = rpc
        self.rebroadcast_secs = rebroadcast_secs
        self.unseen_secs = min(unseen_secs, rebroadcast_secs)
        self.poll_secs = poll_secs
        self.never_seen_valid_secs = never_seen_valid_secs
        self.flights: dict[str, Flight] = {}
        self._tick: asyncio.Event | None = None
        self._soon: asyncio.Event | None = None  # a new flight: poll now, not a tick later
        self._poller: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.calls: dict[str, int] = {}  # RPC calls made, by method (for benchmarks)

    # -- the API ------------------------------------------------------------------------
    async def land(
        self,
        tx: VersionedTransaction,
        *,
        wait_secs: float,
        last_valid_block_height: int | None = None,
        received_at: float | None = None,
    ) -> Outcome:
        """Sends `tx` and rebroadcasts it until it lands or expires, waiting at most
        `wait_secs` for that (then Pending: the flight goes on). The same transaction
        while it is in flight joins the flight. `received_at` (unix time) is when the
        transaction was first received, if earlier than now (a repeat of one that another
        process or a request before a restart flew): a blockhash no node calls valid is
        given up `never_seen_valid_secs` after that, not after this flight began."""
        signature = str(tx.signatures[0])
        flight = self.flights.get(signature)
        if flight is None:
            flight = Flight(tx, signature, last_valid_block_height)
            if received_at is not None:
                flight.received -= max(0.0, time.time() - received_at)
            self.flights[signature] = flight
            task = asyncio.create_task(self._fly(flight), name=f"land {signature[:8]}")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        try:
            return await asyncio.wait_for(asyncio.shield(flight.done), wait_secs)
        except TimeoutError:
            return Pending(signature)

    def in_flight(self, signature: str) -> bool:
        return signature in self.flights

    async def aclose(self) -> None:
        for task in [*self._tasks, *([self._poller] if self._poller else [])]:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    # -- one flight ---------------------------------------------------------------------
    async def _fly(self, flight: Flight) -> None:
        try:
            outcome = await self._until_decided(flight)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # a bug: the waiters get it, the flight ends
            if not flight.done.done():
                flight.done.set_exception(e)
            raise
        finally:
            self.flights.pop(flight.signature, None)
        if not flight.done.done():
            flight.done.set_result(outcome)

    async def _until_decided(self, flight: Flight) -> Outcome:
        """Sends until a node accepts (preflight decides Rejected), then watches each tick's
        status. Rebroadcasts and expiry checks run beside the watch, one of each at a time:
        a call that waits out 429s (up to the RPC budget) never delays noticing the landing."""
        wire = base64.b64encode(bytes(flight.tx)).decode()
        last_send: float | None = None
        next_expiry_check = time.monotonic() + self.rebroadcast_secs
        copy: asyncio.Task[Rejected | Unsent | None] | None = None
        expiry: asyncio.Task[bool] | None = None
        try:
            while True:
                now = time.monotonic()
                due = last_send is None or now >= last_send + self._every(flight)
                if due and not flight.accepted:  # its answer decides: wait for it
                    refused = await self._send(flight, wire)
                    if refused is not None:
                        return refused
                    last_send = time.monotonic()  # a send that waited out a 429: from then
                elif due and (copy is None or copy.done()):
                    copy = asyncio.create_task(self._send(flight, wire))
                    last_send = now
                if expiry is None and now >= next_expiry_check:
                    expiry = asyncio.create_task(self._expired(flight))
                if expiry is not None and expiry.done():
                    if expiry.result():
                        return await self._last_look(flight)
                    expiry, next_expiry_check = None, time.monotonic() + self.rebroadcast_secs
                # The next status, but no later than the next copy is due. A copy due while
                # the last is still out (waiting out 429s) waits for it to end, not in a loop.
                assert last_send is not None
                wake = last_send + self._every(flight)
                if copy is not None and not copy.done() and wake <= time.monotonic():
                    await asyncio.wait({copy}, timeout=self.poll_secs)
                else:
                    await self._next_tick(flight, until=wake)
                status = flight.status
                if status is not None and status.get("confirmationStatus") in LANDED:
                    slot = int(status.get("slot") or 0)
                    return Landed(flight.signature, slot, status.get("err"))
        finally:
            for task in (copy, expiry):
                if task is not None and not task.done():
                    task.cancel()

    def _every(self, flight: Flight) -> float:
        """Seconds between copies: sooner while no node has seen it, then the usual cadence."""
        return self.unseen_secs if flight.status is None else self.rebroadcast_secs

    async def _send(self, flight: Flight, wire: str) -> Rejected | Unsent | None:
        """One send: with preflight until a node accepted it, then without. A refusal of
        its own (not a lagging node's BlockhashNotFound, not 'already processed') ends the
        flight; a transient failure only waits for the next rebroadcast."""
        options: dict[str, Any] = {"encoding": "base64", "maxRetries": 0}
        if flight.accepted:
            options["skipPreflight"] = True
        else:
            options["preflightCommitment"] = "confirmed"
        flight.sends += 1
        try:
            await self._call("sendTransaction", [wire, options])
        except RpcCallError as e:
            if "already been processed" in e.message or "AlreadyProcessed" in e.message:
                flight.accepted = True
            elif blockhash_unknown(e.message):
                pass  # expiry is decided by block height, below
            elif not flight.accepted:
                return Rejected(flight.signature, e.message, e.data)
        except Exception as e:  # the node is unreachable or rate-limiting: try again later
            if flight.sends == 1 and not_sent(e):
                return Unsent(flight.signature, f"{type(e).__name__}: {e}", e)
            log.debug("send of %s failed: %s", flight.signature, e)
        else:
            flight.accepted = True
        return None

    async def _expired(self, flight: Flight) -> bool:
        """Whether `flight`'s blockhash can no longer land it (see the module docstring)."""
        try:
            if flight.last_valid_block_height is not None:
                height = await self._call("getBlockHeight", [{"commitment": "confirmed"}])
                return int(height) > flight.last_valid_block_height
            config: dict[str, Any] = {"commitment": "processed"}
            if flight.valid_at is not None:
                config["minContextSlot"] = flight.valid_at
            blockhash = str(flight.tx.message.recent_blockhash)
            answer = await self._call("isBlockhashValid", [blockhash, config])
        except Exception as e:  # not reachable, or behind minContextSlot: not decided
            log.debug("expiry of %s not decided: %s", flight.signature, e)
            return False
        if answer["value"]:
            slot = int(answer["context"]["slot"])
            flight.valid_at = max(flight.valid_at or 0, slot)
            return False
        if flight.valid_at is not None:
            return True  # a node past the slot where it was valid says it is not
        return time.monotonic() - flight.received > self.never_seen_valid_secs

    async def _last_look(self, flight: Flight) -> Outcome:
        """Expired by height: its status with history decides (it may have landed just
        before); unknown, or only `processed`, means it never will."""
        try:
            reply = await self._call(
                "getSignatureStatuses",
                [[flight.signature], {"searchTransactionHistory": True}],
            )
            status = reply["value"][0]
        except Exception:
            status = flight.status
        if status is not None and status.get("confirmationStatus") in LANDED:
            return Landed(flight.signature, int(status.get("slot") or 0), status.get("err"))
        return Expired(flight.signature)

    # -- the poller ----------------------------------------------------------------------
    async def _next_tick(self, flight: Flight, until: float) -> None:
        """Waits for the poller's next round of statuses, or until `until` (monotonic)."""
        if self._poller is None or self._poller.done():
            self._tick, self._soon = asyncio.Event(), asyncio.Event()
            self._poller = asyncio.create_task(self._poll(), name="lander poller")
        assert self._tick is not None and self._soon is not None
        tick = self._tick
        if not flight.polled:  # its first status is asked at once: a local validator,
            self._soon.set()  # or a fast cluster, has confirmed it already
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(tick.wait(), max(0.0, until - time.monotonic()))

    async def _poll(self) -> None:
        """Every `poll_secs` while anything is in flight (at once when a new flight waits
        for its first status): one getSignatureStatuses for all of them (256 a call), then
        wakes every flight."""
        while self.flights:
            assert self._soon is not None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._soon.wait(), self.poll_secs)
            self._soon.clear()
            signatures = list(self.flights)
            for start in range(0, len(signatures), MAX_STATUSES):
                chunk = signatures[start : start + MAX_STATUSES]
                try:
                    reply = await self._call("getSignatureStatuses", [chunk])
                except Exception as e:
                    log.debug("status poll failed: %s", e)
                    continue
                for signature, status in zip(chunk, reply["value"], strict=False):
                    flight = self.flights.get(signature)
                    if flight is not None:
                        flight.status, flight.polled = status, True
            tick, self._tick = self._tick, asyncio.Event()
            if tick is not None:
                tick.set()
        tick, self._tick = self._tick, None
        if tick is not None:
            tick.set()

    async def _call(self, method: str, params: list[Any]) -> Any:
        self.calls[method] = self.calls.get(method, 0) + 1
        return await call(self.rpc, method, params)
