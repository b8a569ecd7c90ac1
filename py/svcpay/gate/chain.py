"""The gate's view of subscriptions, read from the chain, and a meter that deducts usage;
`ChainMints` (re-exported) reads a Token-2022 mint for the one-time checks (`mints=`)."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from solana.rpc.core import RPCException
from solders.keypair import Keypair
from solders.pubkey import Pubkey

from svcpay.program.client import BillingClient, status_name
from svcpay.program.generated.accounts.session import Session
from svcpay.program.generated.types.session_status import Open
from svcpay.program.session_client import Sessions
from svcpay.protocol.mints import ChainMints
from svcpay.protocol.mpp import ChallengeIssuer
from svcpay.protocol.pricing import Terms
from svcpay.rpc_errors import rpc_unreachable
from svcpay.schemes.session.ledger import VoucherLedger
from svcpay.schemes.session.server import (
    Reporter,
    SessionPolicy,
    SessionScheme,
    SessionsUnavailable,
)
from svcpay.schemes.subscription.server import SubscriptionsUnavailable

__all__ = [
    "ChainMeter",
    "ChainMints",
    "ChainSessions",
    "ChainSubscriptions",
    "SubscriptionState",
    "read_or_unavailable",
    "session_scheme",
]


@dataclass(frozen=True)
class SubscriptionState:
    plan: str
    status: str
    allowance_remaining: int | None


T = TypeVar("T")


async def read_or_unavailable(read: Awaitable[T], unavailable: Callable[[str], Exception]) -> T:
    """`read`'s result; `unavailable(reason)` raised instead when the RPC node refused or
    could not be reached (the gate answers 503 then), any other error as it is."""
    try:
        return await read
    except RPCException as e:  # the node answered with an error (e.g. behind, unhealthy)
        raise unavailable(f"the RPC node refused: {e}") from e
    except Exception as e:
        reason = rpc_unreachable(e)
        if reason is None:
            raise
        raise unavailable(f"the RPC node is unreachable ({reason})") from e


# An ACTIVE subscription whose period ended this long ago without a renewal reads as
# "Overdue": the crank renews within a minute or two of the period's end, so a renewal this
# late failed in a way the chain could not record (a Token-2022 transfer hook refused it, the
# token program refused the transfer), or the crank has been down this long.
OVERDUE_AFTER_SECS = 3600
CLOCK_TTL_SECS = 10.0  # how long the cluster's clock, once read, is advanced locally


class ChainSubscriptions:
    """Subscription states from the chain, cached for `ttl` seconds (a gate sees thousands
    of requests per subscription; a status change shows within `ttl`). An active
    subscription not renewed `overdue_after` seconds after its period ended reads as
    "Overdue" (the gate refuses it, as it refuses a past-due one)."""

    def __init__(
        self, client: BillingClient, ttl: float = 2.0, overdue_after: int = OVERDUE_AFTER_SECS
    ) -> None:
        self.client, self.ttl, self.overdue_after = client, ttl, overdue_after
        self._cache: dict[str, tuple[float, SubscriptionState | None]] = {}
        self._clock: tuple[float, int] | None = None  # (monotonic, the cluster's unix time)

    async def lookup(self, subscription_id: str) -> SubscriptionState | None:
        hit = self._cache.get(subscription_id)
        if hit and time.monotonic() - hit[0] < self.ttl:
            return hit[1]
        state = await read_or_unavailable(self._read(subscription_id), SubscriptionsUnavailable)
        self._cache[subscription_id] = (time.monotonic(), state)
        return state

    async def _read(self, subscription_id: str) -> SubscriptionState | None:
        sub = await self.client.fetch_subscription(subscription_id)
        if sub is None:
            return None
        status = status_name(sub)
        if status == "Active" and await self._overdue(sub.current_period_end):
            status = "Overdue"
        remaining = None
        if sub.has_allowance:
            allowance = await self.client.fetch_allowance(subscription_id)
            remaining = None if allowance is None else max(allowance.cap - allowance.used, 0)
        return SubscriptionState(str(sub.plan), status, remaining)

    async def _overdue(self, period_end: int) -> bool:
        """Whether the cluster's clock is `overdue_after` past `period_end`. The clock is read
        at most every CLOCK_TTL_SECS and advanced by this machine's in between (a cluster's
        clock may differ from this machine's, a local validator's by days)."""
        now = time.monotonic()
        if self._clock is None or now - self._clock[0] >= CLOCK_TTL_SECS:
            self._clock = (now, await self.client.chain_time())
        chain_now = self._clock[1] + int(now - self._clock[0])
        return chain_now > period_end + self.overdue_after

    def invalidate(self, subscription_id: str) -> None:
        self._cache.pop(subscription_id, None)


class ChainMeter:
    """Deducts each recorded use at once, signed by the plan's billing authority.
    (Batching deductions to save transactions is the facilitator's usage meter, issue 6.)"""

    def __init__(self, client: BillingClient, authority: Keypair) -> None:
        self.client, self.authority = client, authority
        self._deducting: dict[str, int] = {}

    async def record(self, subscription_id: str, amount: int) -> None:
        # Pending while its deduction is on its way (counted before the first await).
        self._deducting[subscription_id] = self._deducting.get(subscription_id, 0) + amount
        try:
            await self.client.deduct_allowance(subscription_id, amount, self.authority)
        finally:
            self._deducting[subscription_id] -= amount
            if not self._deducting[subscription_id]:
                del self._deducting[subscription_id]

    def pending(self, subscription_id: str) -> int:
        return self._deducting.get(subscription_id, 0)


class ChainSessions:
    """Open sessions' accounts from the chain, cached for `ttl` seconds: a gate takes
    thousands of vouchers per session between reads. A read asked `fresh` (a voucher past the
    cached deposit: a top-up?) happens at most once per `min_refresh` seconds per session, so
    a client cannot make the gate call the RPC node per request. Sessions that are closing or
    closed, or that are not `svc_billing`'s, read as None."""

    def __init__(
        self,
        client: BillingClient,
        ttl: float = 5.0,
        min_refresh: float = 1.0,
        max_entries: int = 100_000,
    ) -> None:
        self.program_id = client.program_id
        self.sessions = Sessions(client)
        self.ttl, self.min_refresh, self.max_entries = ttl, min_refresh, max_entries
        self._cache: dict[Pubkey, tuple[float, Session | None]] = {}
        self._fresh_at: dict[Pubkey, float] = {}  # the last read asked `fresh`

    async def lookup(self, channel: Pubkey, *, fresh: bool = False) -> Session | None:
        hit = self._cache.get(channel)
        now = time.monotonic()
        if hit is not None:
            if fresh:
                if now - self._fresh_at.get(channel, -self.min_refresh) < self.min_refresh:
                    return hit[1]
                self._fresh_at[channel] = now
            elif now - hit[0] < self.ttl:
                return hit[1]
        found = await read_or_unavailable(self.sessions.fetch(channel), SessionsUnavailable)
        state = found if found is not None and isinstance(found.status, Open) else None
        if len(self._cache) >= self.max_entries:
            self._cache.clear()  # crude, bounded: unknown channels cannot grow it for ever
            self._fresh_at.clear()
        self._cache[channel] = (time.monotonic(), state)
        return state


def session_scheme(
    terms: Terms,
    client: BillingClient,
    secret: bytes,
    ledger: VoucherLedger,
    *,
    realm: str = "svcpay",
    policy: SessionPolicy | None = None,
    ttl: float = 5.0,
    clock: Callable[[], float] = time.time,
    reporter: Reporter | None = None,
) -> SessionScheme:
    """The gate's `sessions=`: vouchers checked against sessions read from the chain through
    `client`, taken in `ledger`; challenges bound under `secret` (at least 16 bytes; every
    worker of one gate shares it, like the memo secret)."""
    if len(secret) < 16:
        raise ValueError("the challenge secret must be at least 16 bytes")
    return SessionScheme(
        terms,
        ChallengeIssuer(secret, realm),
        ChainSessions(client, ttl),
        ledger,
        policy,
        clock,
        reporter,
    )
