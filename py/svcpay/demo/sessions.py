"""The demo's session flow (docs/adr/0024, 0025): the client opens a session on chain, makes
1,000 paid calls with one voucher each, the facilitator redeems them in one transaction, and
the provider closes the session, refunding the rest; the fee per call is printed."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING

import httpx

from svcpay.amounts import to_base_units
from svcpay.client import PaymentAuth
from svcpay.demo.output import expect, say, show_json, sol, step, usdc
from svcpay.examples.resource_server import QUOTE_PRICE
from svcpay.program.session_client import Sessions
from svcpay.protocol import mpp
from svcpay.schemes.session.client import SessionOffer

if TYPE_CHECKING:
    from svcpay.demo.context import Walkthrough

CALLS = 1_000
DEPOSIT = to_base_units("1.50")  # 1,500 calls' worth
SESSION_RENT = 10_000_000  # lamports: the session's and its vault's rent, and the open's fee
ONE_TIME_FEE = 5_000  # lamports the facilitator pays per one-time payment (one signature)


async def session(w: Walkthrough) -> None:

    world, chain = w.world, w.chain
    step(f"5. Session: GET /v1/quote, {usdc(QUOTE_PRICE)} per call, one voucher each")
    unpaid = await w.api.get("/v1/quote")
    challenges = mpp.parse_challenges(unpaid.headers.get_list("www-authenticate"))
    offer = SessionOffer.parse(challenges[0]) if challenges else None
    expect(unpaid.status_code == 402 and offer is not None, "no session challenge in the 402")
    assert offer is not None
    say('the 402 carries MPP\'s challenge, WWW-Authenticate: Payment … intent="session";')
    say("its request (base64url JCS) decoded:")
    show_json(offer.challenge.request_json)
    say(f"the client opens a session on chain escrowing {usdc(DEPOSIT)}; it pays the rent of")
    say(f"the session's accounts itself, so it gets {sol(SESSION_RENT)} first:")
    chain.fund(world.client, SESSION_RENT)
    before = w.balances()
    auth = PaymentAuth(
        world.client, rpc=w.rpc, billing=w.billing, max_per_request=DEPOSIT, session_deposit=DEPOSIT
    )
    first = await w.api.get("/v1/quote", auth=auth)
    expect(first.status_code == 200, f"the first session call answered {first.status_code}")
    [(_, tab)] = auth.tabs.items()
    say(f"session {tab.channel}: the voucher went in Authorization: Payment; the receipt:")
    show_json(mpp.decode_json(first.headers["payment-receipt"]))
    say(f"{CALLS - 1:,} more calls, each with a voucher for {usdc(QUOTE_PRICE)} more (not shown):")
    began = time.monotonic()
    async with httpx.AsyncClient(base_url=w.services.api_url, auth=auth, timeout=30) as quiet:
        for _ in range(CALLS - 1):
            reply = await quiet.get("/v1/quote")
            expect(reply.status_code == 200, f"a session call answered {reply.status_code}")
    took = time.monotonic() - began
    say(
        f"  {CALLS - 1:,} paid calls in {took:.1f} s ({(CALLS - 1) / took:,.0f} per second), "
        f"no transaction; the last voucher says {usdc(tab.cumulative)} in all"
    )
    expect(tab.cumulative == CALLS * QUOTE_PRICE, f"vouchers total {tab.cumulative}")
    say("the resource server reports the served vouchers to the facilitator, which redeems a")
    say("session's highest once 1.00 USDC is unredeemed (SVCPAY_SESSION_REDEEM_AT), or 300 s")
    say("after the first report: one transaction for the 1,000 calls; waiting for it …")
    sessions = Sessions(w.billing)

    async def redeemed() -> bool:
        state = await sessions.fetch(tab.channel)
        return state is not None and state.redeemed >= CALLS * QUOTE_PRICE

    waited = await w.poll(redeemed, 60, "the session's redeem")
    await w.webhooks(["session.opened", "session.redeemed"])
    signature = next(
        (
            e["data"]["transaction"]
            for e in w.receiver.snapshot()
            if e["type"] == "session.redeemed"
        ),
        None,
    )
    expect(signature is not None, "no session.redeemed webhook named its transaction")
    fee, units = w.fee_and_units(str(signature))
    sig = str(signature)
    say(f"redeemed after {waited:.1f} s in one transaction, {sig[:16]}…: {units:,} compute units,")
    per_call = fee / CALLS
    say(f"fee {fee:,} lamports (its signature and the voucher's Ed25519 check) for {CALLS:,} calls")
    say(f"= {per_call:g} lamports per call (a one-time payment: {ONE_TIME_FEE:,} per call)")
    say("the provider closes the session (it may at any time): the rest goes back at once")
    await sessions.close(tab.channel, world.provider)
    auth.tabs.drop(next(k for k, _ in auth.tabs.items()))
    expect(await sessions.buried(tab.channel), "not closed")  # an empty tombstone is left
    w.show_balances(before, w.balances())
    refund = DEPOSIT - CALLS * QUOTE_PRICE
    say(
        f"  the client paid {usdc(CALLS * QUOTE_PRICE)} for {CALLS:,} calls; "
        f"{usdc(refund)} of its deposit came back"
    )
    await w.webhooks(["session.closed"])
    say(f"receipts carry acceptedCumulative; the last: {json.dumps(tab.cumulative)} base units")
