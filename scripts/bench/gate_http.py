"""Requests per second through the gate over HTTP, beside the x402 SDK's own middleware, in
one interleaved run (issue 27): uvicorn (one worker, uvloop and httptools) pinned to core 0,
wrk (one thread, 32 connections) and an HTTP x402 facilitator that answers at once
(instant_facilitator.py) sharing core 1. The same FastAPI handler and the same terms behind
every gate. Each svcpay paid request carries a distinct pre-signed svcpay proof, x402
payment or session voucher; the servers restart each round, so a payment is never replayed.
The SDK's server is tests/interop/x402_sdk/sdk_server.py in the SDK's own environment
(scripts/x402-sdk), paid with the SDK's payload shape for its own terms. Both servers
gc.freeze() their loaded heap before serving (docs/adr/0027; BENCH_GC=collect skips it for
svcpay's). Prints the median of the rounds and each round's ratios; asserts nothing.

    python -m scripts.bench.gate_http [--seconds 10] [--rounds 3] [--no-sdk]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from spl.token.instructions import get_associated_token_address

from scripts.bench.gate_rps import (
    InstantCharges,
    InstantFacilitator,
    bare_app,
    mpp_headers,
    session_headers,
    session_keys,
    session_scheme,
    x402_headers,
)
from svcpay.gate import OneTime, payment_gate
from svcpay.gate.pricing import Terms
from svcpay.protocol.memo import Memos, MemoTerms
from svcpay.protocol.proof import PaymentProof
from svcpay.protocol.replay import MemoryReplayStore
from svcpay.schemes.x402_exact.wire import CAIP2, decode_json, encode_header

ROOT = Path(__file__).resolve().parents[2]
CONNECTIONS = 32
PER_SECOND = 6_000  # distinct payments per second of a run: more than any path serves
NETWORK = CAIP2["solana-mainnet"]
UVICORN = ["--loop", "uvloop", "--http", "httptools", "--log-level", "warning", "--no-access-log"]


@dataclass
class Result:
    rps: float
    p50_ms: float
    p99_ms: float
    non2xx: int


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_ready(url: str, process: subprocess.Popen[bytes], name: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"bench-gate: {name} exited with {process.returncode}")
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.HTTPError:
            time.sleep(0.1)
    raise SystemExit(f"bench-gate: {name} did not start")


@contextmanager
def server(cmd: list[str], url: str, name: str, env: dict[str, str]) -> Iterator[str]:
    process = subprocess.Popen(["taskset", "-c", cmd[0], *cmd[1:]], cwd=ROOT, env=env)
    try:
        wait_ready(url + "/free" if name != "facilitator" else url + "/supported", process, name)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()


def millis(text: str) -> float:
    value, unit = re.fullmatch(r"([\d.]+)(us|ms|s)", text).groups()  # type: ignore[union-attr]
    return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]


def wrk(url: str, script: Path | None, seconds: int) -> Result:
    cmd = ["taskset", "-c", "1", "wrk", "-t1", f"-c{CONNECTIONS}", f"-d{seconds}s", "--latency"]
    if script:
        cmd += ["-s", str(script)]
    out = subprocess.run([*cmd, url], capture_output=True, text=True, check=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    p50 = millis(re.search(r"\s50%\s+(\S+)", out).group(1))  # type: ignore[union-attr]
    p99 = millis(re.search(r"\s99%\s+(\S+)", out).group(1))  # type: ignore[union-attr]
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return Result(rps, p50, p99, int(non2xx.group(1)) if non2xx else 0)


def lua_script(path: Path, header: str, values: list[str]) -> Path:
    """A wrk script sending `header` with the next of `values` on each request."""
    table = ",".join(json.dumps(v) for v in values)  # base58/base64: valid Lua strings too
    lookup = f'{{["{header}"] = values[(i % #values) + 1]}}'
    path.write_text(
        f"values = {{{table}}}\ni = 0\n"
        f'request = function()\n  i = i + 1\n  return wrk.format("GET", nil, {lookup})\nend\n'
    )
    return path


def sdk_python(name: str = "x402-sdk") -> str | None:
    """The python of a foreign SDK's environment (scripts/NAME), None when it cannot be made."""
    done = subprocess.run([f"scripts/{name}"], cwd=ROOT, capture_output=True, text=True)
    python = done.stdout.strip()
    return python if done.returncode == 0 and Path(python).is_file() else None


