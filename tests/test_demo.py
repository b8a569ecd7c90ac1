"""The demo runs to the end in the suite, so it cannot silently break."""

from __future__ import annotations

import pytest

from svcpay import demo


def test_demo_walks_through_the_three_flows_on_chain_and_over_http(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert demo.main() == 0
    out = capsys.readouterr().out
    assert "event PlanCreated" in out
    assert "event SubscriptionCreated" in out
    assert out.count("event AllowanceDeducted") == 4
    assert "AllowanceExhausted (True)" in out
    assert "GET /v1/data -> 402" in out and "GET /v1/data with X-PAYMENT -> 200" in out
    assert "the same proof again -> 402 InvalidPaymentProof" in out
    assert "X-Svc-Sub: " in out and "-> 200 {'data': 'the resource', 'path': '/v1/resource'}" in out
    assert "call 3 -> 402 the metered allowance is used up" in out
    assert "after raising the cap by 1 USDC -> 200" in out
    assert "client 36.00 USDC, provider 14.00 USDC" in out
