"""svcpay.keepalive against a scripted HTTP/1.1 server on a real socket: answers with a
Content-Length or chunked, connections reused, a connection the server closed while idle
retried on a new one, `Connection: close` honoured, and the two failures told apart (no
connection: Unreachable; no answer after sending: Broken)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import pytest

from svcpay.keepalive import Broken, KeepAliveClient, Unreachable

pytestmark = pytest.mark.anyio
Answer = Callable[[bytes], bytes | None]  # the request -> the bytes to answer (None: hang)


class Server:
    def __init__(self) -> None:
        self.connections = 0
        self.requests: list[bytes] = []
        self.answer: Answer = lambda _: ok(b'{"ok":true}')
        self.close_after_answer = False

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length")
                )
                request = head + await reader.readexactly(length)
                self.requests.append(request)
                answer = self.answer(request)
                if answer is None:
                    await asyncio.sleep(10)
                    return
                writer.write(answer)
                await writer.drain()
                if self.close_after_answer:
                    return
        except asyncio.IncompleteReadError:
            return
        finally:
            writer.close()


def ok(body: bytes, *extra: bytes) -> bytes:
    head = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n" % len(body)
    return head + b"".join(extra) + b"\r\n" + body


@pytest.fixture
async def served() -> AsyncIterator[tuple[Server, str]]:
    server = Server()
    listener = await asyncio.start_server(server.handle, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    yield server, f"http://127.0.0.1:{port}"
    listener.close()


async def test_answers_come_back_over_one_reused_connection(served: tuple[Server, str]) -> None:
    server, origin = served
    client = KeepAliveClient(origin + "/base/", timeout=5)
    for i in range(5):
        answer = await client.post("/settle", b'{"n":%d}' % i, {"Authorization": "Bearer k"})
        assert (answer.status, answer.body) == (200, b'{"ok":true}')
    assert server.connections == 1 and len(server.requests) == 5
    first = server.requests[0]
    assert first.startswith(b"POST /base/settle HTTP/1.1\r\nHost: 127.0.0.1:")
    assert b"Authorization: Bearer k\r\n" in first and first.endswith(b'{"n":0}')
    # concurrent calls open connections of their own, up to the cap, and reuse them
    await asyncio.gather(*(client.post("/settle", b"{}") for _ in range(20)))
    assert 1 < server.connections <= 1 + 20
    before = server.connections
    await asyncio.gather(*(client.post("/settle", b"{}") for _ in range(4)))
    assert server.connections == before
    await client.aclose()


async def test_a_chunked_answer_and_connection_close(served: tuple[Server, str]) -> None:
    server, origin = served
    server.answer = lambda _: (
        b"HTTP/1.1 503 Service Unavailable\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
    )
    client = KeepAliveClient(origin, timeout=5)
    answer = await client.post("/verify", b"{}")
    assert (answer.status, answer.body) == (503, b"hello world")
    server.answer = lambda _: ok(b"{}", b"Connection: close\r\n")
    server.close_after_answer = True
    for _ in range(3):
        assert (await client.post("/verify", b"{}")).status == 200
    # the chunked answer's connection served the first; then a new one each time
    assert server.connections == 3
    await client.aclose()


async def test_a_connection_closed_while_idle_is_retried_on_a_new_one(
    served: tuple[Server, str],
) -> None:
    server, origin = served
    server.close_after_answer = True  # closes every connection after answering, silently
    client = KeepAliveClient(origin, timeout=5)
    for _ in range(3):
        await client.post("/settle", b"{}")
        await asyncio.sleep(0.05)  # the close reaches the client's idle connection
    assert len(server.requests) == 3  # each sent once: never twice
    await client.aclose()


async def test_no_connection_is_unreachable_and_no_answer_is_broken(
    served: tuple[Server, str],
) -> None:
    server, origin = served
    with pytest.raises(Unreachable):
        await KeepAliveClient("http://127.0.0.1:9", timeout=2).post("/settle", b"{}")
    server.answer = lambda _: None  # reads the request and never answers
    client = KeepAliveClient(origin, timeout=0.3)
    with pytest.raises(Broken, match="no answer within 0.3 s"):
        await client.post("/settle", b"{}")
    server.answer = lambda _: b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\nshort"
    server.close_after_answer = True
    with pytest.raises(Broken):
        await KeepAliveClient(origin, timeout=2).post("/settle", b"{}")
    server.answer = lambda _: b"garbage\r\n\r\n"
    with pytest.raises(Broken):
        await KeepAliveClient(origin, timeout=2).post("/settle", b"{}")


async def test_bad_origins_and_headers_are_refused() -> None:
    for origin in ("ftp://x", "not a url", "http://"):
        with pytest.raises(ValueError):
            KeepAliveClient(origin)
    client = KeepAliveClient("http://127.0.0.1:9")
    with pytest.raises(ValueError):
        await client.post("/settle", b"{}", {"X-Evil": "a\r\nInjected: yes"})
