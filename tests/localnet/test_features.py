"""solana-test-validator runs with mainnet's feature set: what mainnet has not activated is
off at genesis (py/svcpay/localnet/mainnet_features.py), what it has is on."""

from __future__ import annotations

import pytest
from solders.pubkey import Pubkey

from svcpay.localnet.mainnet_features import INACTIVE_ON_MAINNET
from tests.support.chain import Chain

pytestmark = pytest.mark.test_validator_only(
    "feature accounts exist only on agave's validator (LiteSVM keeps its feature set inside)"
)

FEATURE_PROGRAM = Pubkey.from_string("Feature111111111111111111111111111111111111")
SBPF_V3 = "5cC3foj77CWun58pC51ebHFUWavHWKarWyR5UUik7dnC"  # active on mainnet: our ELF needs it
SIMD_0460 = "7VgiehxNxu53KdxgLspGQY8myE6f7UokaWa4jsGcaSz"  # stack frames without gaps
SIMD_0500 = "B8JJXCy5amZyWG9r7EnUYLwzXSXTxG7GZ1qZ1qggo83g"  # v3-only deploys


def activated(chain: Chain, feature: str) -> bool:
    """A feature is active when its account exists, owned by the feature program, with
    `activated_at` set (Option<u64>: a 1 tag byte first)."""
    account = chain.account(Pubkey.from_string(feature))
    return account is not None and account.owner == FEATURE_PROGRAM and account.data[:1] == b"\1"


def test_what_mainnet_lacks_is_off_and_what_it_has_is_on(chain: Chain) -> None:
    assert {SIMD_0460, SIMD_0500} <= set(INACTIVE_ON_MAINNET)
    still_on = [f for f in INACTIVE_ON_MAINNET if activated(chain, f)]
    assert still_on == []
    assert activated(chain, SBPF_V3)
