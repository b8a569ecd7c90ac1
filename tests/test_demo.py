"""The demo runs to the end in the suite, so it cannot silently break: each step's key lines,
the chart, and nothing left running afterwards (also when it fails or is interrupted)."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping
from pathlib import Path

import pytest

from svcpay.demo import services
from svcpay.demo.walkthrough import Demo, run
from svcpay.demo.world import DAY, plan_times
from svcpay.localnet.process import DROP_IN, backend

PNG = b"\x89PNG\r\n\x1a\n"


def validator_running(url: str | None) -> bool:
    assert url is not None
    port = url.rsplit(":", 1)[1]
    found = subprocess.run(["pgrep", "-f", "--", f"--rpc-port {port}"], capture_output=True)
    return found.returncode == 0


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_the_demo_walks_through_every_flow_and_leaves_nothing_running(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    demo = Demo(tmp_path / "out")
    code = run(demo=demo)
    out, err = capsys.readouterr()
    assert code == 0, err

    # 1. one-time: 402 with terms, paid through the facilitator, 200 with the proof; replay refused
    one_time = out[out.index("── 1.") : out.index("── 2.")]
    assert "→ api  GET /v1/data\n   ← api  402 Payment Required" in one_time
    assert '"amount": "500000"' in one_time and '"memo": ' in one_time
    assert "→ facilitator  POST /authorize\n   ← facilitator  200 OK" in one_time
    assert re.search(r"GET /v1/data   \[X-PAYMENT: .*\]\n   ← api  200 OK", one_time)
    assert "decoded, the facilitator's proof:" in one_time and '"signature": "' in one_time
    assert "client                  50.00 USDC → 49.50 USDC" in one_time
    assert "(it needs none)" in one_time  # the client holds no SOL: the facilitator pays fees
    assert "402 InvalidPaymentProof: the proof was already used" in one_time

    # 1b. x402: the same 402's PAYMENT-REQUIRED, paid with PAYMENT-SIGNATURE, settled by the
    # gate through the facilitator (PAYMENT-RESPONSE); the replay refused
    x402 = out[out.index("── 1b.") : out.index("── 1c.")]
    assert (
        '"x402Version": 2' in x402
        and '"network": "solana:localnet"' in x402  # the demo's own validator (ADR 0038)
    )
    provider = re.search(r"provider (\w+), payTo \(its USDC account\)", out)
    assert provider and f'"payTo": "{provider[1]}"' in x402  # the wallet, not its account
    assert re.search(
        r"GET /v1/data   \[PAYMENT-SIGNATURE: .*\]\n   ← api  200 OK   \[PAYMENT-RESPONSE: ", x402
    )
    assert '"success": true' in x402 and '"paidWith": "x402"' in x402
    assert "client                  49.50 USDC → 49.00 USDC" in x402
    assert "402 InvalidPayment: this transaction was already used" in x402

    # 1c. MPP: the 402's charge challenges; PaymentAuth pays with Authorization: Payment,
    # answered with a Payment-Receipt; the replay is a 402 problem
    charge = out[out.index("── 1c.") : out.index("── 2.")]
    assert '"externalId"' in charge and '"feePayer": true' in charge
    assert re.search(
        r"GET /v1/data   \[Authorization: Payment .*\]\n   ← api  200 OK   \[Payment-Receipt: ",
        charge,
    )
    assert '"status": "success"' in charge and '"paidWith": "mpp"' in charge
    assert "client                  49.00 USDC → 48.50 USDC" in charge
    assert "402 https://paymentauth.org/problems/verification-failed" in charge

    # 2. subscription: the 402 lists the plan; served with X-Svc-Sub
    subscription = out[out.index("── 2.") : out.index("── 3.")]
    assert '"subscriptionScheme": true' in subscription
    assert "subscription: Active" in subscription and "cycles billed 1" in subscription
    assert re.search(r"GET /v1/resource   \[X-Svc-Sub: .*\]\n   ← api  200 OK", subscription)

    # 3. thirty days later the facilitator's crank renewed it and charged the period
    renewal = out[out.index("── 3.") : out.index("── 4.")]
    assert re.search(r"renewed on chain after \d+\.\d s", renewal)
    assert "cycles billed 2, paid 20.00 USDC" in renewal
    assert "charged 10.00 USDC for the period ending" in renewal
    assert "⇠ webhook subscription.renewed" in renewal

    # 4. metered: three calls fit the 0.30 cap, the fourth is refused, served after raising it
    metered = out[out.index("── 4.") : out.index("── 5.")]
    assert metered.count("← api  200 OK") == 4
    assert "call 4: 402 AllowanceExhausted: the metered allowance is used up" in metered
    assert "served again: " in metered
    assert "allowance on chain: used 0.40 USDC of cap 0.50 USDC" in metered

    # 5. a session: MPP's challenge, 1,000 calls on vouchers, one redeem, a refunding close
    session = out[out.index("── 5.") : out.index("── 6.")]
    assert 'intent="session"' in session and '"channelProgram": ' in session
    assert re.search(r"GET /v1/quote   \[Authorization: Payment .*\]\n   ← api  200 OK", session)
    assert '"acceptedCumulative": "1000"' in session
    assert "999 paid calls in " in session and "the last voucher says 1.00 USDC in all" in session
    assert "redeemed after " in session and " in one transaction, " in session
    assert "= 10 lamports per call (a one-time payment: 5,000 per call)" in session
    assert "0.50 USDC of its deposit came back" in session
    assert session.count("⇠ webhook session.redeemed") == 1

    # 6. webhooks, each verified and kept once
    received = set(re.findall(r"⇠ webhook (\S+)", out))
    assert {"payment.settled", "subscription.created", "subscription.renewed"} <= received
    assert {"allowance.deducted", "allowance.raised"} <= received
    assert {"session.opened", "session.redeemed", "session.closed"} <= received
    assert " 0 refused signatures" in out

    # 7. analytics and the chart
    assert "oneTime          1.50 USDC  (3)" in out  # the svcpay proof, x402 and MPP
    assert "session          1.00 USDC  (1)" in out  # one redeem
    # 10 + 1 USDC a period, per 30 days: 11 on monthly plans, far more on 20-second ones
    period, _ = plan_times(backend() == DROP_IN)
    monthly = 11 * 30 * DAY // period
    assert "subscriptions: 2 active" in out and f"recurring revenue {monthly}.00 USDC" in out
    assert (tmp_path / "out" / "analytics.png").read_bytes().startswith(PNG)

    # 8. an agent over MCP: svcpay mcp (a child on stdio) pays GET /v1/data within its
    # budget, declines the next call, and logs the payment
    agent = out[out.index("── 8.") :]
    assert "its tools: fetch, balance, pay_status" in agent
    assert '"protocol": "svcpay"' in agent and '"amount": 500000' in agent
    assert "past its budget: declined: SpendingLimitExceeded" in agent
    assert "(nothing was paid)" in agent
    assert "balance: spent today 0.50 USDC, left today 0.00 USDC" in agent
    assert "its log: paid 500000 base units with svcpay for GET " in agent

    # nothing left behind
    assert "all stopped; temporary files removed" in out
    assert len(demo.children) == 2
    assert all(child.proc.returncode is not None for child in demo.children)
    assert not validator_running(demo.validator_url)
    assert demo.tmp is not None and not demo.tmp.exists()


def test_a_failing_service_is_reported_with_its_stderr(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_env = services.child_env

    def without_facilitator_key(extra: Mapping[str, str]) -> dict[str, str]:
        env = real_env(extra)
        if "SVCPAY_FACILITATOR_KEYPAIR" in env:
            env["SVCPAY_FACILITATOR_KEYPAIR"] = str(tmp_path / "missing.json")
        return env

    monkeypatch.setattr(services, "child_env", without_facilitator_key)
    demo = Demo(tmp_path / "out")
    assert run(demo=demo) == 1
    err = capsys.readouterr().err
    assert "demo failed: the facilitator exited with 2 before it was ready" in err
    assert "missing.json: no such keypair file" in err  # the tail of the facilitator's stderr
    assert all(child.proc.returncode is not None for child in demo.children)
    assert not validator_running(demo.validator_url)
