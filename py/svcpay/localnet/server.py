"""The drop-in local validator: Solana JSON-RPC over HTTP, backed by LiteSVM.

    python -m svcpay.localnet.server --bpf-program ID PATH [--account ADDRESS FILE]
                                     [--rpc-port N] [--bind-address A]

mirrors solana-test-validator's flags. Serves loopback only by default; `--rpc-port 0` picks
a free port. When ready it prints one line, `svcpay-localnet ready <url>`, to stdout.

HTTP and JSON-RPC framing as agave's server (jsonrpc-http-server, jsonrpc-core) does it: a POST
needs `Content-Type: application/json` (else 415, in plain text), other methods get 405,
`/health` answers "ok", bodies over 50 kB get 413; a body that is not JSON, or not a call or
batch of calls, is -32700, a call of the wrong shape -32600; notifications get no answer.
"""

from __future__ import annotations

import os
import signal

if __name__ == "__main__":
    # `svcpay localnet` execs this: a Ctrl-C or SIGTERM while it starts (the imports below,
    # loading the programs) ends it at once, 128 + the signal, without a traceback; nothing
    # needs cleaning up yet. svcpay.stopping takes over once it serves (docs/adr/0035).
    def _starting(signum: int, frame: object) -> None:
        os._exit(128 + signum)

    signal.signal(signal.SIGINT, _starting)
    signal.signal(signal.SIGTERM, _starting)

import argparse
import errno
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from solders.account import Account
from solders.pubkey import Pubkey

from svcpay import stopping
from svcpay.localnet.accounts import AccountFileError, read_account_file
from svcpay.localnet.methods import Methods, RpcError
from svcpay.localnet.node import Node, ProgramLoadError

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
INTERNAL_ERROR = -32603
MAX_BODY = 50 * 1024  # agave's MAX_REQUEST_BODY_SIZE
U64_MAX = 2**64 - 1
# What jsonrpc-http-server (agave's RPC server) answers outside JSON-RPC: (status, text body)
WRONG_CONTENT_TYPE = (
    415,
    "Supplied content type is not allowed. Content-Type: application/json is required\n",
)
WRONG_METHOD = (405, "Used HTTP Method is not allowed. POST or OPTIONS is required\n")
TOO_LARGE = (413, "request body size exceeds allowed maximum")
REASONS = {413: "Payload Too Large"}  # hyper's wording where http.server's differs
JSON_TYPES = (
    "application/json",
    "application/json; charset=utf-8",
    "application/json;charset=utf-8",
)
_FIELDS = {"jsonrpc", "method", "params", "id"}


class ParseError(ValueError):
    """The body is not a JSON-RPC request or batch (jsonrpc-core's -32700)."""


def _error(req_id: Any, code: int, message: str, data: Any = None) -> dict[str, Any]:
    err: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        err["data"] = data
    return {"jsonrpc": "2.0", "error": err, "id": req_id}


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        raise ParseError("duplicate field")
    return obj


def _valid_id(value: Any) -> bool:
    """A JSON-RPC id as jsonrpc-core takes it: null, a string, or an unsigned 64-bit number."""
    if value is None or isinstance(value, str):
        return True
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= U64_MAX


def parse(body: bytes) -> list[dict[str, Any]] | dict[str, Any]:
    """The request (an object) or batch (a list of objects), or ParseError where jsonrpc-core
    cannot read one: not JSON, duplicate fields, an element that is not an object, or an id
    that is no id (a negative or fractional number, a boolean...)."""
    try:
        body_json = json.loads(body, object_pairs_hook=_no_duplicates)
    except (ValueError, UnicodeDecodeError) as e:
        raise ParseError(str(e)) from e
    calls = body_json if isinstance(body_json, list) else [body_json]
    for call in calls:
        if not isinstance(call, dict) or ("id" in call and not _valid_id(call["id"])):
            raise ParseError("not a call")
    return body_json  # type: ignore[no-any-return]


def handle(methods: Methods, request: dict[str, Any]) -> dict[str, Any] | None:
    """One JSON-RPC call to its response object, or None for a notification (no id), as
    jsonrpc-core answers: a call of the wrong shape is "Invalid request", one without
    `"jsonrpc": "2.0"` gets "Unsupported JSON-RPC protocol version" (and no `jsonrpc` key)."""
    params = request.get("params")
    well_formed = (
        set(request) <= _FIELDS
        and isinstance(request.get("method"), str)
        and (params is None or isinstance(params, list | dict))
        and request.get("jsonrpc") in (None, "2.0")
    )
    if not well_formed:
        return _error(request.get("id"), INVALID_REQUEST, "Invalid request")
    if "id" not in request:
        return None
    req_id = request["id"]
    if request.get("jsonrpc") is None:
        error = {"code": INVALID_REQUEST, "message": "Unsupported JSON-RPC protocol version"}
        return {"error": error, "id": req_id}
    try:
        result = methods.call(request["method"], params)
    except RpcError as e:
        return _error(req_id, e.code, e.message, e.data)
    except Exception as e:  # a bug here must not kill the node; report it to the client
        return _error(req_id, INTERNAL_ERROR, f"Internal error: {type(e).__name__}: {e}")
    return {"jsonrpc": "2.0", "result": result, "id": req_id}


