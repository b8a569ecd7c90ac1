"""`PaymentGateWSGI`: the payment gate for WSGI apps (Flask, Django, any WSGI callable).

The gate's rules live in the ASGI `PaymentGate` alone; this adapter runs that gate,
unchanged, around an ASGI view of the WSGI app:

- The gate (its replay store, subscription cache, meter) lives on one event loop, run by a
  background thread the adapter starts on the first gated request. `close()` (or leaving
  `with gate:`) stops it; `run(coro)` runs a coroutine there (e.g. `meter.start()`,
  `client.close()`), since the gate's async resources must stay on that loop.
- Each gated request becomes an ASGI HTTP scope (path = SCRIPT_NAME + PATH_INFO, the path the
  client asked for; root_path = SCRIPT_NAME). The WSGI worker thread that called the adapter
  does all the blocking work: when the gate admits the request, it calls the wrapped app
  with the original environ, in that thread, and hands its status, headers and body back
  through the gate one chunk at a time (a streamed response stays streamed). The response
  ends only once the gate has finished with it, so metered usage is recorded by then.
- When the gate answers itself (402, 400), that is the response and the app is not called.
- An exception from the app propagates to the WSGI server as it would without the gate. If
  it comes before the response started, the gate sees a handler that produced no response
  (a failure: no metered charge, a one-time proof is released for a retry); if it comes
  mid-body, it is raised through the gate, a failed handler too. So is a response the server
  closes before its end (the client went away): no usage is recorded for it.
- Paths outside the gated prefixes go straight to the app, without touching the loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import queue
import threading
from collections import deque
from collections.abc import Callable, Collection, Coroutine, Iterable, Iterator
from http import HTTPStatus
from types import TracebackType
from typing import Any, TypeVar
from urllib.parse import quote_from_bytes
from wsgiref.types import InputStream, StartResponse, WSGIApplication, WSGIEnvironment

from svcpay.gate.asgi import (
    Message,
    Meter,
    PaymentGate,
    Receive,
    Scope,
    Send,
    Subscriptions,
)
from svcpay.gate.core import under
from svcpay.gate.pricing import PricingEntry, Terms
from svcpay.protocol.memo import Memos
from svcpay.protocol.replay import ReplayStore
from svcpay.protocol.verify import RemoteVerifier
from svcpay.schemes.x402_exact.facilitator_client import X402Facilitator
from svcpay.schemes.x402_exact.idempotency import PaymentIds

__all__ = ["PaymentGateWSGI", "payment_gate_wsgi"]

log = logging.getLogger("svcpay.gate.wsgi")
T = TypeVar("T")
Headers = list[tuple[str, str]]
RawHeaders = list[tuple[bytes, bytes]]
ExcInfo = tuple[type[BaseException], BaseException, TracebackType | None]
OptExcInfo = ExcInfo | tuple[None, None, None]
SCOPE_KEY = "svcpay.wsgi"  # the scope entry carrying the request's exchange to the ASGI view
READ_CHUNK = 64 * 1024


class PaymentGateWSGI:
    """A WSGI callable: `PaymentGate` (same arguments) in front of the WSGI app `app`.
    Safe to call from many WSGI worker threads at once."""

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
        payment_ids: PaymentIds | None = None,
    ) -> None:
        """`serves(scope)`: whether `app` has a route for the request's path and method
        (a WSGI app's routes cannot be read: without it every gated request is priced).
        x402 (with `terms.owner`) works as in `PaymentGate`; its facilitator client lives on
        the adapter's loop, like the other async resources."""
        self.app = app
        self.gate = PaymentGate(
            _asgi_view,
            routes=routes,
            terms=terms,
            memos=memos,
            trusted_facilitators=trusted_facilitators,
            replay=replay,
            subscriptions=subscriptions,
            meter=meter,
            remote=remote,
            serves=serves,
            x402_facilitator=x402_facilitator,
            payment_ids=payment_ids,
        )
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._closed = False
        self._live: set[_Exchange] = set()  # exchanges whose gate coroutine has not ended

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        path = _path(environ)
        if not any(under(path, prefix) for prefix, _ in self.gate.routes):
            return self.app(environ, start_response)
        exchange = _Exchange(self.app, environ, start_response)
        loop = self._start(exchange)
        scope = _scope(environ, path, exchange)
        coro = self.gate(scope, exchange.receive, exchange.send)
        try:
            future = asyncio.run_coroutine_threadsafe(coro, loop)
        except RuntimeError:  # the loop closed in between
            coro.close()
            self._forget(exchange)
            raise RuntimeError("the payment gate is closed") from None
        exchange.bind(loop, future, self._forget)
        return exchange.respond()

    # -- the loop ---------------------------------------------------------------------

    @property
    def running(self) -> bool:
        """Whether the gate's loop thread is running (it starts on the first gated request)."""
        thread = self._thread
        return thread is not None and thread.is_alive()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Runs `coro` on the gate's loop and returns its result: set up and tear down the
        gate's async resources there (`meter.start()`, `meter.close()`, `client.close()`)."""
        loop = self._start(None)
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("run() called from the gate's own loop: await the coroutine")
        return asyncio.run_coroutine_threadsafe(coro, loop).result(timeout)

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

    def _start(self, exchange: _Exchange | None) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._closed:
                raise RuntimeError("the payment gate is closed")
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(
                    target=self._run_loop, args=(loop,), name="svcpay-gate-wsgi", daemon=True
                )
                thread.start()
                self._loop, self._thread = loop, thread
            if exchange is not None:
                self._live.add(exchange)
            return self._loop

    def _forget(self, exchange: _Exchange) -> None:
        with self._lock:
            self._live.discard(exchange)

    def _run_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_forever()
        finally:
            try:
                tasks = asyncio.all_tasks(loop)
                for task in tasks:
                    task.cancel()
                loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
                loop.run_until_complete(loop.shutdown_asyncgens())
                loop.run_until_complete(loop.shutdown_default_executor())
            finally:
                loop.close()
                with self._lock:
                    stranded, self._live = list(self._live), set()
                for exchange in stranded:  # submitted as the loop stopped: never ran
                    exchange.inbox.put(("done", RuntimeError("the payment gate is closed")))


def payment_gate_wsgi(
    app: WSGIApplication, /, pricing: dict[str, list[PricingEntry]], **kwargs: Any
) -> PaymentGateWSGI:
    """`payment_gate` for WSGI apps: `pricing` maps path prefixes to entries; the other
    arguments are `PaymentGate`'s."""
    return PaymentGateWSGI(app, routes=pricing, **kwargs)


# -- one request -------------------------------------------------------------------------


class _AppFailed(Exception):
    """Raised through the gate: the app failed after its response had started."""


class _Aborted(Exception):
    """Raised through the gate: the WSGI server closed the response before its end."""


async def _asgi_view(scope: Scope, receive: Receive, send: Send) -> None:
    """The WSGI app as the gate's ASGI app: asks the worker thread for the app's next
    response messages, sends them on, until the last one. Runs on the loop."""
    exchange: _Exchange = scope[SCOPE_KEY]
    while True:
        messages = await exchange.next_messages()
        if messages is None:  # the app raised before its response started: no response
            return
        for message in messages:
            await send(message)
        last = messages[-1]
        if last["type"] == "http.response.body" and not last.get("more_body", False):
            return


class _Exchange:
    """One gated request. The WSGI worker thread drives it: it waits on `inbox` for what the
    loop side posts (the gate's response messages, requests for the app's next messages or
    for request body, the gate's end) and does every blocking step itself: reading
    wsgi.input, calling and iterating the app, handing chunks to the WSGI server."""

    def __init__(
        self, app: WSGIApplication, environ: WSGIEnvironment, start_response: StartResponse
    ) -> None:
        self.app, self.environ, self.server_start_response = app, environ, start_response
        self.inbox: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
        self.loop: asyncio.AbstractEventLoop | None = None
        self._on_done: Callable[[_Exchange], None] = lambda _: None
        # Worker side: the server's half.
        self.out: deque[bytes] = deque()  # body the gate passed on, not yet given to the server
        self.server_write: Callable[[bytes], object] | None = None
        self.server_started = False
        self.finished = False  # the gate coroutine ended
        self.gate_error: BaseException | None = None
        self.app_error: BaseException | None = None
        self.closed = False
        # Worker side: the app's half.
        self.want: asyncio.Future[list[Message] | None] | None = None  # the view waits on it
        self.called = False
        self.app_done = False  # nothing more to ask of the app
        self.iterable: Iterable[bytes] | None = None  # the app's, until closed
        self.iterator: Iterator[bytes] | None = None
        self.status: str | None = None
        self.headers: Headers = []
        self.forwarded: tuple[int, RawHeaders] | None = None  # the start sent into the gate
        self.bodies_sent = self.bodies_echoed = 0
        # The request body, read on the loop's behalf (and replayed to the app).
        length = str(environ.get("CONTENT_LENGTH") or "").strip()
        self.body_left: int | None = (
            int(length)
            if length.isdigit()
            else (None if environ.get("wsgi.input_terminated") else 0)
        )
        self.body_read = bytearray()
        # Loop side.
        self._request_complete = False
        self._response_complete: asyncio.Event | None = None

    def bind(
        self,
        loop: asyncio.AbstractEventLoop,
        future: concurrent.futures.Future[None],
        on_done: Callable[[_Exchange], None],
    ) -> None:
        self.loop, self._on_done = loop, on_done
        future.add_done_callback(self._gate_done)

    def _gate_done(self, future: concurrent.futures.Future[None]) -> None:
        self._on_done(self)
        error = (
            RuntimeError("the payment gate was closed")
            if future.cancelled()
            else future.exception()
        )
        self.inbox.put(("done", error))

    # -- the loop side (runs on the gate's loop) ---------------------------------------

    async def receive(self) -> Message:
        if self._request_complete or self._done_event().is_set():
            await self._done_event().wait()
            return {"type": "http.disconnect"}
        message: Message = await self._ask("read")
        if not message.get("more_body", False):
            self._request_complete = True
        return message

    async def send(self, message: Message) -> None:
        self.inbox.put(("send", message))
        if message["type"] == "http.response.body" and not message.get("more_body", False):
            self._done_event().set()

    async def next_messages(self) -> list[Message] | None:
        result: list[Message] | None = await self._ask("want")
        return result

    async def _ask(self, kind: str) -> Any:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.inbox.put((kind, future))
        return await future

    def _done_event(self) -> asyncio.Event:
        if self._response_complete is None:
            self._response_complete = asyncio.Event()
        return self._response_complete

    # -- the worker side (runs in the WSGI worker thread) ------------------------------

    def respond(self) -> Iterable[bytes]:
        """Runs the exchange until the server's start_response has been called (the gate's
        answer, or the app's first body chunk went through the gate), then returns the
        iterable that streams the rest."""
        try:
            while not self.server_started and not self.finished:
                self._step()
        except BaseException:
            self.close()
            raise
        if not self.server_started:
            self._raise_failure()
            raise RuntimeError("the payment gate sent no response")
        return _Response(self)

    def next_chunk(self) -> bytes | None:
        while not self.out:
            if self.finished:
                self._raise_failure()
                return None
            self._step()
        return self.out.popleft()

    def close(self) -> None:
        """The server is done with the response: if it ended early, stop the gate (no
        usage is charged for a response that did not complete), and close the app's
        iterable."""
        if self.closed:
            return
        self.closed = True
        try:
            while not self.finished:
                if self.want is not None:
                    self.app_done = True
                    self._settle(self.want, error=_Aborted())
                    self.want = None
                else:
                    self._handle(self.inbox.get())
        finally:
            if self.gate_error is not None and not isinstance(
                self.gate_error, _AppFailed | _Aborted
            ):
                log.error("the payment gate failed", exc_info=self.gate_error)
            self._close_app()

    def _step(self) -> None:
        if self.want is not None:
            if self.app_done:  # cannot happen: the view stops asking after the end
                self._settle(self.want, error=RuntimeError("the response has ended"))
                self.want = None
            else:
                self._advance()
        else:
            self._handle(self.inbox.get())

    def _handle(self, event: tuple[str, Any]) -> None:
        kind, value = event
        if kind == "send":
            self._server_send(value)
        elif kind == "want":
            self.want = value
        elif kind == "read":
            self._settle(value, self._read())
        elif kind == "done" and not self.finished:
            self.finished, self.gate_error = True, value

    def _server_send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            status, headers = self._wsgi_start(message)
            self.server_write = self.server_start_response(status, headers)
            self.server_started = True
        elif message["type"] == "http.response.body":
            self.bodies_echoed += 1
            body = bytes(message.get("body", b""))
            if body:
                self.out.append(body)

    def _wsgi_start(self, message: Message) -> tuple[str, Headers]:
        code = int(message["status"])
        raw = [(bytes(k), bytes(v)) for k, v in message.get("headers", [])]
        if self.status is not None and self.forwarded == (code, raw):
            return self.status, list(self.headers)  # the app's own, exactly as it gave them
        try:
            phrase = HTTPStatus(code).phrase
        except ValueError:
            phrase = "Unknown"
        return f"{code} {phrase}", [(k.decode("latin-1"), v.decode("latin-1")) for k, v in raw]

    def _advance(self) -> None:
        """The view waits for the app's next messages: produce them."""
        try:
            messages = self._app_messages()
        except BaseException as e:
            self.app_done, self.app_error = True, e
            try:
                self._close_app()
            except BaseException:
                log.exception("closing the WSGI app's response after its failure failed")
            if self.forwarded is None:
                self._reply(None)  # the gate sees a handler that produced no response
            else:
                self._reply(error=_AppFailed())
            return
        self._reply(messages)

    def _app_messages(self) -> list[Message]:
        if not self.called:
            self.called = True
            if self.body_read:
                self.environ["wsgi.input"] = _ReplayInput(
                    bytes(self.body_read), self.environ["wsgi.input"]
                )
            self.iterable = self.app(self.environ, self._start_response)
            self.iterator = iter(self.iterable)
        assert self.iterator is not None
        while True:
            try:
                chunk = next(self.iterator)
            except StopIteration:
                self.app_done = True
                self._close_app()
                return [*self._head(), _body(b"", more=False)]
            if not isinstance(chunk, bytes):
                raise TypeError(f"the WSGI app yielded {type(chunk).__name__}, not bytes")
            if chunk:
                self.bodies_sent += 1
                return [*self._head(), _body(chunk, more=True)]

    def _head(self) -> list[Message]:
        if self.forwarded is not None:
            return []
        if self.status is None:
            raise AssertionError("the WSGI app did not call start_response()")
        code = int(self.status.split(None, 1)[0])
        raw = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in self.headers]
        self.forwarded = (code, raw)
        return [{"type": "http.response.start", "status": code, "headers": list(raw)}]

    def _start_response(
        self, status: str, headers: Headers, exc_info: OptExcInfo | None = None, /
    ) -> Callable[[bytes], object]:
        if exc_info is not None and exc_info[1] is not None:
            try:
                if self.forwarded is not None:  # too late to replace the headers
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
        """The app's write(): the data goes through the gate and to the server now."""
        if self.status is None:
            raise AssertionError("write() called before start_response()")
        if not isinstance(data, bytes):
            raise TypeError(f"write() takes bytes, not {type(data).__name__}")
        if not data and self.forwarded is not None:
            return
        messages = self._head()
        if data:
            self.bodies_sent += 1
            messages.append(_body(data, more=True))
        if not self._reply(messages) or not self._pump(
            lambda: self.bodies_echoed >= self.bodies_sent and self.server_started
        ):
            raise OSError("the response was aborted")
        assert self.server_write is not None
        while self.out:
            self.server_write(self.out.popleft())

    def _reply(
        self, messages: list[Message] | None = None, error: BaseException | None = None
    ) -> bool:
        """Answers the view's pending (or next) request for the app's messages."""
        if not self._pump(lambda: self.want is not None):
            return False
        assert self.want is not None
        self._settle(self.want, messages, error)
        self.want = None
        return True

    def _pump(self, ready: Callable[[], bool]) -> bool:
        """Handles the loop's posts until `ready()`; False if the gate ends first."""
        while not ready():
            if self.finished:
                return False
            self._handle(self.inbox.get())
        return True

    def _settle(
        self, future: asyncio.Future[Any], result: Any = None, error: BaseException | None = None
    ) -> None:
        def settle() -> None:
            if future.done():
                return
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(result)

        assert self.loop is not None
        with contextlib.suppress(RuntimeError):  # the loop closed: the gate is gone
            self.loop.call_soon_threadsafe(settle)

    def _read(self) -> Message:
        if self.body_left == 0:
            return {"type": "http.request", "body": b"", "more_body": False}
        stream: InputStream = self.environ["wsgi.input"]
        size = READ_CHUNK if self.body_left is None else min(READ_CHUNK, self.body_left)
        data = stream.read(size)
        self.body_read += data
        if self.body_left is not None:
            self.body_left = self.body_left - len(data) if data else 0
        elif not data:
            self.body_left = 0
        return {"type": "http.request", "body": data, "more_body": self.body_left != 0}

    def _close_app(self) -> None:
        iterable, self.iterable = self.iterable, None
        close = getattr(iterable, "close", None)
        if close is not None:
            close()

    def _raise_failure(self) -> None:
        error = self.app_error
        if error is None and not isinstance(self.gate_error, _AppFailed | _Aborted):
            error = self.gate_error
        self.app_error = self.gate_error = None
        if error is not None:
            raise error


