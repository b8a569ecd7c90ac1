"""A provider's webhook endpoint, as a receiver would write one: a small HTTP server on
loopback that checks every delivery's `Svcpay-Signature` with `verify_webhook` and keeps
each event once (deliveries are at least once: dedupe by event id)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from svcpay import stopping
from svcpay.webhooks import SIGNATURE_HEADER, WebhookSignatureError, verify_webhook

MAX_BODY = 1 << 20


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # socketserver's 5 drops a fleet's simultaneous deliveries


class WebhookReceiver:
    def __init__(self, path: str = "/webhooks") -> None:
        self.path = path
        self.secret: str | None = None  # set once the endpoint is registered
        self.events: dict[str, dict[str, Any]] = {}  # id -> event, in arrival order
        self.deliveries = self.duplicates = self.refused = 0
        self._seen = 0  # events already handed out by `new_events`
        self._changed = threading.Condition()
        self._server = _Server(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="webhook-receiver", daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}{self.path}"

    def start(self) -> WebhookReceiver:
        self._thread.start()
        return self

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def receive(self, path: str, body: bytes, signature: str | None) -> int:
        """The status to answer a delivery with (200 accepted, 400 refused)."""
        if path != self.path or self.secret is None:
            return 404
        try:
            event = verify_webhook(self.secret, body, signature)
        except WebhookSignatureError:
            with self._changed:
                self.refused += 1
            return 400
        with self._changed:
            self.deliveries += 1
            if event["id"] in self.events:
                self.duplicates += 1
            else:
                self.events[event["id"]] = event
            self._changed.notify_all()
        return 200

    def snapshot(self) -> list[dict[str, Any]]:
        """Every distinct event so far, in arrival order."""
        with self._changed:
            return list(self.events.values())

    def types(self) -> list[str]:
        with self._changed:
            return [e["type"] for e in self.events.values()]

    def wait_for(self, types: Iterable[str], timeout: float) -> bool:
        """Whether an event of each of `types` arrived within `timeout` seconds."""
        wanted = set(types)
        deadline = time.monotonic() + timeout
        with self._changed:
            while not wanted <= {e["type"] for e in self.events.values()}:
                left = deadline - time.monotonic()
                if left <= 0 or stopping.requested():  # a stop ends the wait (it runs in a
                    return False  # thread, which asyncio.run would wait for)
                self._changed.wait(min(left, 0.1))
        return True

    def new_events(self) -> list[dict[str, Any]]:
        """The events that arrived since the last call."""
        with self._changed:
            found = list(self.events.values())[self._seen :]
            self._seen += len(found)
        return found

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(min(length, MAX_BODY))
                status = receiver.receive(self.path, body, self.headers.get(SIGNATURE_HEADER))
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass  # the demo prints what it received

        return Handler