def _json(reply: Any) -> str:
    """Compact JSON and a newline, as agave sends it."""
    return json.dumps(reply, separators=(",", ":")) + "\n"


def answer(methods: Methods, body: bytes) -> str:
    """The response body for a POSTed JSON-RPC body: empty when nothing needs an answer
    (notifications, an empty batch), else the JSON and a newline, as agave sends it."""
    try:
        request = parse(body)
    except ParseError:
        return _json(_error(None, PARSE_ERROR, "Parse error"))
    if isinstance(request, list):
        replies = [r for r in (handle(methods, call) for call in request) if r is not None]
        return _json(replies) if replies else ""
    reply = handle(methods, request)
    return "" if reply is None else _json(reply)


class _Server(ThreadingHTTPServer):
    """A thread per connection, and a listen queue of a real server's depth: socketserver's
    is 5, so a burst of clients (a deploy's writes, a fleet's facilitators) overflowed it and
    the kernel dropped their connections (measured: 200 at once, 29 to 85 of them reset; none
    with 1,024). agave's RPC listens with 1,024."""

    daemon_threads = True
    request_queue_size = 1024


class _Handler(BaseHTTPRequestHandler):
    methods: Methods
    protocol_version = "HTTP/1.1"
    # One write per response, sent at once: headers and body in separate small segments
    # would wait on delayed ACKs (about 40 ms per request on keep-alive connections).
    wbufsize = 64 * 1024
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet by default
        pass

    def _reply(
        self,
        status: int,
        body: str,
        content_type: str | None,
        headers: dict[str, str] | None = None,
    ) -> None:
        data = body.encode()
        self.send_response(status, REASONS.get(status))
        if content_type is not None:
            self.send_header("Content-Type", content_type)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _text(self, reply: tuple[int, str]) -> None:
        self._reply(reply[0], reply[1], "text/plain; charset=utf-8")

    def _body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _health(self) -> bool:
        """GET or POST /health: "ok", as text without a content type, as agave answers."""
        if self.path.split("?")[0] != "/health":
            return False
        self._body()
        self._reply(200, "ok", None)
        return True

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        if not self._health():
            self._text(WRONG_METHOD)

    def do_OPTIONS(self) -> None:  # noqa: N802
        asked = self.headers.get("Access-Control-Request-Headers")
        headers = {"Allow": "OPTIONS, POST", "Accept": "application/json", **self._cors()}
        if asked and "Access-Control-Allow-Origin" in headers:
            listed = ", ".join(h.strip() for h in asked.split(",") if h.strip())
            headers["Access-Control-Allow-Headers"] = listed[:1000]
        self._reply(200, "", "application/json; charset=utf-8", headers)

    def _cors(self) -> dict[str, str]:
        """CORS as agave's RPC service answers (jsonrpc-http-server, any origin): a request
        with an `Origin` gets it back, so a page on another origin (the paywall's wallet
        script) can read mints and blockhashes; one without gets no CORS headers."""
        origin = self.headers.get("Origin")
        if not origin or any(c in origin for c in "\r\n"):
            return {}
        return {
            "Vary": "origin",
            "Access-Control-Allow-Methods": "OPTIONS, POST",
            "Access-Control-Allow-Origin": origin,
            "Access-Control-Max-Age": "86400",
        }

    def _not_allowed(self) -> None:
        self._body()
        self._text(WRONG_METHOD)

    do_PUT = do_DELETE = do_PATCH = do_HEAD = _not_allowed  # noqa: N815

    def do_POST(self) -> None:  # noqa: N802
        if self._health():
            return
        length = int(self.headers.get("Content-Length") or 0)
        content_type = (self.headers.get("Content-Type") or "").strip().lower()
        if content_type not in JSON_TYPES:
            self.rfile.read(length)
            self._text(WRONG_CONTENT_TYPE)
            return
        if length > MAX_BODY:
            self.close_connection = True  # the body is left unread
            self._text(TOO_LARGE)
            return
        body = self.rfile.read(length)
        try:
            body.decode()
        except UnicodeDecodeError as e:
            self._text((400, f"utf-8 encoding error at byte {e.start} in request body"))
            return
        self._reply(
            200, answer(self.methods, body), "application/json; charset=utf-8", self._cors()
        )