class _Response:
    """The iterable the WSGI server gets for a gated request."""

    def __init__(self, exchange: _Exchange) -> None:
        self._exchange = exchange

    def __iter__(self) -> Iterator[bytes]:
        return self

    def __next__(self) -> bytes:
        chunk = self._exchange.next_chunk()
        if chunk is None:
            raise StopIteration
        return chunk

    def close(self) -> None:
        self._exchange.close()


class _ReplayInput:
    """wsgi.input for the app after the gate read (part of) the body: those bytes first."""

    def __init__(self, head: bytes, rest: InputStream) -> None:
        self._head, self._rest = head, rest

    def read(self, size: int | None = -1, /) -> bytes:
        if size is None or size < 0:
            head, self._head = self._head, b""
            return head + self._rest.read()
        head, self._head = self._head[:size], self._head[size:]
        return head + (self._rest.read(size - len(head)) if len(head) < size else b"")

    def readline(self, size: int | None = -1, /) -> bytes:
        limit = len(self._head) if size is None or size < 0 else min(size, len(self._head))
        newline = self._head.find(b"\n", 0, limit)
        if newline >= 0 or limit == size:
            end = newline + 1 if newline >= 0 else limit
            line, self._head = self._head[:end], self._head[end:]
            return line
        head, self._head = self._head, b""
        if size is None or size < 0:
            return head + self._rest.readline()
        return head + self._rest.readline(size - len(head))

    def readlines(self, hint: int = -1, /) -> list[bytes]:
        lines: list[bytes] = []
        total = 0
        while line := self.readline():
            lines.append(line)
            total += len(line)
            if 0 < hint <= total:
                break
        return lines

    def __iter__(self) -> Iterator[bytes]:
        while line := self.readline():
            yield line


