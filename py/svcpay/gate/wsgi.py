"""`PaymentGateWSGI`: the payment gate for WSGI apps (Flask, Django, any WSGI callable), a
shell over `GateCore` (gate/core.py) as `PaymentGate` is the ASGI one (docs/adr/0018).

- Each gated request becomes the core's `Request` (path = SCRIPT_NAME + PATH_INFO, the path
  the client asked for; headers from the environ). Everything runs in the WSGI worker thread
  that called the adapter except the core's coroutines (decide, and the admission's `start`
  and `end`): those run on one private event loop, on a daemon thread the adapter starts on
  the first gated request, where the stores and clients they use live. The worker waits for
  each. `close()` (or leaving `with gate:`) stops the loop; `run(coro)` runs a coroutine
  there (e.g. `meter.start()`, `client.close()`).
- `Reply` (402, 400, 503...) is the response; the app is not called.
- `Admit`: the app is called with the original environ (its body unread). Its status and
  headers reach the server when its first non-empty chunk (or write(), or its end) does,
  after the admission's `start` has seen them (which may add headers, or replace the
  response: the app's body is then dropped and its iterable closed). A streamed response
  stays streamed. Once the server has taken the last chunk, the app's iterable is closed
  and `end` hears the status (and the body when the admission captures it), so metered usage
  is recorded and an x402 payment kept before the response ends.
- An exception from the app propagates to the WSGI server as it would without the gate,
  and `end` hears a handler that failed (no charge, a one-time proof released for a retry),
  whether it came before the response started or mid-body. So does a response the server
  closes before its end (the client went away).
- Paths outside the gated prefixes, and requests `serves` says the app does not serve, go
  straight to the app, without touching the loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
from collections.abc import Callable, Collection, Coroutine, Iterable, Iterator, Sequence
from http import HTTPStatus
from types import TracebackType
from typing import Any, TypeVar
from wsgiref.types import StartResponse, WSGIApplication, WSGIEnvironment

from svcpay.gate.asgi import Meter, Scope, Subscriptions
from svcpay.gate.core import ADMIT, Admit, GateCore, RawHeaders, Reply, Request, private_cache
from svcpay.gate.paywall import Paywall
from svcpay.protocol.memo import Memos
from svcpay.protocol.mints import MintReader
from svcpay.protocol.pricing import PricingEntry, Terms
from svcpay.protocol.replay import ReplayStore
from svcpay.protocol.verify import RemoteVerifier
from svcpay.schemes.mpp_charge.facilitator_client import ChargeSettler
from svcpay.schemes.session.server import SessionScheme
from svcpay.schemes.x402_exact.facilitator_client import X402Facilitator
from svcpay.schemes.x402_exact.idempotency import PaymentIdStore
from svcpay.schemes.x402_exact.server import X402Options

__all__ = ["PaymentGateWSGI", "payment_gate_wsgi"]

log = logging.getLogger("svcpay.gate.wsgi")
T = TypeVar("T")
Headers = list[tuple[str, str]]
ExcInfo = tuple[type[BaseException], BaseException, TracebackType | None]
OptExcInfo = ExcInfo | tuple[None, None, None]
CLOSED = "the payment gate was closed"


class PaymentGateWSGI:
    """A WSGI callable: the payment gate (`PaymentGate`'s arguments) in front of the WSGI
    app `app`. Safe to call from many WSGI worker threads at once."""

    def __init__(
        self,
        app: WSGIApplication,
        *,
        routes: dict[str, list[PricingEntry]],
        terms: Terms,
        memos: Memos,
        trusted_facilitators: Collection[str],
        replay: ReplayStore,
        subscriptions: Subscriptions | None = None,
        meter: Meter | None = None,
        remote: RemoteVerifier | None = None,
        serves: Callable[[Scope], bool] | None = None,
        x402_facilitator: X402Facilitator | None = None,
        payment_ids: PaymentIdStore | None = None,
        sessions: SessionScheme | None = None,
        x402_options: X402Options | None = None,
        schemes: Sequence[str] | None = None,
        mpp_facilitator: ChargeSettler | None = None,
        mints: MintReader | None = None,
        paywall: Paywall | None = None,
    ) -> None:
        """`serves(scope)`: whether `app` has a route for the request's path and method (a
        WSGI app's routes cannot be read: without it every gated request is priced). The
        scope is ASGI's shape: type, method, path (SCRIPT_NAME + PATH_INFO), root_path,
        query_string, headers, scheme. x402 (with `terms.owner`) works as in `PaymentGate`;
        its facilitator client lives on the adapter's loop, like the other async resources
        (and so does `mints`' RPC client). `paywall` is as in `PaymentGate` (the HTML 402
        browsers get; docs/adr/0032)."""
        self.app = app
        self.core = GateCore(
            routes,
            terms,
            memos,
            trusted_facilitators,
            replay,
            subscriptions,
            meter,
            remote,
            x402_facilitator,
            payment_ids,
            sessions,
            x402_options,
            schemes,
            mpp_facilitator,
            mints,
            paywall,
        )
        self.serves = serves
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._closed = False

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        path = _path(environ)
        pricing = self.core.pricing(path)
        if pricing is None:
            return self.app(environ, start_response)
        headers = _headers(environ)
        if self.serves is not None and not self.serves(_scope(environ, path, headers)):
            return self.app(environ, start_response)  # its 404/405 costs nothing
        method = str(environ.get("REQUEST_METHOD", "GET")).upper()
        scheme = str(environ.get("wsgi.url_scheme", "http"))
        request = Request(method, path, dict(headers), scheme)
        decision = self.run(self.core.decide(request, pricing))
        if isinstance(decision, Reply):
            start_response(*_head(decision))
            return [decision.body]
        if decision is ADMIT:  # nothing to hear afterwards
            return self.app(environ, start_response)
        return _Admitted(self, decision, environ, start_response).respond()

    # -- the loop ---------------------------------------------------------------------

    @property
    def running(self) -> bool:
        """Whether the gate's loop thread is running (it starts on the first gated request)."""
        thread = self._thread
        return thread is not None and thread.is_alive()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Runs `coro` on the gate's loop and returns its result: set up and tear down the
        gate's async resources there (`meter.start()`, `meter.close()`, `client.close()`).
        RuntimeError when the gate is closed, or closes before `coro` ends."""
        with self._lock:  # submitted before close() stops the loop, or not at all
            if self._closed:
                coro.close()
                raise RuntimeError(CLOSED)
            if self._thread is threading.current_thread():
                coro.close()
                raise RuntimeError("run() called from the gate's own loop: await the coroutine")
            loop = self._loop if self._loop is not None else self._start()
            future = asyncio.run_coroutine_threadsafe(coro, loop)
        try:
            return future.result(timeout)
        except concurrent.futures.CancelledError:  # close() cancelled it
            raise RuntimeError(CLOSED) from None

    def check_cluster(self, timeout: float = 30.0) -> None:
        """Raises WrongCluster (one line naming both) when the RPC node the gate reads the
        chain with is not on the terms' network. WSGI has no start of its own: call it where
        the app is built, before it serves (svcpay.gate.cluster, docs/adr/0038)."""
        self.run(self.core.check_cluster(), timeout)

    def close(self) -> None:
        """Stops the loop thread (requests still in the gate fail); idempotent. Afterwards
        gated requests raise RuntimeError; paths outside the gate still pass through."""
        with self._lock:
            self._closed = True
            loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        if threading.current_thread() is thread:
            raise RuntimeError("close() called from the gate's own loop")
        with contextlib.suppress(RuntimeError):  # already closed
            loop.call_soon_threadsafe(loop.stop)
        thread.join()

    def __enter__(self) -> PaymentGateWSGI:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _start(self) -> asyncio.AbstractEventLoop:
        """Starts the loop thread (called holding the lock)."""
        loop = asyncio.new_event_loop()
        thread = threading.Thread(
            target=_run_loop, args=(loop,), name="svcpay-gate-wsgi", daemon=True
        )
        thread.start()
        self._loop, self._thread = loop, thread
        return loop


def _run_loop(loop: asyncio.AbstractEventLoop) -> None:
    asyncio.set_event_loop(loop)
    try:
        loop.run_forever()
    finally:  # cancel what is left (a worker waiting on it gets RuntimeError(CLOSED))
        try:
            tasks = asyncio.all_tasks(loop)
            for task in tasks:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            loop.close()


def payment_gate_wsgi(
    app: WSGIApplication, /, pricing: dict[str, list[PricingEntry]], **kwargs: Any
) -> PaymentGateWSGI:
    """`payment_gate` for WSGI apps: `pricing` maps path prefixes to entries; the other
    arguments are `PaymentGate`'s."""
    return PaymentGateWSGI(app, routes=pricing, **kwargs)


# -- one admitted request ------------------------------------------------------------------


class _Admitted:
    """The app's response to an admitted request, passed to the server through `admit`;
    the iterable the server gets for it."""

    def __init__(
        self,
        gate: PaymentGateWSGI,
        admit: Admit,
        environ: WSGIEnvironment,
        start_response: StartResponse,
    ) -> None:
        self.gate, self.admit, self.environ = gate, admit, environ
        self.server_start_response = start_response
        self.server_write: Callable[[bytes], object] | None = None
        self.status: str | None = None  # the app's, as it gave them
        self.headers: Headers = []
        self.code: int | None = None  # the status `start` heard, once the head is sent
        self.replaced: Reply | None = None  # what `start` answered instead
        self.body = bytearray() if admit.capture else None
        self.iterable: Iterable[bytes] | None = None
        self.iterator: Iterator[bytes] | None = None
        self.first = b""  # the app's first chunk, read before its head was sent
        self.ended = False

    def respond(self) -> Iterable[bytes]:
        """Runs the app until its head has gone to the server, and returns the iterable
        that gives the server the rest."""
        try:
            self.iterable = self.gate.app(self.environ, self._start_response)
            self.iterator = iter(self.iterable)
            if self.code is None:  # else write() sent it, during the app call
                self.first = self._next()
            if self.code is None:  # or during its first chunk (a generator's write())
                self._send_head()
        except BaseException as e:
            self._fail(e)
            raise
        if self.replaced is not None:  # the app's response is dropped
            try:
                self._close_app()
            finally:
                self._end(self.code)
            return [self.replaced.body]
        self._keep(self.first)
        return self

    def __iter__(self) -> Iterator[bytes]:
        return self

    def __next__(self) -> bytes:
        """The app's next chunk for the server; after the last, the app's iterable is
        closed and `end` hears the response before StopIteration."""
        if self.first:
            first, self.first = self.first, b""
            return first
        try:
            chunk = self._next()
            if not chunk:
                self._close_app()
        except BaseException as e:
            self._fail(e)
            raise
        if chunk:
            self._keep(chunk)
            return chunk
        self._end(self.code)
        raise StopIteration

    def close(self) -> None:
        """The server is done with the response: if before its end, the handler failed."""
        if self.ended:
            return
        try:
            self._close_app()
        finally:
            self._end(None)

    def _next(self) -> bytes:
        """The app's next non-empty chunk, b"" at its end."""
        assert self.iterator is not None
        for chunk in self.iterator:
            if not isinstance(chunk, bytes):
                raise TypeError(f"the WSGI app yielded {type(chunk).__name__}, not bytes")
            if chunk:
                return chunk
        return b""

    def _keep(self, chunk: bytes) -> None:
        if self.body is not None:
            self.body += chunk

    def _send_head(self) -> None:
        """The app's status and headers, past `admit.start`, to the server."""
        if self.status is None:
            raise AssertionError("the WSGI app did not call start_response()")
        code = int(self.status[:3])
        # Names keep the app's case; the scheme sees them lowercased, as ASGI has them.
        raw = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in self.headers]
        if self.admit.wants_start:
            lowered = [(k.lower(), v) for k, v in raw]
            extra = self.gate.run(self.admit.start(code, lowered))
            if isinstance(extra, Reply):
                self.code, self.replaced = code, extra
                self.server_write = self.server_start_response(*_head(extra))
                return
            raw += extra
        self.code = code
        headers = _str_headers(private_cache(raw))
        self.server_write = self.server_start_response(self.status, headers)

    def _start_response(
        self, status: str, headers: Headers, exc_info: OptExcInfo | None = None, /
    ) -> Callable[[bytes], object]:
        if exc_info is not None and exc_info[1] is not None:
            try:
                if self.code is not None:  # too late to replace the headers
                    raise exc_info[1].with_traceback(exc_info[2])
            finally:
                exc_info = None
        elif self.status is not None:
            raise AssertionError("start_response() called again without exc_info")
        if not isinstance(status, str) or not status[:3].isdigit():
            raise ValueError(f"invalid WSGI status {status!r}")
        self.status, self.headers = status, list(headers)
        return self._write

    def _write(self, data: bytes) -> None:
        """The app's write(): the head (if not yet sent) and `data` go to the server now."""
        if self.status is None:
            raise AssertionError("write() called before start_response()")
        if not isinstance(data, bytes):
            raise TypeError(f"write() takes bytes, not {type(data).__name__}")
        if self.code is None:
            self._send_head()
        if self.replaced is None and data:
            assert self.server_write is not None
            self._keep(data)
            self.server_write(data)

    def _fail(self, error: BaseException) -> None:
        """The app raised (or its head could not be sent): `end` hears a failed handler."""
        if self.ended:
            return
        try:
            self._close_app()
        except BaseException:
            log.exception("closing the WSGI app's response after its failure failed")
        try:
            self._end(None)
        except BaseException as e:  # the app's error is the one to raise
            if not isinstance(e, RuntimeError) or str(e) != CLOSED:
                log.error("the payment gate failed after the app did", exc_info=e)

    def _end(self, status: int | None) -> None:
        if self.ended:
            return
        self.ended = True
        body = None if self.body is None or status is None else bytes(self.body)
        self.gate.run(self.admit.end(status, body))

    def _close_app(self) -> None:
        iterable, self.iterable = self.iterable, None
        close = getattr(iterable, "close", None)
        if close is not None:
            close()


