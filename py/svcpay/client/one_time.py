"""How the paying client pays a 402's one-time prices and subscriptions, in each dialect it
reads (svcpay's terms, x402 `exact`, MPP `charge`), on the RPC node's cluster only
(docs/adr/0038), each payment counted against the limits first (docs/adr/0031)."""

from __future__ import annotations

import base64
import os
from collections.abc import Callable, Sequence
from typing import TypeVar

import httpx
from solana.rpc.async_api import AsyncClient
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from solders.transaction import VersionedTransaction

from svcpay.client.spending import SpendingLimits, Spent
from svcpay.program.client import BillingClient
from svcpay.program.generated.types.subscription_status import Active
from svcpay.protocol.errors import NoAcceptableOption, PaymentError, WrongNetwork
from svcpay.protocol.headers import X_PAYMENT, X_SVC_SUB
from svcpay.protocol.mints import ChainMints, MintUnavailable
from svcpay.protocol.models import PaymentOption, PaymentRequired, ProtocolError
from svcpay.rpc.cluster import Cluster, cluster_of
from svcpay.rpc.fees import PriorityFees
from svcpay.schemes.mpp_charge import client as charge_client
from svcpay.schemes.svcpay_proof import client as proof_client
from svcpay.schemes.x402_exact import client as x402
from svcpay.schemes.x402_exact.client import AnyRequired, ExactSvmClient
from svcpay.schemes.x402_exact.expiry import expired_unpaid
from svcpay.schemes.x402_exact.wire import decode_json

T = TypeVar("T")


