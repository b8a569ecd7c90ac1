"""The chain indexer: every program event, read back oldest first from a cursor, whoever sent
the transaction; failed transactions skipped; pages; nested (CPI) logs attributed right.

On solana-test-validator the test processes of a pytest-xdist run share one validator
(tests/conftest.py), so other tests' program transactions may land between a test's own and
its reads, as other users' do on a cluster: a test checks its own events, and that a later
read holds an earlier one as its beginning, never that nothing else happened."""

from __future__ import annotations

import anyio
import httpx
import pytest
from solana.rpc.commitment import Confirmed
from solana.rpc.models import TxOpts
from solders.instruction import Instruction
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from solders.signature import Signature

from svcpay.facilitator.indexer import (
    Backlog,
    ChainEvent,
    events_in_logs,
    program_data_lines,
    read_events,
)
from svcpay.localnet.process import Localnet
from svcpay.program import instructions
from svcpay.program.client import BillingClient
from svcpay.program.generated.program_id import PROGRAM_ID
from svcpay.rpc import connect
from tests.support.billing import DAY, USDC
from tests.support.chain import Chain
from tests.support.clock import Clock
from tests.support.processes import Processes

pytestmark = pytest.mark.anyio

# Every event the program emits (programs/svc_billing/src/events.rs).
ALL_EVENTS = {
    "PlanCreated",
    "PlanChanged",
    "PlanClosed",
    "SubscriptionCreated",
    "SubscriptionRenewed",
    "RenewalFailed",
    "SubscriptionEnded",
    "SubscriptionStatusChanged",
    "SubscriptionClosed",
    "AllowanceDeducted",
    "AllowanceCapChanged",
}


async def head(client: BillingClient) -> str | None:
    """The newest program transaction: a cursor that skips what other tests did."""
    page = (await client.rpc.get_signatures_for_address(PROGRAM_ID, limit=1)).value
    return str(page[0].signature) if page else None


async def not_older(client: BillingClient, cursor: str | None, than: str) -> bool:
    """Whether program transaction `cursor` is `than` or one landed after it."""
    if cursor is None:
        return False
    newer = await client.rpc.get_signatures_for_address(
        PROGRAM_ID, until=Signature.from_string(than), limit=1000, commitment=Confirmed
    )
    return cursor == than or cursor in {str(s.signature) for s in newer.value}


async def land_failing(client: BillingClient, ix: Instruction, signer: Keypair) -> str:
    """Sends without preflight, so the failing transaction lands (and pays its fee)."""
    tx = await client.sign([ix], [signer])
    sig = (await client.rpc.send_raw_transaction(bytes(tx), TxOpts(skip_preflight=True))).value
    await client.rpc.confirm_transaction(sig, Confirmed)
    assert await client.landed(str(sig)) is False
    return str(sig)


def ours(events: list[ChainEvent], plan: Pubkey, subs: set[str]) -> list[ChainEvent]:
    return [
        e
        for e in events
        if e.fields.get("plan") == str(plan) or e.fields.get("subscription") in subs
    ]


