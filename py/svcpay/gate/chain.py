"""The gate's view of subscriptions, read from the chain, and a meter that deducts usage."""

from __future__ import annotations

import time
from dataclasses import dataclass

from solana.rpc.core import RPCException
from solders.keypair import Keypair

from svcpay.program.client import BillingClient, status_name
from svcpay.rpc_errors import rpc_unreachable
from svcpay.schemes.subscription.server import SubscriptionsUnavailable


@dataclass(frozen=True)
class SubscriptionState:
    plan: str
    status: str
    allowance_remaining: int | None


class ChainSubscriptions:
    """Subscription states from the chain, cached for `ttl` seconds (a gate sees thousands
    of requests per subscription; a status change shows within `ttl`)."""

    def __init__(self, client: BillingClient, ttl: float = 2.0) -> None:
        self.client, self.ttl = client, ttl
        self._cache: dict[str, tuple[float, SubscriptionState | None]] = {}

    async def lookup(self, subscription_id: str) -> SubscriptionState | None:
        hit = self._cache.get(subscription_id)
        if hit and time.monotonic() - hit[0] < self.ttl:
            return hit[1]
        try:
            state = await self._read(subscription_id)
        except RPCException as e:  # the node answered with an error (e.g. behind, unhealthy)
            raise SubscriptionsUnavailable(f"the RPC node refused: {e}") from e
        except Exception as e:
            reason = rpc_unreachable(e)
            if reason is None:
                raise
            raise SubscriptionsUnavailable(f"the RPC node is unreachable ({reason})") from e
        self._cache[subscription_id] = (time.monotonic(), state)
        return state

    async def _read(self, subscription_id: str) -> SubscriptionState | None:
        sub = await self.client.fetch_subscription(subscription_id)
        if sub is None:
            return None
        remaining = None
        if sub.has_allowance:
            allowance = await self.client.fetch_allowance(subscription_id)
            remaining = None if allowance is None else max(allowance.cap - allowance.used, 0)
        return SubscriptionState(str(sub.plan), status_name(sub), remaining)

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