def _body(data: bytes, *, more: bool) -> Message:
    return {"type": "http.response.body", "body": data, "more_body": more}


def _raw(environ: WSGIEnvironment) -> bytes:
    """SCRIPT_NAME + PATH_INFO as the bytes the client sent (WSGI carries them as latin-1)."""
    path = str(environ.get("SCRIPT_NAME", "")) + str(environ.get("PATH_INFO", ""))
    return path.encode("latin-1")


def _path(environ: WSGIEnvironment) -> str:
    return _raw(environ).decode("utf-8", "replace") or "/"


def _scope(environ: WSGIEnvironment, path: str, exchange: _Exchange) -> Scope:
    headers: RawHeaders = []
    for key, value in environ.items():
        if key.startswith("HTTP_") and key not in ("HTTP_CONTENT_TYPE", "HTTP_CONTENT_LENGTH"):
            name = key[5:].replace("_", "-").lower()
        elif key in ("CONTENT_TYPE", "CONTENT_LENGTH") and value:
            name = key.replace("_", "-").lower()
        else:
            continue
        headers.append((name.encode("latin-1"), str(value).encode("latin-1")))
    uri = str(environ.get("RAW_URI") or environ.get("REQUEST_URI") or "")
    raw_path = (
        uri.split("?", 1)[0].encode("latin-1")
        if uri.startswith("/")
        else quote_from_bytes(_raw(environ), safe="/:@!$&'()*+,;=~").encode("ascii")
    )
    remote, port = environ.get("REMOTE_ADDR"), str(environ.get("REMOTE_PORT") or "0")
    server_port = str(environ.get("SERVER_PORT") or "")
    protocol = str(environ.get("SERVER_PROTOCOL", "HTTP/1.1"))
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": protocol.split("/", 1)[-1],
        "method": str(environ.get("REQUEST_METHOD", "GET")).upper(),
        "scheme": str(environ.get("wsgi.url_scheme", "http")),
        "path": path,
        "raw_path": raw_path,
        "query_string": str(environ.get("QUERY_STRING", "")).encode("latin-1"),
        "root_path": str(environ.get("SCRIPT_NAME", ""))
        .encode("latin-1")
        .decode("utf-8", "replace"),
        "headers": headers,
        "client": (str(remote), int(port) if port.isdigit() else 0) if remote else None,
        "server": (
            (str(environ.get("SERVER_NAME", "")), int(server_port))
            if server_port.isdigit()
            else None
        ),
        SCOPE_KEY: exchange,
    }
