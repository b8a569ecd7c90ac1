"""Steps 2 to 4, plans on chain: a subscription (`X-Svc-Sub`), its renewal by the
facilitator's crank a period later, and metered billing from an allowance, up to the cap and
past it once the client raises it."""

from __future__ import annotations

import asyncio
import json
import time
from typing import TYPE_CHECKING

from solders.pubkey import Pubkey
from solders.system_program import TransferParams, transfer

from svcpay.demo.output import expect, say, show_json, sol, step, when
from svcpay.demo.world import (
    CLIENT_SOL,
    MAX_OVERAGE,
    RAISE_BY,
    SUBSCRIPTION_PRICE,
    format_period,
    plan_times,
)
from svcpay.examples.resource_server import PROCESS_PRICE
from svcpay.localnet import test_hook
from svcpay.program.client import status_name
from svcpay.protocol.headers import X_SVC_SUB

if TYPE_CHECKING:
    from svcpay.demo.context import Walkthrough


GATE_CACHE_SECS = 2.0  # the gate caches a subscription's on-chain state this long


async def subscription(w: Walkthrough) -> Pubkey:
    world = w.world
    price = w.plan_amount(SUBSCRIPTION_PRICE)
    step(f"2. Subscription: GET /v1/resource ({price} every 30 days)")
    unpaid = await w.api.get("/v1/resource")
    expect(unpaid.status_code == 402, f"unpaid GET /v1/resource: {unpaid.status_code}")
    option = unpaid.json()["accepts"][0]
    say("402 without X-Svc-Sub; the option it lists:")
    show_json(option)
    expect(option.get("svc", {}).get("planId") == str(world.plan), "the 402 names another plan")
    expect(option.get("token") == str(world.plans_in.mint), "the 402 names another token")
    if world.plans_in.token_2022:
        say(f"the plan's option names its own token, {world.plans_in.symbol}, and destination;")
        say("/v1/data's one-time options name USDC and payTo")
    w.chain.send_ok(
        [transfer(TransferParams(from_pubkey=w.chain.payer.pubkey(),
                                 to_pubkey=world.client.pubkey(), lamports=CLIENT_SOL))],
        [w.chain.payer],
    )  # fmt: skip
    say(f"the client gets {sol(CLIENT_SOL)}: subscribing is its own transaction (fee, rent)")
    before = w.balances()
    sub_id = await w.billing.subscribe(world.plan, world.client)
    say(f"BillingClient.subscribe(planId) on chain → subscription id {sub_id}")
    sub = await w.subscription_state(sub_id)
    w.show_subscription(sub)
    expect(status_name(sub) == "Active" and sub.cycles_billed == 1, "not subscribed")
    w.show_balances(before, w.balances())
    served = await w.api.get("/v1/resource", headers={X_SVC_SUB: str(sub_id)})
    expect(served.status_code == 200, f"GET /v1/resource with X-Svc-Sub: {served.text}")
    show_json(served.json())
    await w.webhooks(["subscription.created"])
    return sub_id


async def renewal(w: Walkthrough, sub_id: Pubkey) -> None:
    period = format_period(plan_times(w.chain.can_time_travel)[0])
    step(f"3. {period} later: the facilitator's crank renews the subscription")
    sub = await w.subscription_state(sub_id)
    before = w.balances()
    was = w.chain.unix_timestamp()
    w.chain.advance_to(sub.current_period_end)
    how = "surfnet_timeTravel" if w.chain.can_time_travel else "waited for the cluster"
    say(
        f"validator clock {when(was)} → {when(w.chain.unix_timestamp())} "
        f"({how}): the period has ended"
    )
    say("waiting for the crank (it runs every second in the facilitator process) …")

    async def renewed() -> bool:
        now = await w.subscription_state(sub_id)
        return now.cycles_billed > sub.cycles_billed

    took = await w.poll(renewed, 30, "the renewal")
    after = await w.subscription_state(sub_id)
    say(f"renewed on chain after {took:.1f} s:")
    w.show_subscription(sub, "  before")
    w.show_subscription(after, "  after ")
    charged = after.total_paid - sub.total_paid
    amount = w.plan_amount(charged)
    say(f"charged {amount} for the period ending {when(after.current_period_end)}")
    expect(charged == SUBSCRIPTION_PRICE, f"the renewal charged {amount}")
    w.show_balances(before, w.balances())
    served = await w.api.get("/v1/resource", headers={X_SVC_SUB: str(sub_id)})
    expect(served.status_code == 200, f"GET /v1/resource after renewal: {served.text}")
    await w.webhooks(["subscription.renewed"])


async def metered(w: Walkthrough) -> None:
    world = w.world
    per_call = w.plan_amount(PROCESS_PRICE)
    step(f"4. Metered: POST /v1/process, {per_call} per call from an allowance")
    sub_id = await w.billing.subscribe(world.metered_plan, world.client, max_overage=MAX_OVERAGE)
    say(
        f"the client subscribes to plan {world.metered_plan} with maxOverage "
        f"{w.plan_amount(MAX_OVERAGE)} → subscription {sub_id}"
    )
    await w.show_allowance(sub_id)
    before = w.balances()
    exhausted_at = 0.0
    for call in range(1, 11):
        reply = await w.api.post(
            "/v1/process",
            headers={X_SVC_SUB: str(sub_id)},
            json={"text": f"document number {call} to analyze"},
        )
        if reply.status_code == 402:
            body = reply.json()
            say(f"  call {call}: 402 {body.get('error')}: {body.get('message')}")
            expect(body.get("error") == "AllowanceExhausted", f"unexpected 402: {body}")
            exhausted_at = time.monotonic()
            break
        expect(reply.status_code == 200, f"POST /v1/process: {reply.status_code}")
        say(f"  call {call}: {json.dumps(reply.json())}")
    expect(exhausted_at > 0, "the allowance was never exhausted")
    cap = await w.billing.increase_allowance(sub_id, RAISE_BY, world.client)
    raised = w.plan_amount(RAISE_BY)
    say(f"the client raises its cap by {raised} on chain: {w.units(cap)}")
    await w.show_allowance(sub_id)
    # The gate reads the new cap once its cached view of the subscription lapses.
    await asyncio.sleep(max(0.0, exhausted_at + GATE_CACHE_SECS + 0.1 - time.monotonic()))
    for _ in range(10):
        reply = await w.api.post(
            "/v1/process",
            headers={X_SVC_SUB: str(sub_id)},
            json={"text": "one more document after raising the cap"},
        )
        if reply.status_code != 402:
            break
        await asyncio.sleep(0.5)
    expect(reply.status_code == 200, f"not served after raising the cap: {reply.text}")
    say(f"  served again: {json.dumps(reply.json())}")
    served = MAX_OVERAGE // PROCESS_PRICE + 1
    say("the resource server deducts usage in batches (every 5 s); waiting for the chain …")

    async def deducted() -> bool:
        allowance = await w.billing.fetch_allowance(sub_id)
        return allowance is not None and allowance.used >= served * PROCESS_PRICE

    took = await w.poll(deducted, 30, "the metered deduction")
    say(f"deducted after {took:.1f} s:")
    await w.show_allowance(sub_id)
    w.show_balances(before, w.balances())
    await w.webhooks(["allowance.deducted", "allowance.raised"])
    if world.plans_in.hooked:
        seen = test_hook.transfers(w.chain, world.plans_in.mint)
        say(f"the transfer hook ran in each of the {seen} PYUSD payments so far (its counter")
        say("   on chain): subscribe, the crank's renewal and the resource server's deduction")
        say("   each resolved the hook's extra accounts and passed them through svc_billing")
