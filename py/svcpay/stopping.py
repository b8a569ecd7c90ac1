"""Stopping on Ctrl-C and SIGTERM, at any moment (ADR 0035): the demo and every long-running
command (`svcpay facilitator serve`, `example serve`, `localnet`, `demo --serve`, `pay`).

The signal handler installed by `handling()` never raises. It records the request
(`requested()`) and, while `run()` drives a coroutine, has that coroutine's event loop cancel
it (the loop's thread-safe wake-up, as `asyncio.Runner` does for Ctrl-C). An exception
raised from a signal handler lands wherever the program is, inside anyio's cancel scopes too,
whose stack it corrupts (issue 36); a cancellation is delivered at an `await`, where every
library expects one. Code that may swallow a cancellation, or that blocks outside a loop,
stops at its next checkpoint: `check()` and `sleep()` raise `Interrupted` (a
KeyboardInterrupt) from ordinary code, where every `finally` runs.

Imports nothing of svcpay's: any module may import it.
"""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from contextlib import contextmanager, suppress
from types import FrameType
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    import socket

    import uvicorn

__all__ = [
    "SIGNALS",
    "Interrupted",
    "check",
    "finishing",
    "handling",
    "requested",
    "run",
    "serve",
    "signal_name",
    "sleep",
]

T = TypeVar("T")
SIGNALS = (signal.SIGINT, signal.SIGTERM)
# How often `sleep` looks at the flag: a signal interrupts time.sleep, which then sleeps on
# (PEP 475), so this bounds how late a blocking wait notices a stop.
_SLICE = 0.05


class Interrupted(KeyboardInterrupt):
    """Raised at a checkpoint once Ctrl-C or SIGTERM asked the process to stop."""


class _State:
    """What the handler touches: plain attributes only. A lock (a threading.Event's among
    them) taken in a handler deadlocks when the signal lands while the same thread holds it."""

    signum: int | None = None
    depth = 0  # nested `handling()` blocks: only the outermost installs and forgets
    # (loop, callback): called in `loop` on each stop request, while `run` drives it.
    targets: list[tuple[asyncio.AbstractEventLoop, Callable[[], object]]] = []


def _handler(signum: int, frame: FrameType | None) -> None:
    if _State.signum is None:
        _State.signum = signum
    for loop, callback in list(_State.targets):
        with suppress(RuntimeError):  # that loop has just closed: nothing left to cancel
            loop.call_soon_threadsafe(callback)


def finished() -> None:
    """For a process's entry point, once its work is done and its exit code known: SIGINT
    and SIGTERM are ignored from here on. The interpreter's shutdown puts back the default
    action of every signal that has a Python handler (Python's own KeyboardInterrupt one
    too), so a Ctrl-C in its last moments killed a finished demo with -2 instead of its
    code; an ignored signal stays ignored to the end (main thread only)."""
    if threading.current_thread() is threading.main_thread():
        for sig in SIGNALS:
            signal.signal(sig, signal.SIG_IGN)


def requested() -> bool:
    """Whether Ctrl-C or SIGTERM arrived since `handling()` began."""
    return _State.signum is not None


def signal_name() -> str | None:
    """The first stop signal's name (SIGINT, SIGTERM), or None."""
    return signal.Signals(_State.signum).name if _State.signum is not None else None


def check() -> None:
    """Raises Interrupted once a stop was requested: a checkpoint between steps."""
    if _State.signum is not None:
        raise Interrupted


def sleep(seconds: float) -> None:
    """time.sleep that ends early, with Interrupted, once a stop is requested (within 50 ms)."""
    deadline = time.monotonic() + seconds
    while True:
        check()
        left = deadline - time.monotonic()
        if left <= 0:
            return
        time.sleep(min(left, _SLICE))


@contextmanager
def handling() -> Iterator[None]:
    """For the block (main thread only; elsewhere a no-op): SIGINT and SIGTERM request a stop
    instead of raising or killing the process; the previous handlers come back after it. The
    outermost block forgets any earlier request as it begins; nested blocks share it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    if _State.depth:
        _State.depth += 1
        try:
            yield
        finally:
            _State.depth -= 1
        return
    _State.signum = None
    previous = {sig: signal.signal(sig, _handler) for sig in SIGNALS}
    _State.depth = 1
    try:
        yield
    finally:
        _State.depth = 0
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def run(main: Coroutine[Any, Any, T], on_stop: Callable[[], object] | None = None) -> T:
    """`asyncio.run(main)`, stopped by Ctrl-C or SIGTERM (under `handling()`): each request
    calls `on_stop` in the loop (by default, cancels `main`). Raises Interrupted when a
    request cancelled `main`, or came before it began; otherwise returns what it returned."""
    if requested():
        main.close()
        raise Interrupted

    async def driven() -> T:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        target = (loop, on_stop or task.cancel)
        _State.targets.append(target)
        try:
            if requested():  # between check() and here: the handler had no loop to call
                loop.call_soon(target[1])
            return await main
        finally:
            _State.targets.remove(target)

    try:
        return asyncio.run(driven())
    except asyncio.CancelledError:
        if requested():
            raise Interrupted from None
        raise


async def finishing(work: Awaitable[T]) -> T:
    """Awaits `work` to its end even when the caller is cancelled meanwhile, then passes the
    cancellation on: for a step whose half-done state would be lost (a session opened on
    chain whose key is still only in memory). Keep such steps short and bounded."""
    task = asyncio.ensure_future(work)
    cancelled = False
    while True:
        try:
            result = await asyncio.shield(task)
            break
        except asyncio.CancelledError:
            if task.cancelled():
                raise
            cancelled = True
    if cancelled:
        raise asyncio.CancelledError
    return result


def serve(
    server: uvicorn.Server,
    ready: Callable[[int], object],
    sockets: list[socket.socket] | None = None,
) -> bool:
    """Runs a uvicorn `server` until Ctrl-C or SIGTERM, calling `ready(port)` once it
    listens; whether it started. A signal before uvicorn took over the handlers asks it to
    exit (uvicorn's own handlers, while it serves, do the same and pass the signal back)."""

    async def main() -> None:
        task = asyncio.create_task(server.serve(sockets=sockets))
        while not server.started and not task.done():
            await asyncio.sleep(0.02)
        if server.started:
            ready(server.servers[0].sockets[0].getsockname()[1])
        await task

    def stop() -> None:
        server.should_exit = True

    with handling():
        run(main(), on_stop=stop)
    return bool(server.started)
