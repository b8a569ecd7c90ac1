"""The gate in front of a plain WSGI app (all Flask or Django is to a middleware), through
`PaymentGateWSGI`: the gate's core on the adapter's loop thread, the app in the caller's
thread. Every call goes through `wsgiref.validate`, so the adapter is checked against PEP
3333 as it is used; subscriptions are read from the local validator."""

from __future__ import annotations

import io
import json
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server
from wsgiref.types import StartResponse, WSGIApplication, WSGIEnvironment
from wsgiref.util import setup_testing_defaults
from wsgiref.validate import validator

import httpx
import pytest
from solders.keypair import Keypair
from solders.pubkey import Pubkey

from svcpay.gate import OneTime, PaymentGateWSGI, Subscription, payment_gate_wsgi
from svcpay.gate.asgi import Scope
from svcpay.gate.chain import ChainMeter, ChainSubscriptions
from svcpay.gate.core import Request
from svcpay.gate.pricing import PricingEntry, Terms
from svcpay.localnet.process import Localnet
from svcpay.program import pda
from svcpay.program.client import BillingClient
from svcpay.protocol.memo import Memos
from svcpay.protocol.models import PaymentRequired
from svcpay.protocol.replay import MemoryReplayStore
from tests.support.billing import DAY, USDC, Billing
from tests.support.proofs import proof_header

FACILITATOR = Keypair()
TERMS = Terms(pay_to=str(Pubkey.new_unique()), token=str(Pubkey.new_unique()))
MEMOS = Memos(b"wsgi-memo-secret-0123456789")
PRICE = 500_000
JSON = [("Content-Type", "application/json")]


