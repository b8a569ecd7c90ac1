"""svcpay.rpc: one layer for every RPC call (issue 37, ADR 0036). Against real processes: the
local validator, a closed port, and svcpay.localnet.lossy answering 429s or dropping sends."""

from __future__ import annotations

import logging
import re
import socket
import sys
import time

import pytest
from solana.exceptions import SolanaRpcException
from solders.keypair import Keypair
from solders.system_program import TransferParams, transfer

from svcpay.localnet.process import Localnet
from svcpay.program.client import BillingClient
from svcpay.rpc import RpcSettings, connect, transport_of
from svcpay.rpc_errors import rpc_unreachable
from tests.support.chain import Chain
from tests.support.processes import Processes

pytestmark = pytest.mark.anyio


def closed_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def lossy(processes: Processes, upstream: str, *flags: str) -> str:
    argv = [sys.executable, "-m", "svcpay.localnet.lossy", "--upstream", upstream, *flags]
    return processes.start("lossy rpc", argv, "svcpay lossy-rpc ready ")


async def test_reads_fail_over_to_the_next_url_and_say_so_once(
    validator: Localnet, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="svcpay.rpc")
    down = closed_port()
    rpc = connect(f"{down},{validator.url}")
    try:
        slots = [(await rpc.get_slot()).value for _ in range(5)]
    finally:
        await rpc.close()
    assert all(slot >= 0 for slot in slots)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and lines[0].startswith(f"rpc {down} unreachable"), lines


async def test_a_send_goes_to_every_url_so_one_that_drops_it_costs_nothing(
    validator: Localnet, chain: Chain, processes: Processes
) -> None:
    dropping = lossy(processes, validator.url, "--drop-sends", "1")
    payer = chain.funded_keypair()
    billing = BillingClient.connect(f"{dropping},{validator.url}")
    try:
        ix = transfer(
            TransferParams(from_pubkey=payer.pubkey(), to_pubkey=Keypair().pubkey(), lamports=10**6)
        )
        receipt = await billing.send([ix], [payer])
    finally:
        await billing.close()
    assert chain.rpc("getSignatureStatuses", [receipt.signature])["value"][0] is not None
    import httpx

    assert httpx.get(dropping + "/stats").json()["dropped"] >= 1  # one copy was dropped


async def test_429s_past_the_budget_are_an_outage_not_a_bug(
    validator: Localnet, processes: Processes
) -> None:
    refusing = lossy(processes, validator.url, "--throttle", "1")
    rpc = connect(RpcSettings((refusing,), budget_secs=1.5))
    began = time.monotonic()
    try:
        with pytest.raises(SolanaRpcException) as raised:
            await rpc.get_slot()
    finally:
        await rpc.close()
    assert time.monotonic() - began >= 1.0  # Retry-After: 1 was waited out once at least
    assert rpc_unreachable(raised.value) == "the RPC provider is rate-limiting (HTTP 429)"


async def test_a_rate_spaces_the_calls(validator: Localnet) -> None:
    rpc = connect(validator.url, rate=20)
    began = time.monotonic()
    try:
        for _ in range(21):
            await rpc.get_slot()
    finally:
        await rpc.close()
    assert time.monotonic() - began >= 1.0  # 20 gaps of 50 ms at least, however fast
    transport = transport_of(rpc)
    assert transport is not None and transport.endpoints[0].requests == 21


@pytest.mark.parametrize(
    ("urls", "rate", "message"),
    [
        ("", None, "at least one RPC URL"),
        ("ftp://x", None, "is not an http(s) URL"),
        ("http://a,https://", None, "is not an http(s) URL"),
        ("http://a", 0.0, "above 0"),
    ],
)
def test_settings_refuse_what_cannot_work(urls: str, rate: float | None, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        RpcSettings.parse(urls, rate)


def test_urls_are_logged_without_their_keys() -> None:
    from svcpay.rpc import shown

    assert shown("https://user:pw@rpc.example:8899/v2/SECRET?api-key=SECRET") == (
        "https://rpc.example:8899"
    )
