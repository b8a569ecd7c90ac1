"""The demo with --token-2022 runs to the end in the suite: the plans (subscription, its
renewal by the crank, metered billing) in a PYUSD-like Token-2022 mint whose transfers go
through the test hook, the one-time payments and the session still in USDC, and nothing
left running afterwards."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from svcpay import demo
from svcpay.cli import main
from svcpay.demo.walkthrough import Demo, run
from svcpay.demo.world import DAY, plan_times
from svcpay.localnet import test_hook
from svcpay.localnet.process import DROP_IN, TEST_HOOK_SO, backend
from tests.test_demo import PNG, validator_running


def test_svcpay_demo_and_python_m_pass_the_option_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    asked: list[dict[str, object]] = []

    def walkthrough(out: Path, **options: object) -> int:  # the real one runs below
        asked.append(options)
        return 0

    monkeypatch.setattr(demo, "run", walkthrough)
    assert main(["demo", "--token-2022", "--out", str(tmp_path), "--json"]) == 0
    assert demo.main(["--token-2022", "--out", str(tmp_path)]) == 0
    assert main(["demo", "--out", str(tmp_path)]) == 0
    assert main(["demo", "--serve", "--out", str(tmp_path)]) == 0
    assert demo.main(["--serve", "--token-2022", "--out", str(tmp_path)]) == 0
    assert asked == [
        {"token_2022": True},
        {"token_2022": True},
        {},
        {"serve": True},
        {"token_2022": True, "serve": True},
    ]
    assert json.loads(capsys.readouterr().out.splitlines()[0])["ok"] is True


def test_the_demo_prices_its_plans_in_a_pyusd_like_mint(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    demo = Demo(tmp_path / "out", token_2022=True)
    code = run(demo=demo)
    out, err = capsys.readouterr()
    assert code == 0, err

    # Setup: USDC and a PYUSD-like mint; the plans are in PYUSD; it says what stays in USDC
    setup = out[out.index("── Setup") : out.index("── Starting")]
    mint = re.search(
        r"PYUSD: a PYUSD-like Token-2022 mint (\w+): 6 decimals, a transfer fee of 0", setup
    )
    assert mint is not None
    assert "permanent delegate " in setup
    if TEST_HOOK_SO.exists():  # loaded beside the program wherever it is built
        assert f"transfer hook {test_hook.HOOK_PROGRAM}" in setup
    pyusd_account = re.search(r"its PYUSD account (\w+) receives the plans' payments", setup)
    assert pyusd_account is not None
    assert "10.00 PYUSD every 30 days (GET /v1/resource)" in setup
    assert "one-time payments (1, 1b, 1c) and the session (5) stay in USDC" in setup
    assert "50.00 USDC and 50.00 PYUSD and no SOL" in setup

    # 1. one-time payments: USDC, as without the option
    one_time = out[out.index("── 1.") : out.index("── 1b.")]
    assert "client                  50.00 USDC → 49.50 USDC" in one_time
    assert "client                 50.00 PYUSD → 50.00 PYUSD" in one_time

    # 2. the plan's 402 option names PYUSD and the provider's PYUSD account
    subscription = out[out.index("── 2.") : out.index("── 3.")]
    assert f'"token": "{mint[1]}"' in subscription
    assert f'"payTo": "{pyusd_account[1]}"' in subscription
    assert (
        "subscription: Active" in subscription
        and "cycles billed 1, paid 10.00 PYUSD" in subscription
    )
    assert "client                 50.00 PYUSD → 40.00 PYUSD" in subscription
    assert "provider (plans)        0.00 PYUSD → 10.00 PYUSD" in subscription
    assert re.search(r"GET /v1/resource   \[X-Svc-Sub: .*\]\n   ← api  200 OK", subscription)

    # 3. the crank renews through the hook
    renewal = out[out.index("── 3.") : out.index("── 4.")]
    assert "cycles billed 2, paid 20.00 PYUSD" in renewal
    assert "charged 10.00 PYUSD for the period ending" in renewal
    assert re.search(
        r"webhook subscription\.renewed \(\w+, amount 10\.00 PYUSD, fee 0\.00 PYUSD\)", renewal
    )

    # 4. metered: the allowance in PYUSD, deducted through the hook
    metered = out[out.index("── 4.") : out.index("── 5.")]
    assert "call 4: 402 AllowanceExhausted" in metered
    assert "allowance on chain: used 0.40 PYUSD of cap 0.50 PYUSD" in metered
    if TEST_HOOK_SO.exists():
        seen = re.search(r"the transfer hook ran in each of the (\d+) PYUSD payments", metered)
        assert seen is not None and int(seen[1]) >= 4  # subscribe x2, renewal, deduction(s)

    # 5. the session, in USDC
    session = out[out.index("── 5.") : out.index("── 6.")]
    assert "0.50 USDC of its deposit came back" in session

    # 7. analytics: one-time and session in USDC, the plans' revenue in PYUSD
    assert "oneTime          1.50 USDC  (3)" in out
    assert "session          1.00 USDC  (1)" in out
    period, _ = plan_times(backend() == DROP_IN)
    monthly = 11 * 30 * DAY // period
    assert f"recurring revenue {monthly}.00 PYUSD" in out
    # each mint on its own (ADR 0044): the plans' modes in PYUSD, never added to USDC
    analytics = out[out.index("── 7.") :]
    assert "each mint on its own" in analytics
    assert re.search(r"^ *USDC: [0-9.]+ USDC in 4 payments$", analytics, re.M), analytics
    assert re.search(r"^ *PYUSD: [0-9.]+ PYUSD in \d+ payments$", analytics, re.M), analytics
    assert re.search(r"^ *subscription +[0-9.]+ PYUSD  \(\d+\)$", analytics, re.M), analytics
    assert (tmp_path / "out" / "analytics.png").read_bytes().startswith(PNG)

    # nothing left behind
    assert "all stopped; temporary files removed" in out
    assert all(child.proc.returncode is not None for child in demo.children)
    assert not validator_running(demo.validator_url)
    assert demo.tmp is not None and not demo.tmp.exists()
