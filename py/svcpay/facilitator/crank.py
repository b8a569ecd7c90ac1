"""The billing crank: collect every due subscription, several per transaction.

`collect` never fails for reasons the subscriber controls (a failed renewal is recorded as
past due), so a packed transaction fails only when something else went wrong, most often
another crank instance renewing one of its subscriptions first (`NotDue`). Then each of its
subscriptions is retried alone, so one bad entry never blocks the rest. Running several
cranks at once is safe: the program refuses a second collection in a period.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from solders.hash import Hash
from solders.instruction import Instruction
from solders.keypair import Keypair
from solders.message import MessageV0
from solders.pubkey import Pubkey

from svcpay.program import instructions
from svcpay.program.client import BillingClient, Receipt, TransactionError
from svcpay.program.errors import ProgramError

log = logging.getLogger("svcpay.crank")
MAX_TX_BYTES = 1232  # Solana's packet limit for a serialized transaction


@dataclass
class CrankSummary:
    due: int = 0
    renewed: int = 0
    renewal_failed: int = 0
    ended: int = 0
    skipped: int = 0  # refused (e.g. already collected by another instance)
    transactions: int = 0
    collected: int = 0  # base units
    errors: list[str] = field(default_factory=list)

    def absorb(self, receipt: Receipt) -> None:
        self.transactions += 1
        for event in receipt.events:
            if event.name == "SubscriptionRenewed":
                self.renewed += 1
                self.collected += int(event.data["amount"])
            elif event.name == "RenewalFailed":
                self.renewal_failed += 1
            elif event.name == "SubscriptionEnded":
                self.ended += 1


def pack(
    items: list[tuple[Pubkey, Instruction]], payer: Pubkey, limit: int = MAX_TX_BYTES
) -> list[list[tuple[Pubkey, Instruction]]]:
    """Greedy groups of (subscription, instruction) whose transaction fits in `limit` bytes."""
    groups: list[list[tuple[Pubkey, Instruction]]] = []
    for item in items:
        if groups and _size([ix for _, ix in [*groups[-1], item]], payer) <= limit:
            groups[-1].append(item)
        else:
            groups.append([item])
    return groups


def _size(ixs: list[Instruction], payer: Pubkey) -> int:
    message = MessageV0.try_compile(payer, ixs, [], Hash.default())
    return 1 + 64 * message.header.num_required_signatures + len(bytes(message))


async def run_once(
    client: BillingClient,
    payer: Keypair,
    plan: Pubkey | None = None,
    now: int | None = None,
    progress: Callable[[CrankSummary], None] | None = None,
) -> CrankSummary:
    """Collects every subscription due at `now` (of `plan`, or all) and returns a summary;
    `progress` is called after each transaction."""
    summary = CrankSummary()
    due = await client.due_subscriptions(plan, now)
    summary.due = len(due)
    for group in pack(
        [(key, instructions.collect_subscription(sub)) for key, sub in due], payer.pubkey()
    ):
        try:
            summary.absorb(await client.send([ix for _, ix in group], [payer]))
        except (ProgramError, TransactionError) as e:
            if len(group) > 1:
                log.info("a packed collect failed (%s); retrying %d one by one", e, len(group))
            for key, ix in group if len(group) > 1 else []:
                try:
                    summary.absorb(await client.send([ix], [payer]))
                except (ProgramError, TransactionError) as single:
                    summary.skipped += 1
                    summary.errors.append(f"{key}: {single}")
            if len(group) == 1:
                summary.skipped += 1
                summary.errors.append(f"{group[0][0]}: {e}")
        if progress:
            progress(summary)
    return summary