def sdk_payments(url: str, transactions: list[str]) -> list[str]:
    """Payloads for the SDK server's own terms (its facilitator answers at once, so only
    their shape matters to it), each with a different real-sized transaction."""
    required = decode_json(httpx.get(url + "/paid").headers["payment-required"].encode())
    accepted = required["accepts"][0]
    return [
        encode_header(
            {
                "x402Version": 2,
                "resource": required["resource"],
                "accepted": accepted,
                "payload": {"transaction": tx},
            }
        )
        for tx in transactions
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-sdk", action="store_true", help="skip the x402 SDK's middleware")
    parser.add_argument("--no-pay-kit", action="store_true", help="skip pay-kit's gate")
    parser.add_argument("--only", help="run only the paths whose name contains this")
    args = parser.parse_args()
    n = PER_SECOND * args.seconds

    facilitator, secret = Keypair(), "bench-memo-secret-0123456789"
    owner, mint = Pubkey.new_unique(), Pubkey.new_unique()
    pay_to, token = str(get_associated_token_address(owner, mint)), str(mint)
    plan, sub, fee_payer = (str(Pubkey.new_unique()) for _ in range(3))
    memos = Memos(secret.encode(), ttl_secs=3600)
    memo = memos.issue(MemoTerms("GET /paid", "500000", pay_to, token))
    print(f"bench-gate: signing {n:,} payments of each kind ...", file=sys.stderr)
    now = int(time.time())
    proofs = [
        PaymentProof(
            network="solana-mainnet", transaction=str(Keypair().sign_message(str(i).encode())),
            payer=str(Pubkey.new_unique()), pay_to=pay_to, token=token, amount="500000", memo=memo,
            issued_at=now, expires_at=now + 3600, facilitator=str(facilitator.pubkey()),
        ).signed_by(facilitator).to_header()
        for i in range(n)
    ]  # fmt: skip
    terms = Terms(pay_to=pay_to, token=token, owner=str(owner), fee_payer=fee_payer)
    twin = payment_gate(
        bare_app, pricing={"/paid": [OneTime(500_000)]}, terms=terms, memos=memos,
        trusted_facilitators=set(), replay=MemoryReplayStore(),
        x402_facilitator=InstantFacilitator(), mpp_facilitator=InstantCharges(),
    )  # fmt: skip
    payments = [h.decode() for h in x402_headers(twin, terms, memos, n)]
    charges = [h.decode() for h in mpp_headers(twin, n)]
    vouchers = [h.decode() for h in session_headers(session_scheme(terms, session_keys()), n)]
    sdk = None if args.no_sdk else sdk_python()
    pay_kit = None if args.no_pay_kit else sdk_python("pay-kit")
    if sdk is None and not args.no_sdk:
        print("bench-gate: the x402 SDK's environment is missing (scripts/x402-sdk)")

    bench = {"SECRET": secret, "PAY_TO": pay_to, "TOKEN": token, "PLAN": plan, "SUB": sub}
    bench |= {"FACILITATOR": str(facilitator.pubkey()), "OWNER": str(owner)}
    bench |= {"FEE_PAYER": fee_payer, "NETWORK": NETWORK}
    env = dict(os.environ, PYTHONPATH=str(ROOT), **{f"BENCH_{k}": v for k, v in bench.items()})
    uvicorn = [sys.executable, "-m", "uvicorn", *UVICORN]
    rounds: list[dict[str, Result]] = []
    with tempfile.TemporaryDirectory() as tmp:
        scripts = {
            "proof": lua_script(Path(tmp) / "proof.lua", "X-PAYMENT", proofs),
            "x402": lua_script(Path(tmp) / "x402.lua", "PAYMENT-SIGNATURE", payments),
            "session": lua_script(Path(tmp) / "session.lua", "Authorization", vouchers),
            "mpp": lua_script(Path(tmp) / "mpp.lua", "Authorization", charges),
            "sub": lua_script(Path(tmp) / "sub.lua", "X-Svc-Sub", [sub]),
        }
        txs = [decode_json(p.encode())["payload"]["transaction"] for p in payments[:2000]]
        for number in range(1, args.rounds + 1):
            print(f"bench-gate: round {number} of {args.rounds} ...", file=sys.stderr)
            with ExitStack() as stack:
                port = {k: free_port() for k in ("fac", "bare", "svcpay", "http", "sdk", "pk")}
                url = {k: f"http://127.0.0.1:{p}" for k, p in port.items()}
                fac_app = "scripts.bench.instant_facilitator:app"
                stack.enter_context(
                    server(["1", *uvicorn, fac_app, "--port", str(port["fac"])], url["fac"],
                           "facilitator", env)
                )  # fmt: skip
                gate_app = "scripts.bench.gate_app:app"
                for name, extra in (
                    ("bare", {"BENCH_NO_GATE": "1"}),
                    ("svcpay", {}),
                    ("http", {"BENCH_FACILITATOR_URL": url["fac"]}),
                ):
                    cmd = ["0", *uvicorn, gate_app, "--port", str(port[name])]
                    stack.enter_context(server(cmd, url[name], name, env | extra))
                sdk_payloads: list[str] = []
                if sdk is not None:
                    program = str(ROOT / "tests/interop/x402_sdk/sdk_server.py")
                    cmd = ["0", sdk, program, "--port", str(port["sdk"]), "--facilitator",
                           url["fac"], "--pay-to", str(owner), "--mint", token,
                           "--network", NETWORK, "--price", "500000", "--gc-freeze"]  # fmt: skip
                    stack.enter_context(server(cmd, url["sdk"], "sdk", env))
                    sdk_payloads = sdk_payments(url["sdk"], txs)
                if pay_kit is not None:  # its 402 offers x402 and MPP, as svcpay's does
                    operator = Path(tmp) / "pay-kit-operator.json"
                    operator.write_text(json.dumps(list(bytes(Keypair()))))
                    program = str(ROOT / "tests/interop/pay_kit/pk_server.py")
                    cmd = ["0", pay_kit, program, "--port", str(port["pk"]), "--keypair",
                           str(operator), "--rpc", "http://127.0.0.1:9", "--pay-to", str(owner),
                           "--price-usd", "0.5", "--gc-freeze"]  # fmt: skip
                    secret = {"PAY_KIT_MPP_CHALLENGE_BINDING_SECRET": "bench-" + "0" * 32}
                    stack.enter_context(server(cmd, url["pk"], "pay-kit", env | secret))
                sdk_script = lua_script(Path(tmp) / "sdk.lua", "PAYMENT-SIGNATURE", sdk_payloads)
                cases: dict[str, tuple[str, Path | None]] = {
                    "no gate": (url["bare"] + "/free", None),
                    "svcpay gate, free route": (url["svcpay"] + "/free", None),
                }
                if sdk is not None:
                    cases["x402 SDK middleware, free route"] = (url["sdk"] + "/free", None)
                    cases["x402 SDK middleware, paid"] = (url["sdk"] + "/paid", sdk_script)
                if pay_kit is not None:
                    cases["pay-kit's gate, free route"] = (url["pk"] + "/free", None)
                    cases["pay-kit's gate, the 402"] = (url["pk"] + "/paid", None)
                cases |= {
                    "svcpay gate, x402 paid (HTTP fac.)": (url["http"] + "/paid", scripts["x402"]),
                    "svcpay gate, x402 paid (in-process)": (
                        url["svcpay"] + "/paid",
                        scripts["x402"],
                    ),
                    "svcpay gate, MPP charge paid (HTTP fac.)": (
                        url["http"] + "/paid",
                        scripts["mpp"],
                    ),
                    "svcpay gate, MPP charge paid (in-process)": (
                        url["svcpay"] + "/paid",
                        scripts["mpp"],
                    ),
                    "svcpay gate, svcpay proof paid": (url["svcpay"] + "/paid", scripts["proof"]),
                    "svcpay gate, session voucher": (
                        url["svcpay"] + "/session",
                        scripts["session"],
                    ),
                    "svcpay gate, subscription (warm)": (url["svcpay"] + "/sub", scripts["sub"]),
                    "svcpay gate, 402 (fresh terms)": (url["svcpay"] + "/paid", None),
                }
                if args.only:
                    cases = {k: v for k, v in cases.items() if args.only in k}
                rounds.append({name: wrk(u, s, args.seconds) for name, (u, s) in cases.items()})
            if not args.only:
                report_round(number, rounds[-1])
    report(rounds, args)


def ratios(r: dict[str, Result]) -> dict[str, float]:
    x402 = r["svcpay gate, x402 paid (HTTP fac.)"].rps
    out = {
        "x402 paid (HTTP fac.) / svcpay proof (goal >= 0.40)": x402
        / r["svcpay gate, svcpay proof paid"].rps,
        "MPP charge paid (HTTP fac.) / svcpay proof": r[
            "svcpay gate, MPP charge paid (HTTP fac.)"
        ].rps
        / r["svcpay gate, svcpay proof paid"].rps,
        "svcpay free route / no gate": r["svcpay gate, free route"].rps / r["no gate"].rps,
        "session voucher / svcpay proof": r["svcpay gate, session voucher"].rps
        / r["svcpay gate, svcpay proof paid"].rps,
    }
    if "x402 SDK middleware, paid" in r:
        out = {
            "x402 paid (HTTP fac.) / SDK middleware paid (goal >= 8)": x402
            / r["x402 SDK middleware, paid"].rps,
            **out,
        }
    return out


def report_round(number: int, r: dict[str, Result]) -> None:
    line = ", ".join(f"{k.split(' (goal')[0]} {v:.2f}" for k, v in ratios(r).items())
    print(f"round {number}: {line}", file=sys.stderr)


def table(rounds: list[dict[str, Result]], asks_payment: Callable[[str], bool] = bool) -> None:
    """Each path's median req/s, p50 and p99 over `rounds`, and its non-2xx answers in all
    (`asks_payment(name)`: every answer is meant to be a 402)."""
    width = max(len(name) for name in rounds[0]) + 2
    print(f"{'path':<{width}} {'req/s':>9} {'p50 ms':>8} {'p99 ms':>8}  non-2xx")
    for name in rounds[0]:
        runs = [r[name] for r in rounds]
        rps = statistics.median(x.rps for x in runs)
        p50 = statistics.median(x.p50_ms for x in runs)
        p99 = statistics.median(x.p99_ms for x in runs)
        bad = sum(x.non2xx for x in runs)
        note = "all 402 (expected)" if asks_payment(name) else f"{bad:,}"
        print(f"{name:<{width}} {rps:>9,.0f} {p50:>8.2f} {p99:>8.2f}  {note}")


def report(rounds: list[dict[str, Result]], args: argparse.Namespace) -> None:
    print(
        f"uvicorn 1 worker (uvloop, httptools) on core 0; wrk -t1 -c{CONNECTIONS} and the "
        f"instant HTTP facilitator on core 1; {args.rounds} x {args.seconds} s, median; "
        f"heap frozen: {os.environ.get('BENCH_GC') != 'collect'}"
    )
    table(rounds, lambda name: name.endswith("(fresh terms)") or name.endswith("the 402"))
    if args.only:
        return
    print("ratios, each from one round (median of the rounds; every round's):")
    per_round = [ratios(r) for r in rounds]
    for key in per_round[0]:
        values = [r[key] for r in per_round]
        each = " ".join(f"{v:.2f}" for v in values)
        print(f"  {key:<58} {statistics.median(values):>6.2f}  ({each})")
    x402_p99 = statistics.median(r["svcpay gate, x402 paid (HTTP fac.)"].p99_ms for r in rounds)
    print(f"  x402 paid (HTTP fac.) p99: {x402_p99:.1f} ms (goal < 30 ms at c={CONNECTIONS})")


if __name__ == "__main__":
    main()
