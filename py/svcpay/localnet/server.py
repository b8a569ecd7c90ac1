"""The drop-in local validator: Solana JSON-RPC over HTTP, backed by LiteSVM.

    python -m svcpay.localnet.server --bpf-program ID PATH [--rpc-port N] [--bind-address A]

mirrors solana-test-validator's flags. Serves loopback only by default; `--rpc-port 0` picks
a free port. When ready it prints one line, `svcpay-localnet ready <url>`, to stdout.
"""

from __future__ import annotations

import argparse
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from solders.pubkey import Pubkey

from svcpay.localnet.methods import Methods, RpcError
from svcpay.localnet.node import Node

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
INTERNAL_ERROR = -32603
MAX_BODY = 8 * 1024 * 1024


def _error(req_id: Any, code: int, message: str, data: Any = None) -> dict[str, Any]:
    err: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        err["data"] = data
    return {"jsonrpc": "2.0", "error": err, "id": req_id}


def handle(methods: Methods, request: Any) -> dict[str, Any]:
    """One JSON-RPC request object to its response object."""
    if not isinstance(request, dict) or request.get("jsonrpc") != "2.0" or "method" not in request:
        return _error(
            request.get("id") if isinstance(request, dict) else None,
            INVALID_REQUEST,
            "Invalid request",
        )
    req_id = request.get("id")
    params = request.get("params", [])
    if not isinstance(params, list):
        return _error(req_id, INVALID_REQUEST, "Invalid request: params must be an array")
    try:
        result = methods.call(str(request["method"]), params)
    except RpcError as e:
        return _error(req_id, e.code, e.message, e.data)
    except Exception as e:  # a bug here must not kill the node; report it to the client
        return _error(req_id, INTERNAL_ERROR, f"Internal error: {type(e).__name__}: {e}")
    return {"jsonrpc": "2.0", "result": result, "id": req_id}


class _Handler(BaseHTTPRequestHandler):
    methods: Methods
    protocol_version = "HTTP/1.1"
    # One write per response, sent at once: headers and body in separate small segments
    # would wait on delayed ACKs (about 40 ms per request on keep-alive connections).
    wbufsize = 64 * 1024
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet by default
        pass

    def _reply(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        if self.path == "/health":
            self._reply(200, "ok")
        else:
            self._reply(405, _error(None, INVALID_REQUEST, "use POST with a JSON-RPC body"))

    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            self._reply(413, _error(None, INVALID_REQUEST, "request too large"))
            return
        try:
            body = json.loads(self.rfile.read(length))
        except (ValueError, UnicodeDecodeError):
            self._reply(200, _error(None, PARSE_ERROR, "Parse error"))
            return
        if isinstance(body, list):
            if not body:
                self._reply(200, _error(None, INVALID_REQUEST, "Invalid request: empty batch"))
                return
            self._reply(200, [handle(self.methods, r) for r in body])
        else:
            self._reply(200, handle(self.methods, body))


def serve(programs: list[tuple[Pubkey, Path]], host: str, port: int) -> None:
    methods = Methods(Node(programs))
    handler = type("Handler", (_Handler,), {"methods": methods})
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    print(f"svcpay-localnet ready http://{host}:{server.server_port}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


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
    parser.add_argument("--rpc-port", type=int, default=8899, help="JSON-RPC port (0: any free)")
    parser.add_argument("--bind-address", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--ledger", help="accepted for compatibility; state is in memory")
    parser.add_argument("--reset", action="store_true", help="accepted for compatibility")
    parser.add_argument("--quiet", action="store_true", help="accepted for compatibility")
    args = parser.parse_args(argv)
    programs = []
    for address, path in args.bpf_program:
        try:
            programs.append((Pubkey.from_string(address), Path(path)))
        except ValueError:
            parser.error(f"--bpf-program: {address!r} is not a base58 public key")
        if not Path(path).is_file():
            parser.error(f"--bpf-program: {path} does not exist (build it: scripts/build-program)")
    try:
        serve(programs, args.bind_address, args.rpc_port)
    except OSError as e:
        print(
            f"svcpay localnet: cannot listen on {args.bind_address}:{args.rpc_port}: {e}",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
