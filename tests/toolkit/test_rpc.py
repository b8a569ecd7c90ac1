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
from svcpay.rpc.blockhash import WAIT_SECS, StaleBlockhash, fresh_blockhash
from svcpay.rpc_errors import rpc_unreachable
from tests.support.chain import Chain
from tests.support.clock import Clock
from tests.support.processes import Processes

pytestmark = pytest.mark.anyio


def closed_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


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
    dropping = processes.lossy_rpc(validator.url, "--drop-sends", "1")
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
    refusing = processes.lossy_rpc(validator.url, "--throttle", "1")
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


@pytest.mark.parametrize("poll_secs", [0.1, 600.0], ids=["statuses polled", "a poll stuck"])
async def test_a_copy_no_node_has_seen_goes_out_again_sooner(
    validator: Localnet, chain: Chain, processes: Processes, poll_secs: float
) -> None:
    """A transaction no node reports any status for was most likely dropped: its next copy
    goes out `unseen_secs` after the last one, not on the cadence of one already processed
    (with a flat 2 s, each dropped copy cost a payer 2 s: three in a row, 3 % of payments
    when 30 % of sends are dropped, made the p99 time to proof about 10 s). A status poll
    that takes long (429s on 429s) does not hold the next copy back."""
    import httpx
    from solders.message import MessageV0
    from solders.transaction import VersionedTransaction

    from svcpay.rpc.landing import Lander, Pending

    dropping = processes.lossy_rpc(validator.url, "--drop-sends", "1")
    payer = chain.funded_keypair()
    ix = transfer(
        TransferParams(from_pubkey=payer.pubkey(), to_pubkey=Keypair().pubkey(), lamports=10**6)
    )
    rpc = connect(dropping)
    # The processed cadence is out of reach here: every copy but the first is the unseen one.
    lander = Lander(rpc, rebroadcast_secs=600.0, unseen_secs=0.5, poll_secs=poll_secs)
    try:
        blockhash = (await rpc.get_latest_blockhash()).value.blockhash
        tx = VersionedTransaction(
            MessageV0.try_compile(payer.pubkey(), [ix], [], blockhash), [payer]
        )
        outcome = await lander.land(tx, wait_secs=3.0)
    finally:
        await lander.aclose()
        await rpc.close()
    assert isinstance(outcome, Pending)  # every copy dropped: it goes on, never "failed"
    copies = httpx.get(dropping + "/stats").json()["sends"][str(tx.signatures[0])]
    assert len(copies) >= 3, copies  # 0 s, then about every 0.6 s (0.5 s and a poll tick)
    assert {what for _, what in copies} == {"dropped"}
    status = chain.rpc("getSignatureStatuses", [str(tx.signatures[0])])["value"][0]
    assert status is None  # nothing reached the node


async def test_a_copy_stuck_behind_429s_does_not_make_the_flight_spin(
    validator: Localnet, chain: Chain
) -> None:
    """When the next copy is due while the last one still waits out 429s, the flight waits
    for the next tick; it once looped without sleeping (3.0 s of CPU in 4 s, against 0.02)."""
    import asyncio
    import subprocess

    from solders.message import MessageV0
    from solders.transaction import VersionedTransaction

    from svcpay.rpc.landing import Lander, Pending

    def proxy(*flags: str) -> subprocess.Popen[str]:
        argv = [sys.executable, "-m", "svcpay.localnet.lossy", "--upstream", validator.url]
        return subprocess.Popen([*argv, *flags], stdout=subprocess.PIPE, text=True)

    dropping = proxy("--drop-sends", "1")
    assert dropping.stdout is not None
    url = dropping.stdout.readline().split()[-1]
    payer = chain.funded_keypair()
    ix = transfer(
        TransferParams(from_pubkey=payer.pubkey(), to_pubkey=Keypair().pubkey(), lamports=10**6)
    )
    rpc = connect(url)
    lander = Lander(rpc)
    throttling = None
    try:
        blockhash = (await rpc.get_latest_blockhash()).value.blockhash
        tx = VersionedTransaction(
            MessageV0.try_compile(payer.pubkey(), [ix], [], blockhash), [payer]
        )
        assert isinstance(await lander.land(tx, wait_secs=1.5), Pending)  # accepted, dropped
        dropping.terminate()
        dropping.wait(10)
        throttling = proxy("--throttle", "1", "--port", url.rsplit(":", 1)[1])  # every call 429
        assert throttling.stdout is not None and throttling.stdout.readline()
        began = time.process_time()
        await asyncio.sleep(4)
        busy = time.process_time() - began
    finally:
        await lander.aclose()
        await rpc.close()
        for p in (dropping, throttling):
            if p is not None:
                p.terminate()
                p.wait(10)
    assert busy < 1.0, busy


@pytest.mark.drop_in_only(
    "a node 5 s behind gives a spent blockhash only after a time travel: on agave, where the "
    "clock moves by waiting, the blockhash of 5 s ago is 60 s from its end"
)
async def test_a_spent_blockhash_from_a_lagging_node_is_asked_again_not_signed_with(
    validator: Localnet, chain: Chain, clock: Clock, processes: Processes
) -> None:
    """The node answers getLatestBlockhash with what it saw 5 s before (the first answer it
    saw, until then). Its first answer is spent by block height by the time the renewal
    signs: signed with it, the transaction could only expire on a cluster (a renewal late by
    the whole rebroadcast). The drop-in, which keeps its last 150 blockhashes whatever the
    slots a time travel skipped, would still take it: the test asks which was signed."""
    lagging = processes.lossy_rpc(validator.url, "--lag-blockhash", "5")
    payer = chain.funded_keypair()
    billing = BillingClient.connect(lagging)
    try:
        spent = (await billing.rpc.get_latest_blockhash()).value
        clock.advance(120)  # 300 slots of 400 ms on: that blockhash's 150 blocks are over
        assert (await billing.rpc.get_block_height()).value > spent.last_valid_block_height
        began = time.monotonic()
        ix = transfer(
            TransferParams(from_pubkey=payer.pubkey(), to_pubkey=Keypair().pubkey(), lamports=10**6)
        )
        tx = await billing.sign([ix], [payer])
        waited = time.monotonic() - began
        receipt = await billing.send_signed(tx)
    finally:
        await billing.close()
    assert tx.message.recent_blockhash != spent.blockhash
    assert 4 <= waited <= WAIT_SECS  # asked again until the lagging node had a fresh one
    assert chain.rpc("getSignatureStatuses", [receipt.signature])["value"][0] is not None


async def test_a_node_that_gives_only_spent_blockhashes_is_named_not_signed_with(
    validator: Localnet, clock: Clock, processes: Processes
) -> None:
    lagging = processes.lossy_rpc(validator.url, "--lag-blockhash", "600")
    rpc = connect(lagging)
    try:
        await rpc.get_latest_blockhash()
        clock.advance(120)
        with pytest.raises(StaleBlockhash, match=r"has 0 blocks left .* the node lags the clu"):
            await fresh_blockhash(rpc, wait_secs=2)
    finally:
        await rpc.close()