def serve(
    programs: list[tuple[Pubkey, Path]],
    host: str,
    port: int,
    *,
    as_json: bool = False,
    accounts: list[tuple[Pubkey, Account]] | None = None,
) -> None:
    methods = Methods(Node(programs, accounts or []))
    handler = type("Handler", (_Handler,), {"methods": methods})
    server = _Server((host, port), handler)
    url = f"http://{host}:{server.server_port}"
    # The server runs in a thread; this one waits for Ctrl-C or SIGTERM (svcpay.stopping),
    # then shuts it down: a signal handler never raises into a request. The ready line comes
    # once that handling is in place: a Ctrl-C after it stops the server and exits 0.
    with stopping.handling():
        thread = threading.Thread(target=server.serve_forever, name="rpc", daemon=True)
        thread.start()
        if as_json:
            ready = json.dumps({"ready": True, "url": url, "rpcPort": server.server_port})
        else:
            ready = f"svcpay-localnet ready {url}"
        try:
            print(ready, flush=True)
            while thread.is_alive():
                stopping.sleep(0.2)
        except stopping.Interrupted:
            server.shutdown()
        finally:
            server.server_close()


def rpc_port(text: str) -> int:
    """A TCP port, 0 to 65535 (argparse names the flag and the value when it is not)."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= port <= 65_535:
        raise argparse.ArgumentTypeError(f"{port} is not a port: use 0 to 65535")
    return port


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="svcpay localnet", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--bpf-program",
        nargs=2,
        action="append",
        default=[],
        metavar=("ADDRESS", "SBF_PROGRAM.SO"),
        help="add a program at ADDRESS from the ELF file (repeatable)",
    )
    parser.add_argument(
        "--account",
        nargs=2,
        action="append",
        default=[],
        metavar=("ADDRESS", "FILE"),
        help="load an account at ADDRESS from the JSON FILE (`solana account --output json`;"
        " ADDRESS '-' takes the file's pubkey) (repeatable)",
    )
    parser.add_argument(
        "--rpc-port", type=rpc_port, default=8899, help="JSON-RPC port (0: any free)"
    )
    parser.add_argument("--bind-address", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--ledger", help="accepted for compatibility; state is in memory")
    parser.add_argument("--reset", action="store_true", help="accepted for compatibility")
    parser.add_argument("--quiet", action="store_true", help="accepted for compatibility")
    parser.add_argument(
        "--json", action="store_true", help='print the ready line as {"ready", "url", "rpcPort"}'
    )
    args = parser.parse_args(argv)
    programs = []
    for address, path in args.bpf_program:
        try:
            programs.append((Pubkey.from_string(address), Path(path)))
        except ValueError:
            parser.error(f"--bpf-program: {address!r} is not a base58 public key")
        if not Path(path).is_file():
            parser.error(f"--bpf-program: {path} does not exist (build it: scripts/build-program)")
    accounts = []
    for address, path in args.account:
        try:
            key, account = read_account_file(Path(path))
            if address != "-":
                key = Pubkey.from_string(address)
        except AccountFileError as e:
            parser.error(f"--account: {e}")
        except ValueError:
            parser.error(f"--account: {address!r} is not a base58 public key")
        if key == Pubkey.default():
            parser.error(f"--account: {path} names no pubkey: give the address")
        accounts.append((key, account))
    try:
        serve(programs, args.bind_address, args.rpc_port, as_json=args.json, accounts=accounts)
    except ProgramLoadError as e:
        parser.error(f"--bpf-program: {e}")
    except OSError as e:
        where = f"{args.bind_address}:{args.rpc_port}"
        if e.errno == errno.EADDRINUSE:
            message = (
                f"port {args.rpc_port} on {args.bind_address} is already in use (another "
                f"validator?): stop it, or pass --rpc-port N (0 picks a free port)"
            )
        else:
            message = f"cannot listen on {where}: {e.strerror or e}: check --bind-address"
        print(f"svcpay localnet: {message}", file=sys.stderr)
        if args.json:
            print(json.dumps({"error": "PortUnavailable", "message": message, "exitCode": 1}))
        return 1
    return 0


if __name__ == "__main__":
    code = main()
    # Served and shut down: a second Ctrl-C from here on must not meet the start's handler
    # (back once svcpay.stopping's handling ended) and turn exit 0 into 130.
    stopping.finished()
    sys.exit(code)
