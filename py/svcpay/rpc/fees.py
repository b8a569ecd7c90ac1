"""Priority fees from the cluster (issue 37; docs/adr/0036): a compute-unit price estimated
from `getRecentPrioritizationFees` over the accounts a transaction writes, at a percentile
of the last 150 slots, never under `floor` nor over `cap` (micro-lamports per compute unit),
and a compute-unit limit close to what the transaction uses (the fee paid is limit x price).

`PriorityFees.price(writable)` caches each account set's answer for `ttl` seconds, so a
burst of transactions makes one call; a node that cannot answer (a 429 past the transport's
budget, a node without the method) gives `floor`, logged at debug: a fee estimate is never
a reason not to send.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Confirmed
from solders.compute_budget import set_compute_unit_limit, set_compute_unit_price
from solders.hash import Hash
from solders.instruction import Instruction
from solders.message import MessageV0
from solders.pubkey import Pubkey
from solders.signature import Signature
from solders.transaction import VersionedTransaction

log = logging.getLogger("svcpay.rpc")

MAX_COMPUTE_UNIT_LIMIT = 1_400_000  # the runtime's per-transaction ceiling
LIMIT_MARGIN = 1.15  # what a simulation measured, plus this share (state moves between)
LIMIT_SLACK = 1_000  # and this many units
# The two ComputeBudget instructions and their program's key in a v0 message: 32 + 8 + 12,
# and 1 in case a compact length grows a byte. Packers keep this much free.
BUDGET_BYTES = 53


@dataclass(frozen=True)
class FeeSettings:
    """`percentile` of the recent per-slot fees (0-100), bounded by `floor` and `cap`."""

    percentile: float = 50.0
    floor: int = 1
    cap: int = 100_000

    def __post_init__(self) -> None:
        if not 0 <= self.percentile <= 100:
            raise ValueError(f"the priority-fee percentile must lie in 0..100: {self.percentile}")
        if not 0 <= self.floor <= self.cap:
            raise ValueError(
                f"priority fee floor {self.floor} and cap {self.cap}: 0 <= floor <= cap"
            )


def percentile_of(values: Sequence[int], percentile: float) -> int:
    """The `percentile`-th value of `values` (nearest rank); 0 when there are none."""
    if not values:
        return 0
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * percentile // 100))  # ceil, at least the first
    return int(ordered[min(len(ordered), int(rank)) - 1])


# How long a paying client's estimate is kept: it is a percentile of the last 150 slots
# (about 60 s), of which an estimate 10 s old still covers five sixths.
CLIENT_FEES_TTL_SECS = 10.0
# Estimates of `shared` PriorityFees: (endpoint URL, settings, accounts) -> (when, price).
_SHARED: dict[tuple[str, ...], tuple[float, int]] = {}


class PriorityFees:
    """Estimates, each kept `ttl` seconds. `shared` (paying clients): kept for every shared
    estimator of the same endpoint in the process, so that clients made per payment ask
    once per `ttl`, not once a payment."""

    def __init__(
        self,
        rpc: AsyncClient,
        settings: FeeSettings | None = None,
        *,
        ttl: float = 2.0,
        shared: bool = False,
    ) -> None:
        self.rpc, self.settings, self.ttl = rpc, settings or FeeSettings(), ttl
        s = self.settings
        endpoint = str(getattr(rpc._provider, "endpoint_uri", "")) if shared else ""
        # shared only with a known endpoint: two unknown ones must not mix their estimates
        self._cache: dict[tuple[str, ...], tuple[float, int]] = _SHARED if endpoint else {}
        self._scope = (endpoint, f"{s.percentile}/{s.floor}/{s.cap}") if endpoint else ()

    async def price(self, writable: Sequence[Pubkey]) -> int:
        """The compute-unit price for a transaction writing `writable`."""
        accounts = tuple(sorted({str(k) for k in writable}))[:128]
        key = self._scope + accounts
        now = time.monotonic()
        hit = self._cache.get(key)
        if hit is not None and now - hit[0] < self.ttl:
            return hit[1]
        s = self.settings
        try:
            answer = await self.rpc.get_recent_prioritization_fees(
                [Pubkey.from_string(k) for k in accounts]
            )
            fees = [int(f.prioritization_fee) for f in answer.value]
            price = min(s.cap, max(s.floor, percentile_of(fees, s.percentile)))
        except Exception as e:  # no estimate: the floor, and the send goes on
            log.debug("priority fees unavailable (%s): %d micro-lamports", e, s.floor)
            price = s.floor
        if len(self._cache) > 1024:
            self._cache.clear()
        self._cache[key] = (now, price)
        return price


async def unit_price(fees: PriorityFees | None, writable: Sequence[Pubkey], default: int) -> int:
    """The compute-unit price of a payment a client builds: `fees`' estimate over the
    accounts it writes that others write too (the fee payer, the payee), or `default` (the
    fixed price of before) without `fees`."""
    return default if fees is None else await fees.price(writable)


def compute_limit(units_consumed: int) -> int:
    """A compute-unit limit for a transaction a simulation measured at `units_consumed`."""
    return min(MAX_COMPUTE_UNIT_LIMIT, int(units_consumed * LIMIT_MARGIN) + LIMIT_SLACK)


def budget(limit: int, price: int) -> list[Instruction]:
    """The two ComputeBudget instructions that set `limit` and `price`."""
    return [set_compute_unit_limit(limit), set_compute_unit_price(price)]


async def simulated_units(rpc: AsyncClient, ixs: list[Instruction], payer: Pubkey) -> int | None:
    """The compute units `ixs` consume behind a compute budget, by simulation (the node puts
    its own blockhash in, and a price costs the same units whatever its value); None when the
    simulation fails or cannot be run (the send's preflight then says why)."""
    try:
        trial = [*budget(MAX_COMPUTE_UNIT_LIMIT, 1), *ixs]
        msg = MessageV0.try_compile(payer, trial, [], Hash.default())
        unsigned = VersionedTransaction.populate(
            msg, [Signature.default()] * msg.header.num_required_signatures
        )
        sim = (
            await rpc.simulate_transaction(
                unsigned, commitment=Confirmed, replace_recent_blockhash=True
            )
        ).value
    except Exception:  # no estimate
        return None
    if sim.err is not None or not sim.units_consumed:
        return None
    return int(sim.units_consumed)
