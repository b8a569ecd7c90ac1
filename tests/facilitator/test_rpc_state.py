"""The background loops' view of the RPC node: a pass that was already in flight when the
outage was noticed does not announce that the node is back (it would log a false "back" and
then a second "unreachable" for one outage)."""

from __future__ import annotations

import logging
import time

import pytest

from svcpay.facilitator.service import RpcState


def test_only_a_pass_begun_after_the_outage_proves_the_node_back(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="svcpay.facilitator")
    rpc = RpcState()
    before = time.monotonic()
    assert rpc.reachable(before)  # nothing was down: nothing to say
    rpc.unreachable("ConnectError")
    rpc.unreachable("ConnectError")  # one line per outage, not per attempt

    assert not rpc.reachable(before)  # in flight before the outage was noticed
    assert rpc.down_since is not None
    assert rpc.reachable(time.monotonic())
    assert rpc.down_since is None

    lines = [r.getMessage() for r in caplog.records]
    assert [line.split(":")[0].split(" after")[0] for line in lines] == [
        "rpc unreachable",
        "rpc back",
    ]