def _path(environ: WSGIEnvironment) -> str:
    """SCRIPT_NAME + PATH_INFO, the bytes the client sent (WSGI carries them as latin-1)."""
    path = str(environ.get("SCRIPT_NAME", "")) + str(environ.get("PATH_INFO", ""))
    return path.encode("latin-1").decode("utf-8", "replace") or "/"


def _headers(environ: WSGIEnvironment) -> RawHeaders:
    headers: RawHeaders = []
    for key, value in environ.items():
        if key.startswith("HTTP_") and key not in ("HTTP_CONTENT_TYPE", "HTTP_CONTENT_LENGTH"):
            name = key[5:].replace("_", "-").lower()
        elif key in ("CONTENT_TYPE", "CONTENT_LENGTH") and value:
            name = key.replace("_", "-").lower()
        else:
            continue
        headers.append((name.encode("latin-1"), str(value).encode("latin-1")))
    return headers


def _scope(environ: WSGIEnvironment, path: str, headers: RawHeaders) -> Scope:
    """What `serves` reads: the request as an ASGI HTTP scope."""
    return {
        "type": "http",
        "method": str(environ.get("REQUEST_METHOD", "GET")).upper(),
        "path": path,
        "root_path": str(environ.get("SCRIPT_NAME", ""))
        .encode("latin-1")
        .decode("utf-8", "replace"),
        "query_string": str(environ.get("QUERY_STRING", "")).encode("latin-1"),
        "headers": headers,
        "scheme": str(environ.get("wsgi.url_scheme", "http")),
    }


def _head(reply: Reply) -> tuple[str, Headers]:
    try:
        phrase = HTTPStatus(reply.status).phrase
    except ValueError:
        phrase = "Unknown"
    return f"{reply.status} {phrase}", _str_headers(reply.headers)


def _str_headers(raw: RawHeaders) -> Headers:
    return [(k.decode("latin-1"), v.decode("latin-1")) for k, v in raw]