async def test_every_event_is_read_back_oldest_first(
    chain: Chain, clock: Clock, client: BillingClient
) -> None:
    period = clock.days(4)  # and grace: nothing is checked before either ends
    start = await head(client)
    provider, facilitator, cranker = (chain.funded_keypair() for _ in range(3))
    mint = chain.create_mint()
    destination = chain.token_account(provider.pubkey(), mint)
    plan = await client.create_plan(
        provider, plan_id=7, mint=mint, destination=destination,
        billing_authority=facilitator.pubkey(), amount=USDC, period_secs=period,
        grace_secs=period,
    )  # fmt: skip
    await client.update_plan(provider, plan, grace_secs=period)
    alice, bob = chain.funded_keypair(), chain.funded_keypair()
    chain.token_account(alice.pubkey(), mint, 10 * USDC)
    chain.token_account(bob.pubkey(), mint, USDC)  # the first period only
    alice_sub = await client.subscribe(plan, alice, max_overage=2 * USDC)
    bob_sub = await client.subscribe(plan, bob)
    await client.deduct_allowance(alice_sub, USDC // 2, facilitator)
    await client.increase_allowance(alice_sub, USDC, alice)
    await client.pause(alice_sub, alice)
    stranger = chain.funded_keypair()
    failed = await land_failing(
        client, instructions.resume(stranger.pubkey(), plan, alice.pubkey()), stranger
    )
    await client.resume(alice_sub, alice)

    ends = [(await client.fetch_subscription(s)) for s in (alice_sub, bob_sub)]
    clock.advance_to(max(s.current_period_end for s in ends if s is not None))
    await client.collect(alice_sub, cranker)  # renewed
    await client.collect(bob_sub, cranker)  # cannot pay: past due
    bob_state = await client.fetch_subscription(bob_sub)
    assert bob_state is not None
    clock.advance_to(bob_state.past_due_since + period + 1)
    await client.collect(bob_sub, cranker)  # grace over: expired
    await client.close_subscription(bob_sub, bob)
    await client.cancel(alice_sub, alice)
    await client.close_subscription(alice_sub, alice)
    deprecated = await client.deprecate_plan(provider, plan)
    await client.close_plan(provider, plan)

    newest = await head(client)
    assert newest is not None
    batch = await read_events(client.rpc, PROGRAM_ID, start)
    subs = {str(alice_sub), str(bob_sub)}
    events = ours(batch.events, plan, subs)
    assert [e.name for e in events] == [
        "PlanCreated",
        "PlanChanged",
        "SubscriptionCreated",
        "SubscriptionCreated",
        "AllowanceDeducted",
        "AllowanceCapChanged",
        "SubscriptionStatusChanged",  # paused
        "SubscriptionStatusChanged",  # resumed
        "SubscriptionRenewed",
        "RenewalFailed",
        "SubscriptionEnded",
        "SubscriptionClosed",
        "SubscriptionStatusChanged",  # cancelled
        "SubscriptionClosed",
        "PlanChanged",  # deprecated
        "PlanClosed",
    ]
    assert {e.name for e in events} == ALL_EVENTS
    assert failed not in {e.signature for e in batch.events}

    by_name = {e.name: e for e in events}  # the last of each name
    created = by_name["PlanCreated"].fields
    assert created["plan"] == str(plan) and created["authority"] == str(provider.pubkey())
    assert (created["amount"], created["period_secs"], created["plan_id"]) == (USDC, period, 7)
    statuses = [e.fields["status"] for e in events if e.name == "SubscriptionStatusChanged"]
    assert statuses == ["Paused", "Active", "Cancelled"]
    assert by_name["RenewalFailed"].fields["reason"] == "InsufficientFunds"
    assert by_name["SubscriptionEnded"].fields["status"] == "Expired"
    assert by_name["AllowanceDeducted"].fields["amount"] == USDC // 2
    assert by_name["AllowanceCapChanged"].fields["new_cap"] == 3 * USDC
    assert by_name["PlanChanged"].fields["status"] == "Deprecated"
    assert by_name["SubscriptionRenewed"].fields["recovered"] is False

    slots = [e.slot for e in batch.events]
    assert slots == sorted(slots)
    assert all(isinstance(e.block_time, int) for e in events)
    assert len({e.key for e in batch.events}) == len(batch.events)
    # The same numbering as a receipt of the transaction: one key whoever records it.
    mine = [e for e in events if e.signature == deprecated.signature]
    assert [e.name for e in mine] == [e.name for e in deprecated.events]
    assert [e.index for e in mine] == list(range(len(deprecated.events)))

    # The cursor: the newest transaction when the read began, or one that landed during it.
    assert await not_older(client, batch.cursor, newest)
    again = await read_events(client.rpc, PROGRAM_ID, batch.cursor)
    assert ours(again.events, plan, subs) == []
    assert not {e.key for e in again.events} & {e.key for e in batch.events}
    assert await not_older(client, again.cursor, batch.cursor)

    for page_size in (1, 3):
        paged = await read_events(client.rpc, PROGRAM_ID, start, page_size=page_size)
        assert paged.events[: len(batch.events)] == batch.events
        assert await not_older(client, paged.cursor, batch.cursor)
    # In steps of 4 transactions, until the steps hold the batch (or read nothing more).
    stepped: list[ChainEvent] = []
    cursor = start
    while len(stepped) < len(batch.events):
        step = await read_events(client.rpc, PROGRAM_ID, cursor, max_transactions=4)
        if step.cursor == cursor:
            break
        stepped += step.events
        cursor = step.cursor
    assert stepped[: len(batch.events)] == batch.events
    assert await not_older(client, cursor, batch.cursor)


async def step_through(
    url: str, cursor: str | None, backlog: Backlog
) -> tuple[list[ChainEvent], list[str], int]:
    """Reads one transaction a step from `cursor` through `url` until a step reads nothing:
    (the events, each cursor passed, how many steps)."""
    rpc = connect(url)
    try:
        stepped: list[ChainEvent] = []
        passed: list[str] = []
        steps = 0
        while True:
            step = await read_events(
                rpc, PROGRAM_ID, cursor, page_size=1, max_transactions=1, backlog=backlog
            )
            steps += 1
            if step.cursor == cursor:
                return stepped, passed, steps
            stepped += step.events
            cursor = step.cursor
            assert cursor is not None
            passed.append(cursor)
    finally:
        await rpc.close()


async def test_a_backfill_in_steps_lists_each_transaction_once(
    chain: Chain, client: BillingClient, validator: Localnet, processes: Processes
) -> None:
    """With a Backlog, a backfill of `max_transactions` at a time lists each transaction once:
    a step lists only what is newer than the transactions listed before and not yet read."""
    start = await head(client)
    for _ in range(6):
        await a_new_plan(chain, client)
    everything = await read_events(client.rpc, PROGRAM_ID, start)

    url = processes.lossy_rpc(validator.url)  # no faults: it counts the calls
    backlog = Backlog()
    stepped, passed, steps = await step_through(url, start, backlog)

    assert stepped[: len(everything.events)] == everything.events
    assert everything.cursor in passed
    # One signature a page: each passed signature is listed once, and each step's listing
    # ends on one short page: len(passed) + steps calls (more only if the client retried a
    # request). Listing everything after the cursor at every step would take at least
    # len(passed) * (len(passed) + 1) / 2 + steps: 28 for 6.
    calls = httpx.get(url + "/stats").json()["calls"]["getSignaturesForAddress"]
    listed_once = len(passed) + steps
    assert listed_once <= calls < len(passed) * (len(passed) + 1) // 2 + steps, (calls, steps)


async def test_a_listed_transaction_not_served_yet_drops_the_backlog(
    chain: Chain, client: BillingClient, validator: Localnet, processes: Processes
) -> None:
    """getTransaction's null for a listed transaction (not served yet, or in a slot the node
    purged since) ends the step before it and empties the backlog: the next step lists
    afresh, so a transaction the node no longer holds cannot stop the indexer."""
    start = await head(client)
    for _ in range(2):
        await a_new_plan(chain, client)
    everything = await read_events(client.rpc, PROGRAM_ID, start)
    # Each transaction is null the first time it is asked for (then served 0.2 s later).
    url = processes.lossy_rpc(validator.url, "--lag-transactions", "0.2")
    backlog = Backlog()

    stepped, passed, _ = await step_through(url, start, backlog)
    assert (stepped, passed) == ([], []) and backlog.pending == []
    assert backlog.cursor == start

    read: list[ChainEvent] = []
    cursor = start
    for _ in range(100):  # two transactions: two rounds read them, unless steps stop passing
        if cursor == everything.cursor:
            break
        await anyio.sleep(0.3)
        stepped, passed, _ = await step_through(url, cursor, backlog)
        assert len(passed) <= 1 and backlog.pending == []  # a step each, then null again
        read += stepped
        cursor = passed[-1] if passed else cursor
    assert cursor == everything.cursor, "the steps stopped passing transactions"
    assert read == everything.events


def since(events: list[ChainEvent], plan: Pubkey) -> list[ChainEvent]:
    """`events` from `plan`'s PlanCreated on (none if it is not among them)."""
    for i, e in enumerate(events):
        if e.name == "PlanCreated" and e.fields["plan"] == str(plan):
            return events[i:]
    return []


async def a_new_plan(chain: Chain, client: BillingClient) -> Pubkey:
    """A plan of a new provider: the newest program transaction emits PlanCreated for it."""
    provider = chain.funded_keypair()
    mint = chain.create_mint()
    destination = chain.token_account(provider.pubkey(), mint)
    return await client.create_plan(
        provider, plan_id=1, mint=mint, destination=destination,
        billing_authority=provider.pubkey(), amount=USDC, period_secs=DAY,
    )  # fmt: skip


async def test_from_the_beginning_reads_the_whole_history(
    chain: Chain, client: BillingClient
) -> None:
    first = await a_new_plan(chain, client)
    plan = await a_new_plan(chain, client)
    newest = await head(client)
    assert newest is not None
    everything = await read_events(client.rpc, PROGRAM_ID, None)
    created = [e.fields["plan"] for e in everything.events if e.name == "PlanCreated"]
    assert created.index(str(first)) < created.index(str(plan))  # oldest first
    assert await not_older(client, everything.cursor, newest)
    # A later read from the beginning holds it, other tests' transactions only after; from
    # this test's first event on (a long run's node purges its oldest slots meanwhile).
    mine = since(everything.events, first)
    again = await read_events(client.rpc, PROGRAM_ID, None)
    assert since(again.events, first)[: len(mine)] == mine
    empty = await read_events(client.rpc, Pubkey.new_unique(), None)
    assert empty == ([], None)


async def test_a_cursor_the_node_does_not_hold_reads_everything_again(
    chain: Chain, client: BillingClient
) -> None:
    plan = await a_new_plan(chain, client)
    unknown = str(Signature.new_unique())  # another cluster's, or pruned history

    batch = await read_events(client.rpc, PROGRAM_ID, unknown)
    everything = await read_events(client.rpc, PROGRAM_ID, None)

    mine = since(batch.events, plan)  # read from the beginning, this test's plan among them
    assert mine and since(everything.events, plan)[: len(mine)] == mine
    assert await not_older(client, everything.cursor, batch.cursor)


async def test_only_our_program_data_counts_at_any_depth(
    chain: Chain, client: BillingClient
) -> None:
    provider = chain.funded_keypair()
    mint = chain.create_mint()
    destination = chain.token_account(provider.pubkey(), mint)
    ix = instructions.create_plan(
        provider.pubkey(), 3, mint, destination, provider.pubkey(), USDC, DAY, 0
    )
    receipt = await client.send([ix], [provider])
    (data,) = [line for line in receipt.logs if line.startswith("Program data: ")]
    ours_id, router, evil = str(PROGRAM_ID), str(Pubkey.new_unique()), str(Pubkey.new_unique())
    token = "TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA"
    logs = [
        f"Program {evil} invoke [1]",
        data,  # the same bytes, logged by another program: not ours
        f"Program {evil} success",
        f"Program {router} invoke [1]",
        f"Program {ours_id} invoke [2]",  # a CPI into ours
        "Program log: Instruction: CreatePlan",
        f"Program {token} invoke [3]",
        data,  # the token program's frame
        f"Program {token} success",
        data,  # ours again, after the inner call returned
        f"Program {ours_id} consumed 9000 of 200000 compute units",
        f"Program {ours_id} success",
        data,  # the router's
        f"Program {router} success",
    ]
    assert program_data_lines(logs, PROGRAM_ID) == [data]
    (event,) = events_in_logs(logs, PROGRAM_ID, signature="sig", slot=5, block_time=None)
    assert (event.name, event.index, event.key) == ("PlanCreated", 0, "sig:0")
    assert event.fields["plan_id"] == 3 and event.fields["mint"] == str(mint)
    failing = [
        f"Program {router} invoke [1]",
        f"Program {ours_id} invoke [2]",
        f"Program {ours_id} failed: custom program error: 0x1770",
        data,
        f"Program {router} failed: custom program error: 0x1770",
    ]
    assert program_data_lines(failing, PROGRAM_ID) == []
