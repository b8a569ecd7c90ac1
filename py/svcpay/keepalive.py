"""A small keep-alive HTTP/1.1 client for the gate's calls to its facilitator (docs/adr/0027).

A gate posts one small JSON body per payment to one origin, thousands of times a second.
httpx spends about a millisecond of CPU per such call (its pool checks every pooled
connection per request); this client spends about 30 µs: a pool of idle connections per
origin, one request per connection at a time, the request written in one piece, the response
parsed by httptools (uvicorn's parser: Content-Length, chunked, keep-alive rules). TLS for
https origins. No redirects, proxies, cookies or compression: a facilitator needs none.

`Unreachable` says the request never left (no connection): safe to treat as not received.
`Broken` says it may have been received (a timeout or a dropped connection after the
request was written): a settle may be under way. A pooled connection that the server had
closed while idle is retried once on a new one (nothing was received on it).
"""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import httptools

READ_CHUNK = 65_536
MAX_RESPONSE = 1 << 20  # a facilitator's answer is a few hundred bytes


class Unreachable(Exception):
    """No connection could be made: the request was not sent."""


class Broken(Exception):
    """The request may have been received, and no complete answer came."""


@dataclass
class Response:
    status: int
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)


class _Parse:
    """httptools' callbacks for one response."""

    def __init__(self) -> None:
        self.body: list[bytes] = []
        self.size = 0
        self.headers: dict[str, str] = {}
        self.headers_done = self.done = self.keep = False
        self.parser: httptools.HttpResponseParser | None = None

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        self.headers_done = True

    def on_body(self, body: bytes) -> None:
        self.size += len(body)
        if self.size > MAX_RESPONSE:
            raise Broken(f"the answer is larger than {MAX_RESPONSE} bytes")
        self.body.append(body)

    def on_message_complete(self) -> None:
        self.done = True
        assert self.parser is not None  # read now: the parser resets once the message ends
        self.keep = self.parser.should_keep_alive()


class _Stale(Exception):
    """A pooled connection was found closed before any answer byte."""


class KeepAliveClient:
    """POSTs to one origin (`http://host:port` or `https://...`) over pooled connections.

    Args:
        origin: scheme, host and port; paths are given per call.
        max_connections: open at most this many at once (callers beyond wait their turn,
            within their timeout).
        timeout: seconds per call, from waiting for a connection to the last answer byte.
    """

    def __init__(self, origin: str, *, max_connections: int = 64, timeout: float = 30.0) -> None:
        parts = urlsplit(origin)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) origin: {origin!r}")
        self.host = parts.hostname
        self.tls = parts.scheme == "https"
        self.port = parts.port or (443 if self.tls else 80)
        self.prefix = parts.path.rstrip("/")
        default_port = self.port == (443 if self.tls else 80)
        host = f"[{self.host}]" if ":" in self.host else self.host
        self._host = (host if default_port else f"{host}:{self.port}").encode("idna")
        self.timeout, self.max_connections = timeout, max_connections
        self._idle: deque[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = deque()
        self._slots: asyncio.Semaphore | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ssl: ssl.SSLContext | None = ssl.create_default_context() if self.tls else None

    async def post(self, path: str, body: bytes, headers: dict[str, str] | None = None) -> Response:
        """POSTs `body` (JSON) to `path`; Unreachable or Broken when no answer came."""
        head = [
            b"POST ",
            (self.prefix + path).encode(),
            b" HTTP/1.1\r\nHost: ",
            self._host,
            b"\r\nContent-Type: application/json\r\nContent-Length: ",
            str(len(body)).encode(),
            b"\r\n",
        ]
        for name, value in (headers or {}).items():
            if any(c in name + value for c in "\r\n\0") or not name.strip():
                raise ValueError(f"header {name!r} cannot be sent: empty, or a control char")
            head += [name.encode("latin-1"), b": ", value.encode("latin-1"), b"\r\n"]
        request = b"".join([*head, b"\r\n", body])
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # connections and the semaphore serve one event loop
            self._drop_idle()
            self._loop, self._slots = loop, asyncio.Semaphore(self.max_connections)
        assert self._slots is not None
        sent = [False]
        try:
            async with asyncio.timeout(self.timeout), self._slots:
                try:
                    return await self._exchange(request, sent, pooled=True)
                except _Stale:  # closed by the server while idle: never received
                    return await self._exchange(request, sent, pooled=False)
        except TimeoutError as e:
            if not sent[0]:
                raise Unreachable(f"no connection within {self.timeout:g} s") from e
            raise Broken(f"no answer within {self.timeout:g} s") from e

    async def _exchange(self, request: bytes, sent: list[bool], *, pooled: bool) -> Response:
        reader, writer, reused = await self._connection(pooled)
        sent[0] = True
        answered = False
        try:
            writer.write(request)
            parse = _Parse()
            parser = parse.parser = httptools.HttpResponseParser(parse)
            while not parse.done:
                data = await reader.read(READ_CHUNK)
                if not data:
                    if reused and not answered:
                        raise _Stale()
                    if parse.headers_done and "content-length" not in parse.headers:
                        break  # the body ran to the end of the connection
                    raise Broken("the facilitator closed the connection mid-answer")
                answered = True
                parser.feed_data(data)
            keep = parse.done and parse.keep
            response = Response(parser.get_status_code(), b"".join(parse.body), parse.headers)
        except (ConnectionError, OSError, httptools.HttpParserError) as e:
            writer.close()
            if reused and not answered and isinstance(e, ConnectionError):
                raise _Stale() from e
            raise Broken(f"the connection failed: {e}") from e
        except BaseException:
            writer.close()
            raise
        if keep:
            self._idle.append((reader, writer))
        else:
            writer.close()
        return response

    async def _connection(
        self, pooled: bool
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, bool]:
        while pooled and self._idle:
            reader, writer = self._idle.pop()
            if not reader.at_eof() and not writer.is_closing():
                return reader, writer, True
            writer.close()
        try:
            reader, writer = await asyncio.open_connection(
                self.host, self.port, ssl=self._ssl, limit=READ_CHUNK
            )
        except OSError as e:
            raise Unreachable(f"cannot connect to {self.host}:{self.port}: {e}") from e
        return reader, writer, False

    def _drop_idle(self) -> None:
        while self._idle:
            _, writer = self._idle.pop()
            writer.close()

    async def aclose(self) -> None:
        self._drop_idle()
