"""The limits that keep the facilitator's fee payments from being abused."""

from __future__ import annotations

import pytest
from solders.keypair import Keypair

from svcpay.facilitator.config import ConfigError, FacilitatorConfig
from svcpay.facilitator.settlement import RateLimit


def test_the_settlement_rate_limit_is_a_token_bucket_per_payer() -> None:
    limit = RateLimit(rate=2.0, burst=3)
    assert [limit.take("a", now=0.0) for _ in range(3)] == [0.0, 0.0, 0.0]
    assert limit.take("a", now=0.0) == pytest.approx(0.5)  # empty: half a second for a token
    assert limit.take("b", now=0.0) == 0.0  # another payer has its own bucket
    assert limit.take("a", now=0.5) == 0.0  # refilled at 2 a second
    idle = [limit.take("a", now=100.0) for _ in range(4)]  # a long pause refills only to 3
    assert idle[:3] == [0.0, 0.0, 0.0] and idle[3] > 0


def test_the_limit_is_configured_from_the_environment() -> None:
    key = {"SVCPAY_FACILITATOR_KEYPAIR_JSON": str(list(bytes(Keypair())))}
    config = FacilitatorConfig.from_env(
        {**key, "SVCPAY_SETTLE_RATE": "2", "SVCPAY_SETTLE_BURST": "7"}
    )
    assert (config.settle_rate_per_sec, config.settle_burst) == (2.0, 7)
    assert FacilitatorConfig.from_env(key).settle_burst == 20
    with pytest.raises(ConfigError, match="SVCPAY_SETTLE_RATE"):
        FacilitatorConfig.from_env({**key, "SVCPAY_SETTLE_RATE": "fast"})
