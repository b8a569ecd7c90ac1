"""The demo runs to the end in the suite, so it cannot silently break."""

from __future__ import annotations

import pytest

from svcpay import demo


def test_demo_walks_through_plan_subscription_and_metered_use(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert demo.main() == 0
    out = capsys.readouterr().out
    assert "event PlanCreated" in out
    assert "event SubscriptionCreated" in out
    assert out.count("event AllowanceDeducted") == 4
    assert "AllowanceExhausted (True)" in out
    assert "client 38.00 USDC, provider 12.00 USDC" in out