class OneTimePayments(SpendingLimits):
    """`PaymentAuth`'s one-time payments and subscriptions (it sets these attributes)."""

    owner: Keypair
    rpc: AsyncClient
    facilitator: httpx.AsyncClient | None
    billing: BillingClient | None
    subscriptions: dict[str, str]
    protocols: tuple[str, ...]
    mints: ChainMints
    fees: PriorityFees | None
    x402: ExactSvmClient
    charges: charge_client.ChargeClient
    networks: frozenset[str] | None
    _networks_given: frozenset[str] | None
    _cluster: Cluster | None

    def _offers(
        self, response: httpx.Response
    ) -> tuple[PaymentRequired | None, AnyRequired | None, list[charge_client.ChargeOffer]]:
        """What a 402 offers, in each dialect this client reads: svcpay's terms, x402's
        requirements, MPP's charges (None or empty when it offers none)."""
        try:
            terms: PaymentRequired | None = PaymentRequired.parse(response.content)
        except ProtocolError:
            terms = None
        try:
            required = x402.payment_required(response)
        except ProtocolError as e:
            if terms is None:
                raise NoAcceptableOption(f"the server's x402 terms are malformed: {e}") from e
            required = None
        charges = (
            charge_client.offers(response.headers.get_list("www-authenticate"))
            if "mpp" in self.protocols
            else []
        )
        return terms, required, charges

    async def _svcpay_header(self, terms: PaymentRequired, origin: str) -> tuple[str, str] | None:
        """The header paying svcpay's `terms`: a subscription held or taken (X-Svc-Sub) or a
        one-time proof (X-Payment), within the limits; None when neither can be had here."""
        for accepted in terms.accepts:
            await self._require_network(accepted.network, "the server's svcpay terms")
        sub_id = await self._subscription_for(terms, origin)
        if sub_id is not None:
            return X_SVC_SUB, sub_id
        option = self._one_time(terms)
        if option is None or not (self.facilitator or _named_facilitator(option)):
            return None
        cost = await self._cost(option.token, option.amount_units)
        self._reserve(cost, origin, option.token)
        return X_PAYMENT, await self._pay(option)

    async def _pay_mpp_here(self, charges: list[charge_client.ChargeOffer], origin: str) -> str:
        """`_pay_mpp` among the charges on the RPC node's cluster (WrongNetwork if none)."""
        cluster = await self._cluster_now()
        if not any(cluster.serves(c.network) for c in charges):
            await self._require_network(charges[0].network, "the server's MPP charge")
            cluster = await self._cluster_now()  # asked again: it serves charges[0]
        charges = [c for c in charges if cluster.serves(c.network)]
        return await self._pay_mpp(charges, origin)

    def _none_acceptable(
        self,
        terms: PaymentRequired | None,
        required: AnyRequired | None,
        charges: list[charge_client.ChargeOffer],
    ) -> NoAcceptableOption:
        """Why none of the 402's offers could be paid by this client."""
        if terms is not None:
            option = self._one_time(terms)
            if option is None:
                return NoAcceptableOption(
                    "the server only offers subscriptions this client may not create"
                    if all(o.is_subscription for o in terms.accepts)
                    else "the server asks for tokens this client may not pay in"
                )
            return NoAcceptableOption(
                "the server names no facilitator for its one-time price: give "
                "PaymentAuth a facilitator"
            )
        offered = [n for n, o in (("x402", required), ("mpp", charges)) if o]
        return NoAcceptableOption(
            f"the server offers {' and '.join(offered)}; this client pays with "
            f"{', '.join(self.protocols)}"
        )

    async def _subscription_for(self, terms: PaymentRequired, origin: str) -> str | None:
        for option in terms.accepts:
            if not option.is_subscription or option.svc is None or option.svc.plan_id is None:
                continue
            plan = option.svc.plan_id
            if plan in self.subscriptions:
                return self.subscriptions[plan]
            if self.billing is not None:
                # What subscribing charges is the plan's price on chain, not what the server
                # says: check they agree before reserving (and paying) it.
                on_chain = await self.billing.fetch_plan(Pubkey.from_string(plan))
                if on_chain is None:
                    raise PaymentError(f"the plan {plan} the server names does not exist")
                if (
                    on_chain.amount != option.amount_units
                    or str(on_chain.mint) != option.token
                    or (option.svc.interval and on_chain.period_secs != option.svc.interval)
                ):
                    raise PaymentError(
                        f"the server's terms for plan {plan} ({option.amount} of "
                        f"{option.token}) differ from the plan on chain ({on_chain.amount} of "
                        f"{on_chain.mint} every {on_chain.period_secs} s); not subscribing"
                    )
                held = await self.billing.held_subscription(plan, self.owner.pubkey())
                if held is not None:
                    address, sub = held
                    if not isinstance(sub.status, Active):
                        raise PaymentError(
                            f"the wallet's subscription {address} to plan {plan} is "
                            f"{type(sub.status).__name__.lower()}: resume or fund it "
                            "(a plan takes one live subscription per wallet)"
                        )
                    self.subscriptions[plan] = str(address)  # already paid for: use it
                    return str(address)
                if not self._allowed(str(on_chain.mint)):
                    continue  # not a token this client may pay in
                self._reserve(on_chain.amount, origin, str(on_chain.mint))
                sub_id = str(await self.billing.subscribe(plan, self.owner))
                self.subscriptions[plan] = sub_id
                return sub_id
        return None

    def _one_time(self, terms: PaymentRequired) -> PaymentOption | None:
        return next(
            (o for o in terms.accepts if not o.is_subscription and self._allowed(o.token)), None
        )

    async def _pay(self, option: PaymentOption) -> str:
        """The proof of paying `option` once, from the facilitator's /authorize."""
        if self.facilitator is not None:
            return await self._pay_through(self.facilitator, option)
        url = _named_facilitator(option)
        assert url is not None  # _flow pays through a named one only
        async with httpx.AsyncClient(base_url=url, timeout=60.0) as facilitator:
            return await self._pay_through(facilitator, option)

    async def _pay_through(self, facilitator: httpx.AsyncClient, option: PaymentOption) -> str:
        return await proof_client.authorize(
            facilitator, self.rpc, self.owner, option, mints=self.mints, fees=self.fees
        )

    async def _cost(self, mint: str, price: int) -> int:
        """What paying `price` of `mint` takes from the wallet: the price, or in a
        transfer-fee mint the gross that leaves the payee the price this epoch."""
        try:
            now = await self.mints.at_epoch(Pubkey.from_string(mint))
            return now.gross_for_net(price)
        except (MintUnavailable, ValueError) as e:
            raise PaymentError(f"cannot pay in {mint}: {e}") from e

    async def _pay_x402(self, required: AnyRequired, origin: str) -> tuple[str, str, Spent]:
        """The header paying `required` (x402 v2 or v1), within the limits, and its entry
        among what was spent."""
        networks = await self._x402_networks()
        usable = x402.solana_options(required, networks)
        if not usable and self.networks_from_node:  # asked again before refusing
            self.networks = None
            await self._cluster_now(fresh=True)
            networks = await self._x402_networks()
            usable = x402.solana_options(required, networks)
        if not usable:
            offered = ", ".join(sorted({f"{o.scheme} on {o.network}" for o in required.accepts}))
            if self.networks_from_node:
                cluster = await self._cluster_now()
                raise WrongNetwork(
                    f"the server asks for x402 payment ({offered or 'nothing'}), but the RPC "
                    f"node is {cluster.describe()}"
                )
            raise NoAcceptableOption(
                f"the server offers no x402 exact payment on {', '.join(sorted(networks))} "
                f"(it offers {offered or 'nothing'})"
            )
        option = self._pick(usable, lambda o: o.asset, x402.amount_of)
        try:
            cost = await self.x402.cost(option)
        except x402.CannotPay as e:
            raise PaymentError(f"cannot pay the server's x402 terms: {e}") from e
        entry = self._reserve(cost, origin, option.asset)
        try:
            payload = await self.x402.payload(option, required, payment_id=_payment_id())
        except x402.CannotPay as e:
            self._release(entry)  # nothing was signed
            raise PaymentError(f"cannot pay the server's x402 terms: {e}") from e
        return (*x402.payment_header(payload), entry)

    async def _x402_expired_unpaid(self, header: str) -> bool:
        """Whether the x402 payment in `header` (this client's) can never land and did not,
        so that a refusal of it may be answered by signing again (x402_exact.expiry)."""
        try:
            encoded = decode_json(header.encode())["payload"]["transaction"]
            tx = VersionedTransaction.from_bytes(base64.b64decode(encoded))
        except (ProtocolError, KeyError, TypeError, ValueError):
            return False
        lifetime = self.x402.lifetimes.get(str(tx.message.recent_blockhash))
        return await expired_unpaid(self.rpc, tx, lifetime)

    async def _pay_mpp(self, charges: list[charge_client.ChargeOffer], origin: str) -> str:
        """The `Authorization: Payment` value paying the first charge this client may pay
        (pull before push, as the server ordered them), within the limits."""
        offer = self._pick(charges, lambda c: c.mint, lambda c: c.amount)
        try:
            cost = await self.charges.cost(offer)
        except charge_client.CannotPay as e:
            raise PaymentError(f"cannot pay the server's MPP charge: {e}") from e
        entry = self._reserve(cost, origin, offer.mint)
        try:
            return await self.charges.credential(offer)
        except Exception as e:
            # a pull sent nothing; a push that can never land paid nothing
            if offer.pull or (isinstance(e, charge_client.PushFailed) and e.nothing_paid):
                self._release(entry)
            raise PaymentError(f"cannot pay the server's MPP charge: {e}") from e

    def _pick(
        self, offers: Sequence[T], asset: Callable[[T], str], amount: Callable[[T], int]
    ) -> T:
        """The server's first choice among `offers` in a token this client may pay in, within
        the per-request limit (else the first such, which the limits then refuse)."""
        allowed = [o for o in offers if self._allowed(asset(o))]
        if not allowed:
            assets = ", ".join(sorted({asset(o) for o in offers}))
            raise NoAcceptableOption(
                f"the server asks for tokens this client may not pay in: {assets}"
            )
        return next((o for o in allowed if amount(o) <= self.max_per_request), allowed[0])

    @property
    def networks_from_node(self) -> bool:
        return self._networks_given is None

    async def _cluster_now(self, *, fresh: bool = False) -> Cluster:
        """The cluster the RPC node is on (its genesis hash, read once per endpoint and
        process; `fresh` reads it again)."""
        if self._cluster is None or fresh:
            self._cluster = await cluster_of(self.rpc, remembered=not fresh)
        return self._cluster

    async def _require_network(self, network: str, what: str) -> None:
        """Raises WrongNetwork, naming both, unless `network` is the RPC node's cluster
        (asked again before refusing: what is remembered may be older than the node)."""
        cluster = await self._cluster_now()
        if not cluster.serves(network):
            cluster = await self._cluster_now(fresh=True)
        if not cluster.serves(network):
            raise WrongNetwork(f"{what} is on {network}, but the RPC node is {cluster.describe()}")

    async def _x402_networks(self) -> frozenset[str]:
        if self.networks is None:
            cluster = await self._cluster_now()
            self.networks = frozenset(n for n in (cluster.name, cluster.presented_as) if n)
        return self.networks


def _named_facilitator(option: PaymentOption) -> str | None:
    return option.svc.facilitator if option.svc is not None else None


def _payment_id() -> str:
    """A payment-identifier id (x402's extension), sent when the server declares it."""
    return "pay_" + os.urandom(16).hex()
