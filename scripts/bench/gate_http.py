"""Requests per second through the gate over HTTP: uvicorn (one worker, pinned to core 0)
and wrk (pinned to core 1) on loopback, for the cases of gate_rps.py. Each paid request
carries a distinct pre-signed svcpay proof, x402 payment or session voucher (the x402
facilitator answers at once: the gate's own cost). Prints numbers; asserts nothing."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from solders.keypair import Keypair
from solders.pubkey import Pubkey
from spl.token.instructions import get_associated_token_address

from scripts.bench.gate_rps import (
    InstantFacilitator,
    bare_app,
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

ROOT = Path(__file__).resolve().parents[2]
SECONDS = 4
PROOFS = 40_000
X402_PAYMENTS = 40_000  # more than 4 s of x402 requests use: each is distinct


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wrk(url: str, script: Path | None) -> tuple[float, str]:
    cmd = ["taskset", "-c", "1", "wrk", "-t1", "-c16", f"-d{SECONDS}s", url]
    if script:
        cmd[4:4] = ["-s", str(script)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return rps, f"{non2xx.group(1)} non-2xx" if non2xx else "all 2xx"


def lua_script(path: Path, header: str, values: list[str]) -> None:
    """A wrk script sending `header` with the next of `values` on each request."""
    table = ",".join(json.dumps(v) for v in values)  # base58/base64: valid Lua strings too
    lookup = f'{{["{header}"] = values[(i % #values) + 1]}}'
    path.write_text(
        f"values = {{{table}}}\ni = 0\n"
        f'request = function()\n  i = i + 1\n  return wrk.format("GET", nil, {lookup})\nend\n'
    )


def main() -> None:
    facilitator, secret = Keypair(), "bench-memo-secret-0123456789"
    owner, mint = Pubkey.new_unique(), Pubkey.new_unique()
    pay_to, token = str(get_associated_token_address(owner, mint)), str(mint)
    plan, sub, fee_payer = (str(Pubkey.new_unique()) for _ in range(3))
    memos = Memos(secret.encode(), ttl_secs=3600)
    memo = memos.issue(MemoTerms("GET /paid", "500000", pay_to, token))
    now = int(time.time())
    proofs = [
        PaymentProof(
            network="solana-mainnet", transaction=str(Keypair().sign_message(str(i).encode())),
            payer=str(Pubkey.new_unique()), pay_to=pay_to, token=token, amount="500000", memo=memo,
            issued_at=now, expires_at=now + 3600, facilitator=str(facilitator.pubkey()),
        ).signed_by(facilitator).to_header()
        for i in range(PROOFS)
    ]  # fmt: skip
    # x402 payments as an x402 client builds them, for the server's terms (same memo secret)
    terms = Terms(pay_to=pay_to, token=token, owner=str(owner), fee_payer=fee_payer)
    twin = payment_gate(
        bare_app, pricing={"/paid": [OneTime(500_000)]}, terms=terms, memos=memos,
        trusted_facilitators=set(), replay=MemoryReplayStore(),
        x402_facilitator=InstantFacilitator(),
    )  # fmt: skip
    payments = [h.decode() for h in x402_headers(twin, terms, memos, X402_PAYMENTS)]
    # Vouchers for the server's sessions (the same keys and challenge secret there).
    vouchers = [h.decode() for h in session_headers(session_scheme(terms, session_keys()), PROOFS)]
    port = free_port()
    bench = {"SECRET": secret, "PAY_TO": pay_to, "TOKEN": token, "PLAN": plan, "SUB": sub}
    bench |= {"FACILITATOR": str(facilitator.pubkey()), "OWNER": str(owner)}
    bench["FEE_PAYER"] = fee_payer
    env = dict(os.environ, PYTHONPATH=str(ROOT), **{f"BENCH_{k}": v for k, v in bench.items()})
    server = subprocess.Popen(
        ["taskset", "-c", "0", sys.executable, "-m", "uvicorn", "scripts.bench.gate_app:app",
         "--port", str(port), "--log-level", "warning", "--no-access-log"],
        cwd=ROOT, env=env,
    )  # fmt: skip
    try:
        time.sleep(2)
        base = f"http://127.0.0.1:{port}"
        with tempfile.TemporaryDirectory() as tmp:
            paid, subs = Path(tmp) / "paid.lua", Path(tmp) / "sub.lua"
            x402, voucher = Path(tmp) / "x402.lua", Path(tmp) / "session.lua"
            lua_script(voucher, "Authorization", vouchers)
            lua_script(paid, "X-PAYMENT", proofs)
            lua_script(x402, "PAYMENT-SIGNATURE", payments)
            lua_script(subs, "X-Svc-Sub", [sub])
            results = {
                "bare endpoint": wrk(f"{base}/free", None),
                "402 path (fresh terms)": wrk(f"{base}/paid", None),
                "paid, verified offline": wrk(f"{base}/paid", paid),
                "x402 paid, instant fac.": wrk(f"{base}/paid", x402),
                "bare + the same headers": wrk(f"{base}/free", paid),
                "subscription, warm cache": wrk(f"{base}/sub", subs),
                "session voucher, warm": wrk(f"{base}/session", voucher),
            }
    finally:
        server.terminate()
        server.wait(timeout=10)
    print(f"uvicorn 1 worker on core 0, wrk -c16 on core 1, {SECONDS}s each")
    for name, (rps, note) in results.items():
        print(f"{name:<26} {rps:>9,.0f} req/s  ({note})")
    ratio = results["paid, verified offline"][0] / results["bare endpoint"][0]
    print(f"paid / bare: {ratio:.2f} (goal: at least 0.50)")
    x402_ratio = results["x402 paid, instant fac."][0] / results["paid, verified offline"][0]
    print(f"x402 / svcpay proof: {x402_ratio:.2f}")
    session = results["session voucher, warm"][0] / results["paid, verified offline"][0]
    print(f"session voucher / svcpay proof: {session:.2f} (goal: at least 1.00)")


if __name__ == "__main__":
    main()
