"""From the program's events to the lifecycle events webhooks carry and analytics count.

Chain events are keyed `<transaction signature>:<index of the event in the transaction>`
(`chain_key`), so the same event recorded twice (from a receipt of the facilitator's own
transaction and again by the indexer) is stored once.

| program event                           | lifecycle event(s)                                  |
|-----------------------------------------|-----------------------------------------------------|
| PlanCreated                             | plan.created                                        |
| PlanChanged (Deprecated / other)        | plan.deprecated / plan.updated                      |
| PlanClosed                              | plan.closed                                         |
| SubscriptionCreated                     | subscription.created (first period's charge)        |
| SubscriptionRenewed                     | subscription.renewed                                |
| RenewalFailed                           | subscription.renewal_failed                         |
| SubscriptionStatusChanged               | subscription.paused / .resumed / .cancelled         |
| SubscriptionEnded                       | subscription.ended                                  |
| SubscriptionClosed                      | subscription.closed                                 |
| AllowanceDeducted                       | allowance.deducted (+ allowance.exhausted at 0 left)|
| AllowanceCapChanged                     | allowance.raised / allowance.lowered                |
| SessionOpened                           | session.opened                                      |
| SessionToppedUp                         | session.topped_up                                   |
| SessionRedeemed                         | session.redeemed (counted as session revenue)       |
| SessionCloseRequested                   | session.close_requested                             |
| SessionClosed                           | session.closed                                      |

The facilitator adds payment.settled for each one-time payment it settles.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from pydantic.alias_generators import to_camel
from solana.rpc.async_api import AsyncClient
from solders.pubkey import Pubkey

from svcpay.facilitator.store import Event, Store
from svcpay.program.client import Receipt
from svcpay.program.generated.program_id import PROGRAM_ID

if TYPE_CHECKING:
    from svcpay.facilitator.indexer import Backlog

EVENT_TYPES = (
    "payment.settled",
    "plan.created",
    "plan.updated",
    "plan.deprecated",
    "plan.closed",
    "subscription.created",
    "subscription.renewed",
    "subscription.renewal_failed",
    "subscription.paused",
    "subscription.resumed",
    "subscription.cancelled",
    "subscription.ended",
    "subscription.closed",
    "allowance.deducted",
    "allowance.exhausted",
    "allowance.raised",
    "allowance.lowered",
    "session.opened",
    "session.topped_up",
    "session.redeemed",
    "session.close_requested",
    "session.closed",
)


def jsonable(value: Any) -> Any:
    """Pubkeys as base58, enum variants by name, ints and bools as they are."""
    if isinstance(value, Pubkey):
        return str(value)
    if isinstance(value, bool | int | str) or value is None:
        return value
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return type(value).__name__  # a generated enum variant (Active, Paused, ...)


def chain_key(signature: str, index: int) -> str:
    return f"{signature}:{index}"


def from_program_event(
    name: str,
    fields: Mapping[str, Any],
    *,
    signature: str,
    index: int,
    at: int,
    plan: str | None = None,
    withdrawal_fees: Mapping[str, int] | None = None,
) -> list[Event]:
    """The lifecycle events for program event `name` (fields as decoded), the `index`-th
    event of transaction `signature`, which happened at unix time `at`. `plan` attributes
    events that do not name their plan (AllowanceDeducted) when the caller knows it.
    `withdrawal_fees` (session -> fee, from the transaction's `SessionWithdrawn` events,
    `withdrawal_fees_of`): what a transfer-fee mint withheld of a session's payout, which a
    redeem in the same transaction reports as its `fee` and `net`."""
    data = {to_camel(k): jsonable(v) for k, v in fields.items()}
    data["transaction"] = signature
    key = chain_key(signature, index)
    if isinstance(data.get("plan"), str):
        plan = data["plan"]
    sub = data.get("subscription") if isinstance(data.get("subscription"), str) else None
    session = data.get("session") if isinstance(data.get("session"), str) else None

    def ev(
        kind: str, *, suffix: str = "", mode: str | None = None, amount: int | None = None
    ) -> Event:
        # A payment's fee, withheld by a Token-2022 transfer-fee mint (0 otherwise: None).
        fee = data.get("fee") if amount is not None else None
        return Event(
            id="evt_" + uuid.uuid5(uuid.NAMESPACE_URL, key + suffix).hex[:24],
            type=kind,
            created_at=at,
            data=data,
            source="chain",
            chain_key=key + suffix,
            plan=plan,
            subscription=sub,
            session=session,
            mode=mode,
            amount=amount,
            fee=int(fee) if isinstance(fee, int) and fee > 0 else None,
        )

    amount = int(data["amount"]) if isinstance(data.get("amount"), int) else None
    if amount is not None and amount >= 2**63:  # beyond the database's integer (SQLite)
        amount = None  # kept in `data`; left out of the analytics sums
    if name == "PlanCreated":
        return [ev("plan.created")]
    if name == "PlanChanged":
        return [ev("plan.deprecated" if data.get("status") == "Deprecated" else "plan.updated")]
    if name == "PlanClosed":
        return [ev("plan.closed")]
    if name == "SubscriptionCreated":
        return [ev("subscription.created", mode="subscription", amount=amount)]
    if name == "SubscriptionRenewed":
        return [ev("subscription.renewed", mode="subscription", amount=amount)]
    if name == "RenewalFailed":
        return [ev("subscription.renewal_failed")]
    if name == "SubscriptionStatusChanged":
        status = data.get("status")
        if status == "Paused":
            return [ev("subscription.paused")]
        if status == "Cancelled" or data.get("cancelAtPeriodEnd"):
            return [ev("subscription.cancelled")]
        return [ev("subscription.resumed")]
    if name == "SubscriptionEnded":
        return [ev("subscription.ended")]
    if name == "SubscriptionClosed":
        return [ev("subscription.closed")]
    if name == "AllowanceDeducted":
        out = [ev("allowance.deducted", mode="metered", amount=amount)]
        if data.get("remaining") == 0:
            out.append(ev("allowance.exhausted", suffix=":exhausted"))
        return out
    if name == "SessionOpened":
        return [ev("session.opened")]
    if name == "SessionToppedUp":
        return [ev("session.topped_up")]
    if name == "SessionRedeemed":
        fee = (withdrawal_fees or {}).get(session or "")
        if fee is not None and amount is not None:
            data["fee"], data["net"] = fee, amount - fee
        return [ev("session.redeemed", mode="session", amount=amount)]
    if name == "SessionCloseRequested":
        return [ev("session.close_requested")]
    if name == "SessionClosed":
        return [ev("session.closed")]
    if name == "AllowanceCapChanged":
        raised = int(data.get("newCap", 0)) > int(data.get("oldCap", 0))
        return [ev("allowance.raised" if raised else "allowance.lowered")]
    return []


def withdrawal_fees_of(events: Iterable[tuple[str, Mapping[str, Any]]]) -> dict[str, int]:
    """session -> what the mint withheld of its payout, from one transaction's
    `SessionWithdrawn` events (name, fields); sessions paid without a fee are left out."""
    fees: dict[str, int] = {}
    for name, fields in events:
        fee = fields.get("fee")
        if name == "SessionWithdrawn" and isinstance(fee, int) and fee > 0:
            session = str(fields.get("session"))
            fees[session] = fees.get(session, 0) + fee
    return fees


def transfer_refused(
    subscription: str, plan: str, amount: int, period_end: int, program: str, error: str, at: int
) -> Event:
    """`subscription.renewal_failed` for a renewal the token program refused inside svc_billing
    (a Token-2022 transfer hook, a frozen destination): the transaction failed, so the chain
    recorded nothing and the crank reports it. One event per period (the retries of one
    period share its key)."""
    key = f"refused:{subscription}:{period_end}"
    return Event(
        id="evt_" + uuid.uuid5(uuid.NAMESPACE_URL, key).hex[:24],
        type="subscription.renewal_failed",
        created_at=at,
        data={
            "subscription": subscription,
            "plan": plan,
            "amount": amount,
            "reason": "TransferRefused",
            "program": program,
            "error": error[:300],
        },
        source="crank",
        chain_key=key,
        plan=plan,
        subscription=subscription,
    )


async def record_receipt(
    store: Store,
    receipt: Receipt,
    plan: str | None = None,
    at: int | None = None,
    provider_id: str | None = None,
) -> None:
    """Stores the lifecycle events of one of the facilitator's own transactions right away
    (the indexer finds them too; their chain keys make that second copy a no-op). `at` is
    the cluster's clock (what the indexer records as the block time); default: now.
    `provider_id` attributes them when the caller knows whose they are."""
    at = int(time.time()) if at is None else at
    fees = withdrawal_fees_of((e.name, e.data) for e in receipt.events)
    await store.events.add_many(
        [
            replace(ev, provider_id=provider_id) if provider_id else ev
            for index, event in enumerate(receipt.events)
            for ev in from_program_event(
                event.name,
                event.data,
                signature=receipt.signature,
                index=index,
                at=at,
                plan=plan,
                withdrawal_fees=fees,
            )  # fmt: skip
        ]
    )


INDEXER_CURSOR = "indexer:svc_billing"


async def index_once(
    rpc: AsyncClient,
    store: Store,
    program_id: Pubkey = PROGRAM_ID,
    backlog: Backlog | None = None,
) -> int:
    """Reads the program's transactions since the stored cursor and records their lifecycle
    events (queuing webhooks); returns how many new events were recorded. The cursor moves
    only after the events are stored, so a crash re-reads (harmlessly) rather than skips.
    A long history is read 500 transactions a pass; pass the same `backlog` to each so that
    each is listed once."""
    from svcpay.facilitator.indexer import read_events

    cursor = await store.cursors.get(INDEXER_CURSOR)
    found, new_cursor = await read_events(
        rpc, program_id, cursor, max_transactions=500, backlog=backlog
    )
    recorded = 0
    by_transaction: dict[str, list[tuple[str, Mapping[str, Any]]]] = {}
    for chain_event in found:
        by_transaction.setdefault(chain_event.signature, []).append(
            (chain_event.name, chain_event.fields)
        )
    fees = {sig: withdrawal_fees_of(events) for sig, events in by_transaction.items()}
    for chain_event in found:
        for ev in from_program_event(
            chain_event.name,
            chain_event.fields,
            signature=chain_event.signature,
            index=chain_event.index,
            at=chain_event.block_time or int(time.time()),
            withdrawal_fees=fees[chain_event.signature],
        ):
            recorded += await store.events.add(ev)
    if new_cursor and new_cursor != cursor:
        await store.cursors.set(INDEXER_CURSOR, new_cursor)
    return recorded
