"""An RPC outage in the facilitator's background loops is one warning when the node goes
away and one when it is back: not a traceback per attempt (issue 17)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
from solders.keypair import Keypair

from svcpay.facilitator.config import FacilitatorConfig
from svcpay.facilitator.service import Facilitator
from svcpay.localnet.process import Localnet
from tests.support.switch import Switch

pytestmark = pytest.mark.anyio


def records(caplog: pytest.LogCaptureFixture, text: str) -> int:
    return sum(text in r.getMessage() for r in caplog.records)


async def test_an_outage_logs_one_line_down_and_one_line_back(
    validator: Localnet, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    switch = Switch(validator.url)
    config = FacilitatorConfig(
        keypair=Keypair(),
        rpc_url=switch.url,
        database_url=f"sqlite:///{tmp_path / 'f.db'}",
        crank_interval_secs=0.05,
        indexer_interval_secs=0.05,
        webhook_interval_secs=0.05,
    )
    service = Facilitator(config)
    stop = asyncio.Event()
    caplog.set_level(logging.INFO, logger="svcpay.facilitator")
    background = asyncio.create_task(service.run_background(stop))
    try:
        await asyncio.sleep(1.0)  # about 20 indexer passes against a closed port
        assert records(caplog, "rpc unreachable: ") == 1
        assert records(caplog, "pass failed") == 0
        assert not any(r.exc_info for r in caplog.records)

        await switch.on()
        for _ in range(100):
            if records(caplog, "rpc back"):
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.5)  # more passes, now answered
        assert (records(caplog, "rpc unreachable"), records(caplog, "rpc back")) == (1, 1)

        await switch.off()  # a second outage is a second pair of lines
        # Off until a pass has met it (not a fixed 0.5 s: on a loaded machine no pass may
        # run in that time, and the outage would go unseen, as a real one that short may).
        for _ in range(200):
            if records(caplog, "rpc unreachable") == 2:
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.2)  # more passes meet it: still one line
        await switch.on()
        for _ in range(100):
            if records(caplog, "rpc back") == 2:
                break
            await asyncio.sleep(0.05)
        assert (records(caplog, "rpc unreachable"), records(caplog, "rpc back")) == (2, 2)
        assert not any(r.levelno >= logging.ERROR for r in caplog.records)
    finally:
        stop.set()
        await background
        await switch.off()
        await service.aclose()
