"""A facilitator killed with SIGKILL in the middle of its session redeems, then another
started on the same database (issue 23): every session ends redeemed exactly to its highest
voucher, once, and the provider holds exactly what the payers signed."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import httpx
import pytest
from solders.keypair import Keypair
from solders.pubkey import Pubkey

from svcpay.localnet.process import Localnet
from svcpay.program.client import BillingClient
from svcpay.program.session_client import Sessions
from svcpay.protocol.voucher import SignedVoucher
from tests.support.billing import USDC
from tests.support.chain import Chain
from tests.support.fleet import Receiver, make_fleet, wait_for
from tests.support.processes import Processes
from tests.support.switch import Switch

pytestmark = pytest.mark.anyio
SESSIONS = 12  # four transactions of three redeems
PRICE = 1_000

# f1 takes the reports (due at once) and never redeems; f2 redeems, and is killed mid-way.
IDLE = {
    "SVCPAY_SESSION_INTERVAL_SECS": "3600",
    "SVCPAY_SESSION_REDEEM_SECS": "0",
    "SVCPAY_CRANK_INTERVAL_SECS": "0",
}
EAGER = {
    "SVCPAY_SESSION_INTERVAL_SECS": "0.2",
    "SVCPAY_SESSION_REDEEM_SECS": "0",
    "SVCPAY_CRANK_INTERVAL_SECS": "0",
    "SVCPAY_CRANK_LEASE_SECS": "2",
}


async def test_kill_9_mid_redeem_then_a_restart_redeems_each_voucher_once(
    validator: Localnet,
    chain: Chain,
    receiver: Receiver,
    processes: Processes,
    tmp_path: Path,
) -> None:
    # 50 ms a request to the node: a pass of four transactions lasts long enough to be cut.
    slow = Switch(validator.url, delay=0.05)
    await slow.on()
    url = f"sqlite:///{tmp_path / 'facilitator.db'}"
    fleet = await make_fleet(validator, chain, url, receiver, processes, tmp_path, rpc=slow.url)
    billing = BillingClient.connect(validator.url)
    sessions = Sessions(billing)
    vouchers = []
    for n in range(SESSIONS):
        payer, key = chain.funded_keypair(), Keypair()
        chain.token_account(payer.pubkey(), fleet.mint, USDC)
        channel = await sessions.open(
            payer, mint=fleet.mint, recipient=fleet.destination, deposit=USDC, price=PRICE,
            expires_at=chain.unix_timestamp() + 3600, dispute_secs=600, signer=key.pubkey(),
        )  # fmt: skip
        vouchers.append(SignedVoucher.sign(key, channel, (n + 1) * 10 * PRICE))
    expected = sum(v.cumulative for v in vouchers)

    await fleet.start(1, **IDLE)
    auth = {"authorization": f"Bearer {fleet.api_key}"}
    async with httpx.AsyncClient(base_url=fleet.urls[0], timeout=30) as http:
        body = {"vouchers": [v.to_json_dict() for v in vouchers]}
        r = await http.post("/v1/sessions/vouchers", json=body, headers=auth)
    assert r.status_code == 200 and {a["status"] for a in r.json()["vouchers"]} == {"kept"}

    async def redeemed() -> list[int]:
        found = [await sessions.fetch(v.channel) for v in vouchers]
        return [s.redeemed if s is not None else -1 for s in found]

    await fleet.start(1, **EAGER)
    await wait_for(lambda: _some(redeemed()), timeout=30, step=0.02)
    fleet.children[1].proc.send_signal(signal.SIGKILL)
    killed = time.monotonic()
    left = sum(1 for got in await redeemed() if got == 0)
    assert left > 0, "the kill came after the last redeem: nothing was cut"

    await fleet.start(1, **EAGER)
    await wait_for(lambda: _all(redeemed(), vouchers), timeout=60, step=0.2)
    took = time.monotonic() - killed
    print(
        f"f2 killed with {left} of {SESSIONS} sessions unredeemed; all redeemed {took:.1f} s later"
    )
    assert await redeemed() == [v.cumulative for v in vouchers]
    assert int(chain.token_state(fleet.destination)["amount"]) == expected
    # Each session was redeemed in one transaction: one SessionRedeemed event each.
    counts = await _redeem_events(billing, [v.channel for v in vouchers])
    assert counts == [1] * SESSIONS, counts
    assert "Traceback" not in fleet.log(2), fleet.log(2)[-3000:]
    processes.stop()
    await billing.close()
    await slow.off()


async def _some(found: object) -> bool:
    return any(got > 0 for got in await found)  # type: ignore[attr-defined]


async def _all(found: object, vouchers: list[SignedVoucher]) -> bool:
    return list(await found) == [v.cumulative for v in vouchers]  # type: ignore[call-overload]


async def _redeem_events(billing: BillingClient, channels: list[Pubkey]) -> list[int]:
    """How many successful redeem transactions each session took part in (its history)."""
    counts = []
    for channel in channels:
        sigs = (await billing.rpc.get_signatures_for_address(channel)).value
        ok = [s.signature for s in sigs if s.err is None]
        n = 0
        for sig in ok:
            tx = await billing.rpc.get_transaction(sig, "json", max_supported_transaction_version=0)
            logs = tx.value.transaction.meta.log_messages if tx.value else []  # type: ignore[union-attr]
            n += any("Instruction: RedeemSession" in line for line in logs or [])
        counts.append(n)
    return counts
