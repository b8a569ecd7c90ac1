"""Reading everything the billing program did on chain, as typed events, from a cursor on.

The facilitator learns of its own transactions from their receipts; this finds the rest
(a subscriber pausing or cancelling directly, anyone's crank renewing, another facilitator
deducting): it lists the program's transactions with getSignaturesForAddress, newest first,
in pages back to the cursor (`until`, then `before` the last of each page), fetches each
successful one oldest first and decodes the Anchor events in its logs.

Only events our program emitted count: a transaction's logs nest ("Program X invoke [n]" ...
"Program X success"/"failed"), and a `Program data:` line belongs to the program on top of
that stack, so another program cannot pass its data off as ours, and our events are found
when another program invokes ours. Events are numbered in log order within their
transaction (`index`, the same order as a receipt's `events`), which with the signature
makes a stable key (`ChainEvent.key`).

    batch = await read_events(rpc, PROGRAM_ID, cursor)
    for event in batch.events: ...   # oldest first
    cursor = batch.cursor            # store it: the next call returns only what is newer

A cursor the node does not know (another cluster, or pruned history) bounds nothing: agave
answers an unknown `until` with -32020 "Transaction ... not found", and the read starts again
from everything the node holds; consumers key events by `ChainEvent.key` and store each once.
A node purging its oldest slots answers "slot cleaned up" while the purge runs: that page is
asked again (CLEANED_UP_TRIES).
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, TypeAlias

from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Commitment, Confirmed
from solana.rpc.core import RPCException
from solders.pubkey import Pubkey
from solders.rpc.responses import GetSignaturesForAddressResp
from solders.signature import Signature

from svcpay.program.events import decode_logs

log = logging.getLogger(__name__)

MAX_PAGE = 1000  # getSignaturesForAddress's largest page
TRANSACTION_NOT_FOUND = -32020  # agave's answer to a before/until signature it does not hold
# A node purging its oldest slots (agave's ledger cleanup: solana-test-validator keeps 10,000
# shreds, an RPC node without long-term storage its --limit-ledger-size) answers a listing
# that reaches them "slot cleaned up" from when it marks them gone until their purge is done.
# The same listing succeeds after it, so a page is asked again, this many times in all, the
# pause doubling from CLEANED_UP_PAUSE_SECS (6.3 s in all); then the pass fails and the
# indexer's loop retries it on its backoff.
CLEANED_UP_TRIES = 7
CLEANED_UP_PAUSE_SECS = 0.1

JsonValue: TypeAlias = str | int | bool | None | list["JsonValue"] | dict[str, "JsonValue"]

_INVOKE = re.compile(r"^Program (\w+) invoke \[(\d+)\]$")
_RETURN = re.compile(r"^Program (\w+) (?:success$|failed: )")
_DATA = "Program data: "


@dataclass(frozen=True)
class ChainEvent:
    """One event of the program, from a successful transaction.

    `fields` are the event's fields by their snake_case names, JSON-safe: public keys as
    base58 strings, integers as ints, enum variants by name ("Active", "Deprecated")."""

    signature: str
    slot: int
    block_time: int | None
    index: int  # position among this transaction's events of the program, from 0
    name: str  # the IDL name: "SubscriptionCreated", "PlanChanged", ...
    fields: dict[str, JsonValue]

    @property
    def key(self) -> str:
        """`<signature>:<index>`: the same event read twice has the same key."""
        return f"{self.signature}:{self.index}"


class IndexBatch(NamedTuple):
    """New events, oldest first, and the cursor to pass next time (the newest transaction
    read, failed ones included; the old cursor when nothing was new)."""

    events: list[ChainEvent]
    cursor: str | None


def program_data_lines(logs: Sequence[str], program_id: Pubkey | str) -> list[str]:
    """The `Program data:` lines `program_id` itself logged, at any invocation depth."""
    program = str(program_id)
    stack: list[str] = []
    out = []
    for line in logs:
        if line.startswith(_DATA):
            if stack and stack[-1] == program:
                out.append(line)
        elif invoke := _INVOKE.match(line):
            del stack[int(invoke.group(2)) - 1 :]  # a depth is authoritative: resync to it
            stack.append(invoke.group(1))
        elif (done := _RETURN.match(line)) and stack and stack[-1] == done.group(1):
            stack.pop()
    return out


def events_in_logs(
    logs: Sequence[str],
    program_id: Pubkey | str,
    *,
    signature: str,
    slot: int,
    block_time: int | None,
) -> list[ChainEvent]:
    """The program's events in one transaction's logs, in order."""
    return [
        ChainEvent(signature, slot, block_time, index, event.name, _json_fields(event.data))
        for index, event in enumerate(decode_logs(program_data_lines(logs, program_id)))
    ]


async def read_events(
    rpc: AsyncClient,
    program_id: Pubkey,
    cursor: str | None,
    *,
    page_size: int = MAX_PAGE,
    max_transactions: int | None = None,
    concurrency: int = 8,
    commitment: Commitment = Confirmed,
    backlog: Backlog | None = None,
) -> IndexBatch:
    """Events of the program's transactions newer than `cursor` (a signature; None: from the
    first one the node holds), oldest first, with the new cursor.

    `max_transactions` caps how many (oldest) new transactions one call reads, for a long
    backfill in steps (give them one `Backlog`); the cursor then stops at the last one read.
    A transaction listed but not yet served by getTransaction ends the batch early, its
    cursor before it."""
    if not 1 <= page_size <= MAX_PAGE:
        raise ValueError(f"page_size must be within 1..{MAX_PAGE}")
    where = f"{program_id} {commitment}"
    listed = await _listed(rpc, program_id, cursor, page_size, commitment, backlog, where)
    signatures = listed if max_transactions is None else listed[:max_transactions]
    events: list[ChainEvent] = []
    read = 0  # how many of `listed` the cursor has passed
    for start in range(0, len(signatures), concurrency):
        chunk = signatures[start : start + concurrency]
        wanted = [(sig, failed) for sig, failed in chunk if not failed]
        fetched = await asyncio.gather(*(_transaction(rpc, sig, commitment) for sig, _ in wanted))
        found = dict(zip([sig for sig, _ in wanted], fetched, strict=True))
        for sig, failed in chunk:
            if not failed:
                tx = found[sig]
                if tx is None:  # listed, not yet served: stop before it, read it next time
                    # and list afresh then: a node answers null too for a transaction in a
                    # slot it purged since, which a fresh listing no longer holds.
                    return _ended(events, cursor, [], backlog, where)
                slot, block_time, logs = tx
                events += events_in_logs(
                    logs, program_id, signature=sig, slot=slot, block_time=block_time
                )
            cursor = sig
            read += 1
    return _ended(events, cursor, listed[read:], backlog, where)


@dataclass
class Backlog:
    """What read_events listed after the cursor it returned and has not read yet, oldest
    first. Pass the same Backlog to each call: a call given that cursor then lists only what
    is newer than the backlog, so a backfill of N transactions in steps of
    `max_transactions` lists each signature once, not everything after the cursor on every
    step (about N²/2/max_transactions). Any other cursor (another instance moved the stored
    one) lists afresh, and so does a call after one that found a listed transaction not
    served yet (getTransaction's null: not yet, or purged since)."""

    cursor: str | None = None
    pending: list[tuple[str, bool]] = field(default_factory=list)  # (signature, failed)
    listing: str = ""  # the program and commitment they were listed for


def _ended(
    events: list[ChainEvent],
    cursor: str | None,
    unread: list[tuple[str, bool]],
    backlog: Backlog | None,
    listing: str,
) -> IndexBatch:
    if backlog is not None:
        backlog.cursor, backlog.pending, backlog.listing = cursor, unread, listing
    return IndexBatch(events, cursor)


async def _listed(
    rpc: AsyncClient,
    program_id: Pubkey,
    cursor: str | None,
    page_size: int,
    commitment: Commitment,
    backlog: Backlog | None,
    listing: str,
) -> list[tuple[str, bool]]:
    """(signature, failed) of every transaction after `cursor`, oldest first: the backlog's
    and those newer than it, when the backlog follows `cursor` in the same listing."""
    if (
        backlog is not None
        and backlog.pending
        and (backlog.cursor, backlog.listing) == (cursor, listing)
    ):
        newer = await _after(rpc, program_id, backlog.pending[-1][0], page_size, commitment)
        if newer is not None:  # else the node no longer holds the backlog's newest
            return backlog.pending + newer[::-1]
    return (await _new_signatures(rpc, program_id, cursor, page_size, commitment))[::-1]


async def _new_signatures(
    rpc: AsyncClient,
    program_id: Pubkey,
    cursor: str | None,
    page_size: int,
    commitment: Commitment,
) -> list[tuple[str, bool]]:
    """(signature, failed) of every transaction after `cursor`, newest first; of every one
    the node holds when it does not hold `cursor`."""
    found = await _after(rpc, program_id, cursor, page_size, commitment)
    if found is None:  # the cursor bounds nothing: read it all
        found = await _after(rpc, program_id, None, page_size, commitment)
    assert found is not None  # no `until`, no "not found"
    return found


async def _after(
    rpc: AsyncClient,
    program_id: Pubkey,
    cursor: str | None,
    page_size: int,
    commitment: Commitment,
) -> list[tuple[str, bool]] | None:
    """(signature, failed) of every transaction after `cursor`, newest first; None when the
    node does not hold `cursor`."""
    until = Signature.from_string(cursor) if cursor else None
    before: Signature | None = None
    out: list[tuple[str, bool]] = []
    while True:
        reply = await _list_page(rpc, program_id, before, until, page_size, commitment)
        if not isinstance(reply, GetSignaturesForAddressResp):
            # solders parses an error code it has no type for (-32020) as the bare code
            if until is not None and reply == TRANSACTION_NOT_FOUND:
                return None
            raise RPCException(f"getSignaturesForAddress failed: {reply}")
        page = reply.value
        out += [(str(s.signature), s.err is not None) for s in page]
        if len(page) < page_size:
            return out
        before = page[-1].signature


async def _list_page(
    rpc: AsyncClient,
    program_id: Pubkey,
    before: Signature | None,
    until: Signature | None,
    page_size: int,
    commitment: Commitment,
) -> object:
    """One getSignaturesForAddress page, asked again while the node answers that it is
    purging the slots the page reaches (CLEANED_UP_TRIES)."""

    def page() -> Any:
        return rpc.get_signatures_for_address(
            program_id, before=before, until=until, limit=page_size, commitment=commitment
        )

    pause = CLEANED_UP_PAUSE_SECS
    for _ in range(CLEANED_UP_TRIES - 1):
        try:
            return await page()
        except RPCException as e:
            if not is_cleaned_up(e):
                raise
            log.info("the node is purging its oldest slots (%s); listing again in %.1f s", e, pause)
            await asyncio.sleep(pause)
            pause *= 2
    return await page()


def is_cleaned_up(error: RPCException) -> bool:
    """Whether `error` is agave's answer for slots its ledger cleanup has marked gone:
    "slot cleaned up" (a blockstore read racing the purge) or -32001 "Block N cleaned up"."""
    return "cleaned up" in str(error)


async def _transaction(
    rpc: AsyncClient, signature: str, commitment: Commitment
) -> tuple[int, int | None, list[str]] | None:
    """(slot, block time, logs) of a transaction, or None if the node does not serve it."""
    reply = await rpc.get_transaction(
        Signature.from_string(signature),
        "json",
        commitment=commitment,
        max_supported_transaction_version=0,
    )
    tx = reply.value
    if tx is None:
        return None
    meta = tx.transaction.meta
    logs = list(meta.log_messages or []) if meta is not None else []
    return tx.slot, tx.block_time, logs


def _json_fields(data: Mapping[str, Any]) -> dict[str, JsonValue]:
    return {name: _json(value) for name, value in data.items()}


def _json(value: Any) -> JsonValue:
    if isinstance(value, Pubkey):
        return str(value)
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, bytes):
        return list(value)
    if isinstance(value, Mapping):
        return {str(k): _json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json(v) for v in value]
    return type(value).__name__  # an enum variant of the IDL: Active, Deprecated, ...