class App:
    """A plain WSGI app. `?status=500` fails with a 500, `?raise=early` raises before its
    response starts, `?raise=late` after its first chunk, `?stream` answers in two chunks;
    otherwise 200 echoing the body.
    Records (path, thread) of every call."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []
        self.delay = 0.0
        self._lock = threading.Lock()

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        path, query = environ["PATH_INFO"], environ.get("QUERY_STRING", "")
        with self._lock:
            self.calls.append((path, threading.get_ident()))
        time.sleep(self.delay)
        if "raise=early" in query:
            raise RuntimeError("the handler failed")
        if "status=500" in query:
            start_response("500 Internal Server Error", JSON)
            return [b'{"error": "boom"}']
        if "raise=late" in query:

            def failing() -> Iterator[bytes]:
                yield b'{"partial": '
                raise RuntimeError("the handler failed mid-body")

            start_response("200 OK", JSON)
            return failing()
        if "stream" in query:
            start_response("200 OK", JSON)
            return iter([b'{"streamed": ', b"true}"])
        body = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
        data = json.dumps({"path": path, "body": body.decode()}).encode()
        start_response("200 OK", [*JSON, ("Content-Length", str(len(data)))])
        return [data]

    def ran(self, path: str) -> int:
        return sum(1 for p, _ in self.calls if p == path)


@dataclass
class Reply:
    status: str
    headers: list[tuple[str, str]]
    body: bytes

    @property
    def code(self) -> int:
        return int(self.status[:3])

    def json(self) -> Any:
        return json.loads(self.body)

    def header(self, name: str) -> str | None:
        return next((v for k, v in self.headers if k.lower() == name.lower()), None)


def call(
    app: WSGIApplication,
    target: str,
    *,
    method: str = "GET",
    headers: dict[str, str] | None = None,
    body: bytes = b"",
    **environ_extra: str,
) -> Reply:
    """Calls `app` as a WSGI server would (PEP 3333 checked by wsgiref.validate)."""
    environ: WSGIEnvironment = {}
    setup_testing_defaults(environ)
    path, _, query = target.partition("?")
    environ.update(REQUEST_METHOD=method, PATH_INFO=path, QUERY_STRING=query)
    environ.update(environ_extra)
    environ["wsgi.input"] = io.BytesIO(body)
    if body:
        environ["CONTENT_LENGTH"] = str(len(body))
    for name, value in (headers or {}).items():
        environ["HTTP_" + name.upper().replace("-", "_")] = value
    started: list[tuple[str, list[tuple[str, str]]]] = []
    chunks: list[bytes] = []

    def start_response(
        status: str, response_headers: list[tuple[str, str]], exc_info: Any = None
    ) -> Callable[[bytes], object]:
        assert not started or exc_info, "start_response twice"
        started[:] = [(status, response_headers)]
        return chunks.append

    result = validator(app)(environ, start_response)
    try:
        assert started, "start_response must be called before the response is returned"
        chunks.extend(result)
    finally:
        close = getattr(result, "close", None)
        if close is not None:
            close()
    return Reply(started[0][0], started[0][1], b"".join(chunks))


def proof(memo: str, amount: int = PRICE, signer: Keypair = FACILITATOR) -> str:
    return proof_header(TERMS, memo, amount, signer)


def one_time_gate(app: WSGIApplication, prefix: str = "/v1") -> PaymentGateWSGI:
    return payment_gate_wsgi(
        app,
        pricing={prefix: [OneTime(PRICE)]},
        terms=TERMS,
        memos=MEMOS,
        trusted_facilitators={str(FACILITATOR.pubkey())},
        replay=MemoryReplayStore(),
    )


def memo_for(gate: WSGIApplication, target: str = "/v1/data", method: str = "GET") -> str:
    """A fresh memo for `method target` (memos are bound to the method and path)."""
    reply = call(gate, target, method=method)
    assert reply.code == 402, reply
    memo = PaymentRequired.parse(reply.body).accepts[0].memo
    assert memo
    return memo


@pytest.fixture
def app() -> App:
    return App()


@pytest.fixture
def gate(app: App) -> Iterator[PaymentGateWSGI]:
    with one_time_gate(app) as g:
        yield g


# -- one-time payments ---------------------------------------------------------------------


def test_unpaid_requests_get_402_listing_the_option(gate: PaymentGateWSGI, app: App) -> None:
    reply = call(gate, "/v1/data")
    assert reply.status == "402 Payment Required"
    assert reply.header("content-type") == "application/json"
    assert reply.header("content-length") == str(len(reply.body))
    (option,) = PaymentRequired.parse(reply.body).accepts
    assert (option.amount, option.pay_to, option.token) == (str(PRICE), TERMS.pay_to, TERMS.token)
    assert option.memo
    huge = call(gate, "/v1/data", headers={"X-PAYMENT": "A" * 5000})
    assert huge.code == 400 and "exceeds" in huge.json()["message"]
    assert app.calls == []


def test_a_valid_proof_is_served_once_in_the_calling_thread(
    gate: PaymentGateWSGI, app: App
) -> None:
    header = proof(memo_for(gate))
    served = call(gate, "/v1/data", headers={"X-PAYMENT": header})
    assert (served.status, served.json()) == ("200 OK", {"path": "/v1/data", "body": ""})
    assert app.calls == [("/v1/data", threading.get_ident())]  # not on the loop's thread
    assert served.header("cache-control") == "private"  # a paid answer is the payer's

    again = call(gate, "/v1/data", headers={"X-PAYMENT": header})
    assert again.code == 402 and again.json()["error"] == "InvalidPaymentProof"
    assert "already used" in again.json()["message"]
    bad = call(gate, "/v1/data", headers={"X-PAYMENT": proof(memo_for(gate), signer=Keypair())})
    assert bad.code == 402 and "does not trust" in bad.json()["message"]
    assert app.ran("/v1/data") == 1


def test_an_exception_propagates_and_leaves_the_proof_unused(
    gate: PaymentGateWSGI, app: App
) -> None:
    header = proof(memo_for(gate))
    with pytest.raises(RuntimeError, match="the handler failed"):
        call(gate, "/v1/data?raise=early", headers={"X-PAYMENT": header})
    # No response came from the handler: like a 5xx, the payment is not used up.
    assert call(gate, "/v1/data", headers={"X-PAYMENT": header}).code == 200
    assert call(gate, "/v1/data", headers={"X-PAYMENT": header}).code == 402
    with pytest.raises(RuntimeError, match="mid-body"):
        call(gate, "/v1/data?raise=late", headers={"X-PAYMENT": proof(memo_for(gate))})


def test_wsgi_details_pass_through_the_gate(gate: PaymentGateWSGI) -> None:
    """write(), an iterable with close(), start_response(exc_info) before and after the
    headers went out, a lazy generator app, status lines and header case kept as given."""
    closed: list[str] = []

    class Body:
        def __init__(self, chunks: list[bytes]) -> None:
            self.chunks = chunks

        def __iter__(self) -> Iterator[bytes]:
            return iter(self.chunks)

        def close(self) -> None:
            closed.append("closed")

    def details(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        path, query = environ["PATH_INFO"], environ["QUERY_STRING"]
        if path == "/v1/page" and not query:
            headers = [("Content-Type", "text/plain"), ("X-Mixed-Case", "Yes")]
            write = start_response("201 Made It", [*headers, ("Content-Length", "11")])
            write(b"hello ")
            return Body([b"", b"world"])
        if path == "/v1/page":  # ?fail
            start_response("200 OK", [("Content-Type", "text/plain")])
            try:
                raise ValueError("the database is down")
            except ValueError:
                start_response(
                    "503 Service Unavailable", [("Content-Type", "text/plain")], sys.exc_info()
                )
            return [b"busy"]

        def late() -> Iterator[bytes]:
            start_response("200 OK", [("Content-Type", "text/plain")])
            yield b"part"
            try:
                raise ValueError("too late for an error page")
            except ValueError:
                start_response("500 Internal Server Error", [], sys.exc_info())
            yield b"never"

        return late()

    gate.app = details
    header = proof(memo_for(gate, "/v1/page"))
    failed = call(gate, "/v1/page?fail", headers={"X-PAYMENT": header})
    assert (failed.status, failed.body) == ("503 Service Unavailable", b"busy")
    written = call(gate, "/v1/page", headers={"X-PAYMENT": header})  # 503: proof still good
    assert (written.status, written.body) == ("201 Made It", b"hello world")
    assert written.headers == [
        ("Content-Type", "text/plain"),
        ("X-Mixed-Case", "Yes"),
        ("Content-Length", "11"),
        ("cache-control", "private"),  # added: a paid answer is its payer's
    ]
    assert closed == ["closed"]
    with pytest.raises(ValueError, match="too late"):
        call(gate, "/v1/late", headers={"X-PAYMENT": proof(memo_for(gate, "/v1/late"))})


def test_the_request_the_core_sees_and_the_body_the_app_reads(app: App) -> None:
    """The core's Request built from the environ (the path the client asked for, headers
    from HTTP_* and CONTENT_*), `serves` given an ASGI-shaped scope, and the body left
    unread for the app."""
    seen: list[Request] = []
    scopes: list[Scope] = []
    with one_time_gate(app, prefix="/api/v1") as gate:
        decide = gate.core.decide

        async def spy(request: Request, pricing: list[PricingEntry]) -> Any:
            seen.append(request)
            return await decide(request, pricing)

        def serves(scope: Scope) -> bool:
            scopes.append(scope)
            return True

        gate.core.decide = spy  # type: ignore[method-assign]
        gate.serves = serves
        payload = b"x" * 100_000 + b"-end"
        header = proof(memo_for(gate, "/api/v1/echo", "POST"))
        reply = call(
            gate,
            "/v1/echo?a=1&b=%20",
            method="POST",
            headers={"X-PAYMENT": header},
            body=payload,
            SCRIPT_NAME="/api",
            REMOTE_ADDR="10.0.0.7",
            CONTENT_TYPE="text/plain",
        )
    assert reply.code == 200 and reply.json() == {"path": "/v1/echo", "body": payload.decode()}
    request = seen[-1]
    assert (request.method, request.path, request.scheme) == ("POST", "/api/v1/echo", "http")
    assert request.url == "http://127.0.0.1/api/v1/echo"
    assert request.headers[b"content-type"] == b"text/plain"
    assert request.headers[b"content-length"] == str(len(payload)).encode()
    assert request.headers[b"x-payment"] == header.encode()
    scope = scopes[-1]
    assert (scope["type"], scope["method"], scope["path"], scope["root_path"]) == (
        "http",
        "POST",
        "/api/v1/echo",
        "/api",
    )
    assert scope["query_string"] == b"a=1&b=%20"
    assert dict(scope["headers"])[b"x-payment"] == header.encode()


def test_requests_the_app_does_not_serve_are_not_priced(app: App) -> None:
    """`serves` says no (a 404 or 405 of the app's): the app answers, unpaid, and a proof
    sent along is not taken."""
    gate = payment_gate_wsgi(
        app,
        pricing={"/v1": [OneTime(PRICE)]},
        terms=TERMS,
        memos=MEMOS,
        trusted_facilitators={str(FACILITATOR.pubkey())},
        replay=MemoryReplayStore(),
        serves=lambda scope: scope["method"] == "GET" and scope["path"] == "/v1/data",
    )
    with gate:
        header = proof(memo_for(gate))
        for method, target in (("POST", "/v1/data"), ("GET", "/v1/missing")):
            reply = call(gate, target, method=method, headers={"X-PAYMENT": header})
            assert reply.code == 200 and reply.json()["path"] == target
        assert call(gate, "/v1/data", headers={"X-PAYMENT": header}).code == 200
        assert call(gate, "/v1/data", headers={"X-PAYMENT": header}).code == 402


# -- subscriptions, against the local validator ------------------------------------------


@dataclass
class Subscribed:
    gate: PaymentGateWSGI
    sub_id: str
    client: BillingClient

    def used(self) -> int:
        allowance = self.gate.run(self.client.fetch_allowance(self.sub_id))
        assert allowance is not None
        return int(allowance.used)


@pytest.fixture
def subscribed(validator: Localnet, billing: Billing, app: App) -> Iterator[Subscribed]:
    """An ACTIVE subscription with a 1 USDC metered allowance, and a gate for its plan
    (ttl 0: every request reads the chain). The gate's RPC client lives on its loop."""
    plan = billing.plan(amount=10 * USDC)
    subscriber = billing.subscriber(plan, 50 * USDC)
    assert billing.subscribe(plan, subscriber, max_overage=USDC).ok
    sub_id = str(pda.subscription_address(plan.address, subscriber.pubkey))
    client = BillingClient.connect(validator.url)
    gate = payment_gate_wsgi(
        app,
        pricing={
            "/v1/resource": [Subscription(str(plan.address), 10 * USDC, 30 * DAY)],
            "/v1/process": [
                Subscription(str(plan.address), 10 * USDC, 30 * DAY, metered=USDC // 4)
            ],
        },
        terms=Terms(pay_to=str(plan.destination), token=str(plan.mint)),
        memos=MEMOS,
        trusted_facilitators=set(),
        replay=MemoryReplayStore(),
        subscriptions=ChainSubscriptions(client, ttl=0),
        meter=ChainMeter(client, plan.billing_authority),
    )
    with gate:
        yield Subscribed(gate, sub_id, client)
        gate.run(client.close())


def test_an_active_subscription_is_served(subscribed: Subscribed, app: App) -> None:
    gate, sub_id = subscribed.gate, subscribed.sub_id
    unpaid = call(gate, "/v1/resource")
    assert unpaid.code == 402 and unpaid.json()["accepts"][0]["svc"]["subscriptionScheme"]
    served = call(gate, "/v1/resource", headers={"X-Svc-Sub": sub_id})
    assert (served.code, served.json()["path"]) == (200, "/v1/resource")
    stranger = call(gate, "/v1/resource", headers={"X-Svc-Sub": str(Keypair().pubkey())})
    assert stranger.code == 402 and stranger.json()["error"] == "SubscriptionNotActive"
    assert call(gate, "/v1/resource", headers={"X-Svc-Sub": "not-an-id"}).code == 400
    assert app.ran("/v1/resource") == 1


def test_metered_usage_is_recorded_after_a_2xx_only(subscribed: Subscribed) -> None:
    gate, sub = subscribed.gate, {"X-Svc-Sub": subscribed.sub_id}
    assert call(gate, "/v1/process", method="POST", headers=sub, body=b"job").code == 200
    assert subscribed.used() == USDC // 4  # deducted on chain before the response ended

    assert call(gate, "/v1/process?status=500", method="POST", headers=sub).code == 500
    with pytest.raises(RuntimeError, match="the handler failed"):
        call(gate, "/v1/process?raise=early", method="POST", headers=sub)
    with pytest.raises(RuntimeError, match="mid-body"):
        call(gate, "/v1/process?raise=late", method="POST", headers=sub)
    assert subscribed.used() == USDC // 4

    assert call(gate, "/v1/process", method="POST", headers=sub).code == 200
    assert subscribed.used() == USDC // 2


def test_a_response_the_server_abandons_is_not_charged(subscribed: Subscribed) -> None:
    """The WSGI server closes the response after its first chunk (the client went away):
    the gate sees an incomplete response, and records no usage."""
    environ: WSGIEnvironment = {}
    setup_testing_defaults(environ)
    environ.update(
        REQUEST_METHOD="POST",
        PATH_INFO="/v1/process",
        QUERY_STRING="stream",
        HTTP_X_SVC_SUB=subscribed.sub_id,
    )
    started: list[str] = []

    def start_response(
        status: str, headers: list[tuple[str, str]], exc_info: Any = None
    ) -> Callable[[bytes], object]:
        started.append(status)
        return len

    result = validator(subscribed.gate)(environ, start_response)
    iterator = iter(result)
    assert (started, next(iterator)) == (["200 OK"], b'{"streamed": ')
    result.close()  # type: ignore[attr-defined]
    assert subscribed.used() == 0
    streamed = call(
        subscribed.gate,
        "/v1/process?stream",
        method="POST",
        headers={"X-Svc-Sub": subscribed.sub_id},
    )
    assert streamed.json() == {"streamed": True}
    assert subscribed.used() == USDC // 4


def test_concurrent_subscribers_are_served(subscribed: Subscribed) -> None:
    sub = {"X-Svc-Sub": subscribed.sub_id}
    with ThreadPoolExecutor(8) as pool:
        codes = list(
            pool.map(lambda _: call(subscribed.gate, "/v1/resource", headers=sub).code, range(8))
        )
    assert codes == [200] * 8


# -- threads, the loop, a real server ------------------------------------------------------


def test_eight_threads_at_once_get_the_right_answers(gate: PaymentGateWSGI, app: App) -> None:
    app.delay = 0.3  # every handler blocks; none may block the gate's loop or each other
    memo = memo_for(gate)
    shared = proof(memo)
    cases = [
        *[({"X-PAYMENT": proof(memo)}, 200) for _ in range(4)],
        ({}, 402),
        ({"X-PAYMENT": proof(memo, signer=Keypair())}, 402),
        ({"X-PAYMENT": proof(memo, amount=PRICE - 1)}, 402),
        ({"X-PAYMENT": "A" * 5000}, 400),
    ]
    barrier = threading.Barrier(8)

    def request(headers: dict[str, str]) -> tuple[int, int]:
        barrier.wait()
        return call(gate, "/v1/data", headers=headers).code, threading.get_ident()

    started = time.monotonic()
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(request, [h for h, _ in cases]))
    assert [code for code, _ in results] == [code for _, code in cases]
    assert time.monotonic() - started < 4 * app.delay  # the four handlers overlapped
    assert sorted(t for _, t in app.calls) == sorted(t for code, t in results if code == 200)

    barrier.reset()
    with ThreadPoolExecutor(8) as pool:  # one proof, eight racing copies: served once
        codes = list(pool.map(request, [{"X-PAYMENT": shared}] * 8))
    assert sorted(code for code, _ in codes) == [200] + [402] * 7


def test_paths_outside_the_gate_pass_straight_through(app: App) -> None:
    with one_time_gate(app) as gate:
        environ: WSGIEnvironment = {}
        setup_testing_defaults(environ)
        environ["PATH_INFO"] = "/free"
        returned: list[Iterable[bytes]] = []

        def app_spy(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
            returned.append(app(environ, start_response))
            return returned[-1]

        gate.app = app_spy
        result = gate(environ, lambda status, headers, exc_info=None: lambda data: None)
        assert result is returned[0]  # the app's own iterable, untouched
        assert call(gate, "/v1-not-this/x").code == 200
        assert not gate.running  # the loop was never started


def test_close_stops_the_loop_thread(app: App) -> None:
    gate = one_time_gate(app)
    assert not gate.running
    assert call(gate, "/v1/data").code == 402
    assert gate.running
    threads = [t for t in threading.enumerate() if t.name == "svcpay-gate-wsgi"]
    gate.close()
    assert not gate.running and not any(t.is_alive() for t in threads)
    gate.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        call(gate, "/v1/data")
    assert call(gate, "/free").code == 200

    with one_time_gate(app) as managed:
        assert call(managed, "/v1/data").code == 402
    assert not managed.running


def test_close_fails_requests_still_in_the_gate(app: App) -> None:
    gate = one_time_gate(app)
    header = proof(memo_for(gate))
    app.delay = 0.5
    errors: list[BaseException] = []

    def paid() -> None:
        try:
            call(gate, "/v1/data", headers={"X-PAYMENT": header})
        except BaseException as e:
            errors.append(e)

    request = threading.Thread(target=paid)
    request.start()
    while not app.calls:  # the handler is running, the gate waits for its response
        time.sleep(0.01)
    gate.close()
    request.join(timeout=5)
    assert not request.is_alive()
    assert [str(e) for e in errors] == ["the payment gate was closed"]


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


def test_a_real_wsgi_server(gate: PaymentGateWSGI, app: App) -> None:
    server = make_server("127.0.0.1", 0, gate, _ThreadingServer, _QuietHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{server.server_port}") as http:
            unpaid = http.post("/v1/data")
            assert unpaid.status_code == 402
            memo = PaymentRequired.parse(unpaid.content).accepts[0].memo
            assert memo
            header = proof(memo)
            served = http.post("/v1/data", headers={"X-PAYMENT": header}, content=b"payload")
            assert served.status_code == 200
            assert served.json() == {"path": "/v1/data", "body": "payload"}
            again = http.post("/v1/data", headers={"X-PAYMENT": header})
            assert again.status_code == 402 and again.json()["error"] == "InvalidPaymentProof"
            assert http.get("/free").json() == {"path": "/free", "body": ""}
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_a_generator_that_writes_has_its_head_sent_once(gate: PaymentGateWSGI) -> None:
    def writing(environ: WSGIEnvironment, start_response: StartResponse) -> Iterator[bytes]:
        write = start_response("200 OK", [("Content-Type", "text/plain")])
        write(b"written, ")
        yield b"then yielded"

    gate.app = writing
    reply = call(gate, "/v1/page", headers={"X-PAYMENT": proof(memo_for(gate, "/v1/page"))})
    assert (reply.status, reply.body) == ("200 OK", b"written, then yielded")
