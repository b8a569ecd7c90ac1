"""The paying client: an httpx `Auth` that answers 402 by paying, and `pay()` for one call.

Like httpx's Digest auth, the flow is `response = yield request`: a 402 is a 401 with money.
It speaks four dialects, under the same spending limits (checked before any money moves);
when a 402 offers several one-time ways to pay it takes them in the order of `protocols`
(default: svcpay's own, then x402, then MPP `charge`; sessions first when offered):

- MPP's `session` intent on svc_billing (a `WWW-Authenticate: Payment ... intent="session"`
  challenge; docs/adr/0025), preferred when offered (unless `sessions=False`): it opens a
  session with the offer's suggested deposit (capped by `max_per_request`; the deposit counts
  against the limits), signs one voucher per request in `Authorization: Payment`, tops up
  when the deposit runs low, and asks to close its sessions on `aclose()`/`close()` (the
  rest of the deposit comes back after the dispute window: `svcpay session close`).

- svcpay's own 402 body (preferred when present: it also offers subscriptions). It prefers
  a subscription when the terms offer one and the client holds (or may create) a
  subscription to that plan; otherwise it pays once: builds the transfer, signs it as token
  authority (the facilitator pays the fee), gets the proof from `POST /authorize` of the
  configured facilitator (or the one the terms name), and retries with `X-PAYMENT`.
- MPP's `charge` intent (a `WWW-Authenticate: Payment ... intent="charge"` challenge):
  it signs the transfer with the server as fee payer and sends it in `Authorization:
  Payment` (or, for a challenge without a fee payer, sends it itself and hands over the
  signature); the server's `Payment-Receipt` names the transaction.
- x402 (a `PAYMENT-REQUIRED` header, v2, or a body with `x402Version: 1`): it picks an
  `exact` option on a Solana network it pays on, signs the transfer to ATA(payTo) and
  retries with `PAYMENT-SIGNATURE` (v2) or `X-PAYMENT` (v1); the server settles it, so no
  facilitator is called. `settlement(response)` reads the server's `PAYMENT-RESPONSE`; a
  402 to the paid request raises `PaymentRefused` with the server's reason.

The schemes' client sides build the payments (`svcpay.schemes.svcpay_proof.client`,
`svcpay.schemes.x402_exact.client`); this module chooses among the terms, keeps the limits
and retries. A one-time price is what the payee receives: in a Token-2022 mint with a
transfer fee the wallet sends more (the gross that nets the price this epoch; the mints
are read once a minute through one `ChainMints`), and the limits count what it sends
(docs/adr/0031).

It works with `httpx.AsyncClient` and `httpx.Client` alike: the logic is one async generator
(`_flow`); the sync flow runs its steps on a private event loop in a daemon thread.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections import deque
from collections.abc import AsyncGenerator, Awaitable, Collection, Generator, Sequence
from dataclasses import dataclass
from typing import TypeVar

import httpx
from solana.rpc.async_api import AsyncClient
from solders.keypair import Keypair
from solders.pubkey import Pubkey

from svcpay import stopping
from svcpay.program.client import BillingClient
from svcpay.program.generated.program_id import PROGRAM_ID
from svcpay.program.generated.types.subscription_status import Active
from svcpay.program.session_client import Sessions
from svcpay.protocol import mpp
from svcpay.protocol.errors import (
    InvalidPaymentProof,
    NoAcceptableOption,
    OriginNotAllowed,
    PaymentError,
    PaymentRefused,
    SpendingLimitExceeded,
    WrongNetwork,
)
from svcpay.protocol.headers import X_PAYMENT, X_SVC_SUB
from svcpay.protocol.mints import ChainMints, MintUnavailable
from svcpay.protocol.models import PaymentOption, PaymentRequired, ProtocolError
from svcpay.rpc.cluster import Cluster, cluster_of
from svcpay.schemes.mpp_charge import client as charge_client
from svcpay.schemes.session.client import SessionOffer, Tab, Tabs, tab_key
from svcpay.schemes.svcpay_proof import client as proof_client
from svcpay.schemes.x402_exact import client as x402
from svcpay.schemes.x402_exact.wire import CAIP2, svcpay_network

T = TypeVar("T")


PROTOCOLS = ("svcpay", "x402", "mpp")  # the default preference, most preferred first
DAY_SECS = 86_400


@dataclass(frozen=True)
class SpendingPolicy:
    """What a paying client may spend, beside `PaymentAuth`'s limits (pay-kit's client
    permissions, plus a daily budget). None: no restriction of that kind.

    Args:
        origins: the origins ("https://api.example.com", scheme://host[:port]) it may pay.
        assets: the mints it may pay in.
        max_per_payment: base units one payment (or one deposit, one first period) may cost.
        max_per_origin_per_day: base units paid to one origin in the last 24 hours, at most.
        daily_budget: base units paid to every origin in the last 24 hours, at most.
    """

    origins: frozenset[str] | None = None
    assets: frozenset[str] | None = None
    max_per_payment: int | None = None
    max_per_origin_per_day: int | None = None
    daily_budget: int | None = None

    def __post_init__(self) -> None:
        for name in ("origins", "assets"):
            value = getattr(self, name)
            if isinstance(value, str):
                raise TypeError(f"SpendingPolicy.{name} is a set of strings, not one string")
            if value is not None:
                object.__setattr__(self, name, frozenset(value))
        if self.origins is not None:
            object.__setattr__(self, "origins", frozenset(_normal(o) for o in self.origins))
        for name in ("max_per_payment", "max_per_origin_per_day", "daily_budget"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"SpendingPolicy.{name} cannot be negative")


@dataclass(frozen=True)
class _Spent:
    at: float  # time.monotonic()
    amount: int
    origin: str


class PaymentAuth(httpx.Auth):
    requires_response_body = True

    def __init__(
        self,
        owner: Keypair,
        *,
        rpc: AsyncClient,
        max_per_request: int,
        facilitator: httpx.AsyncClient | None = None,
        max_per_period: int | None = None,
        period_secs: int = 86_400,
        subscriptions: dict[str, str] | None = None,
        billing: BillingClient | None = None,
        retries: int = 2,
        networks: Collection[str] | None = None,
        allowed_tokens: Collection[str] | None = None,
        sessions: bool = True,
        session_deposit: int | None = None,
        session_secs: int = 86_400,
        tabs: Tabs | None = None,
        protocols: Sequence[str] = ("svcpay", "x402", "mpp"),
        policy: SpendingPolicy | None = None,
    ) -> None:
        """Args:
        owner: the wallet that pays (token authority of its associated token accounts).
        rpc: the cluster the wallet pays on.
        max_per_request: most base units one payment (or one subscription's first period)
            may cost; max_per_period / period_secs: most in all within a sliding window.
        facilitator: svcpay's facilitator for one-time svcpay payments; None: the one the
            402's terms name (`svc.facilitator`). x402 payments never use it.
        subscriptions: planId -> subscription id the client holds; with `billing`, the
            client may also subscribe (the first period counts against the limits).
        networks: svcpay network names x402 payments may be made on; None: the cluster
            `rpc` reaches (by its genesis hash). Every protocol's terms must name that
            cluster: a 402 for another raises WrongNetwork, naming both (a local validator
            is `solana-localnet`, or the public network SVCPAY_LOCALNET_AS presents it as;
            docs/adr/0038).
        allowed_tokens: mints this client may pay in (None: any).
        sessions: pay MPP `session` offers on svc_billing with a session (on by default);
            session_deposit: what a new session escrows (default: the offer's suggested
            deposit), at most max_per_request; session_secs: a new session's lifetime.
        tabs: the open sessions (default: in memory; `Tabs(path)` keeps them in a file).
        protocols: the wire protocols this client pays one-time prices with, in order of
            preference, when a 402 offers several (PROTOCOLS: svcpay's proof or
            subscription, x402 `exact`, MPP `charge`); sessions come first when offered.
        policy: a `SpendingPolicy` beside the limits: the origins and assets this client
            may pay, a cap per payment, per origin per day, and a daily budget.
        """
        self.owner, self.rpc, self.facilitator = owner, rpc, facilitator
        self.max_per_request, self.max_per_period, self.period_secs = (
            max_per_request,
            max_per_period,
            period_secs,
        )
        self.subscriptions = dict(subscriptions or {})
        self.billing, self.retries = billing, retries
        self.networks = None if networks is None else _network_names(networks)
        self._networks_given = self.networks
        self._cluster: Cluster | None = None
        self.allowed_tokens = None if allowed_tokens is None else frozenset(allowed_tokens)
        self.mints = ChainMints(rpc)  # one cache for every scheme's payments
        self.x402 = x402.ExactSvmClient(owner, rpc, mints=self.mints)
        self.charges = charge_client.ChargeClient(owner, rpc, self.mints)
        if unknown := [p for p in protocols if p not in PROTOCOLS]:
            raise ValueError(f"unknown protocols {unknown}: choose among {list(PROTOCOLS)}")
        self.protocols = tuple(protocols)
        self.sessions, self.session_deposit, self.session_secs = (
            sessions,
            session_deposit,
            session_secs,
        )
        self.tabs = tabs if tabs is not None else Tabs()
        self._known_offers: dict[str, SessionOffer] = {}  # by URL (no query): paid by session
        self._program = billing.program_id if billing is not None else PROGRAM_ID
        self._spent: deque[_Spent] = deque()
        self.policy = policy or SpendingPolicy()
        self._loop: asyncio.AbstractEventLoop | None = None  # httpx.Client's flows run here
        self._loop_lock = threading.Lock()

    def _allowed(self, token: str) -> bool:
        if self.policy.assets is not None and token not in self.policy.assets:
            return False
        return self.allowed_tokens is None or token in self.allowed_tokens

    def _check_origin(self, origin: str) -> None:
        if self.policy.origins is not None and origin not in self.policy.origins:
            raise OriginNotAllowed(
                f"{origin} is not among the origins this client may pay "
                f"({', '.join(sorted(self.policy.origins)) or 'none'})"
            )

    def _reserve(self, amount: int, origin: str = "", asset: str = "") -> _Spent:
        """Counts `amount` (of `asset`, paid to `origin`) as spent: SpendingLimitExceeded if
        that passes a limit or the policy, OriginNotAllowed for an origin it does not list;
        returns the entry, for `_release` when nothing was paid after all."""
        policy = self.policy
        self._check_origin(origin)
        if asset and policy.assets is not None and asset not in policy.assets:
            raise SpendingLimitExceeded(f"{asset} is not among the assets this client may pay in")
        if amount > self.max_per_request:
            raise SpendingLimitExceeded(
                f"{amount} base units is above the per-request limit {self.max_per_request}"
            )
        if policy.max_per_payment is not None and amount > policy.max_per_payment:
            raise SpendingLimitExceeded(
                f"{amount} base units is above the policy's per-payment cap "
                f"{policy.max_per_payment}"
            )
        now = time.monotonic()
        horizon = max(self.period_secs, DAY_SECS)
        while self._spent and now - self._spent[0].at > horizon:
            self._spent.popleft()
        in_period = sum(e.amount for e in self._spent if now - e.at <= self.period_secs)
        if self.max_per_period is not None and in_period + amount > self.max_per_period:
            raise SpendingLimitExceeded(
                f"paying {amount} would pass the limit {self.max_per_period} per period"
            )
        today = [e for e in self._spent if now - e.at <= DAY_SECS]
        budget = policy.daily_budget
        if budget is not None and sum(e.amount for e in today) + amount > budget:
            raise SpendingLimitExceeded(
                f"paying {amount} would pass the daily budget {policy.daily_budget} "
                "(the last 24 hours, every origin)"
            )
        if policy.max_per_origin_per_day is not None:
            spent_here = sum(e.amount for e in today if e.origin == origin)
            if spent_here + amount > policy.max_per_origin_per_day:
                raise SpendingLimitExceeded(
                    f"paying {amount} would pass the cap {policy.max_per_origin_per_day} per "
                    f"origin per day for {origin}"
                )
        entry = _Spent(now, amount, origin)
        self._spent.append(entry)
        return entry

    def _release(self, entry: _Spent) -> None:
        if entry in self._spent:
            self._spent.remove(entry)

    def spent_today(self, origin: str | None = None) -> int:
        """Base units paid in the last 24 hours (to `origin` only, when given)."""
        now = time.monotonic()
        return sum(
            e.amount
            for e in self._spent
            if now - e.at <= DAY_SECS and (origin is None or e.origin == origin)
        )

    def sync_auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response]:
        """The same flow for `httpx.Client`: each step of `_flow` runs on this auth's private
        event loop (a daemon thread), so the RPC, facilitator and billing clients given to
        the constructor are used on that loop only and must not be shared with async code."""
        flow = self._flow(request)
        try:
            request = self.run(flow.__anext__())
            while True:
                response = yield request
                response.read()
                try:
                    request = self.run(flow.asend(response))
                except StopAsyncIteration:
                    return
        finally:
            self.run(flow.aclose())

    async def async_auth_flow(
        self, request: httpx.Request
    ) -> AsyncGenerator[httpx.Request, httpx.Response]:
        flow = self._flow(request)
        try:
            request = await flow.__anext__()
            while True:
                response = yield request
                await response.aread()  # overriding async_auth_flow: we read bodies ourselves
                try:
                    request = await flow.asend(response)
                except StopAsyncIteration:
                    return
        finally:
            await flow.aclose()

    def run(self, step: Awaitable[T]) -> T:
        """Runs `step` on the private loop of the sync flow (started on first use) and waits
        for it: e.g. `auth.run(auth.facilitator.aclose())` after using `httpx.Client`."""
        with self._loop_lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                threading.Thread(
                    target=_run_forever, args=(loop,), name="svcpay-payment-auth", daemon=True
                ).start()
                self._loop = loop
        return asyncio.run_coroutine_threadsafe(_awaited(step), self._loop).result()

    def close(self) -> None:
        """Asks to close open sessions (`aclose`), then stops the private loop, if the sync
        flow started one (close the clients first, with `run`)."""
        if self.tabs.items():
            self.run(self.aclose())
        with self._loop_lock:
            loop, self._loop = self._loop, None
        if loop is not None:
            loop.call_soon_threadsafe(loop.stop)

    async def _flow(self, request: httpx.Request) -> AsyncGenerator[httpx.Request, httpx.Response]:
        """The payment logic, for both clients: yields requests, is sent their responses
        (bodies already read)."""
        where = _resource_key(request)
        origin = _origin(request)
        known = self._known_offers.get(where) if self.sessions else None
        if known is not None and self.tabs.get(tab_key(known)) is not None:
            response = None  # a voucher goes with the first request: no 402 round trip
            offer: SessionOffer | None = known
        else:
            response = yield request
            if response.status_code != 402:
                return
            self._check_origin(origin)
            offer = self._session_offer(response) if self.sessions else None
        if offer is not None:
            await self._require_network(offer.network, "the server's session offer")
            self._known_offers[where] = offer
            for _ in range(2):  # a tab whose session ended is replaced once
                tab = await self._tab(offer, origin) if offer is not None else None
                if offer is None or tab is None:
                    break
                async with tab.lock:  # one request at a time per session
                    inner = self._session_flow(request, offer, tab, where)
                    try:
                        step = await inner.__anext__()
                        while True:
                            step = await inner.asend((yield step))
                    except StopAsyncIteration:
                        return
                    except _TabGone:
                        self.tabs.drop(tab_key(offer))
                    finally:
                        await inner.aclose()
            self._known_offers.pop(where, None)
        if response is None:  # no session after all: ask the server for its terms
            response = yield request
            if response.status_code != 402:
                return
        terms, required, charges = self._offers(response)
        if terms is None and required is None and not charges:
            return  # no 402 this client speaks: hand it back unchanged
        for protocol in self.protocols:
            if protocol == "svcpay" and terms is not None:
                paid = await self._svcpay_header(terms, origin)
                if paid is None:
                    continue
                name, value = paid
                request.headers[name] = value
                if name == X_SVC_SUB:
                    yield request
                    return
                for attempt in range(self.retries + 1):
                    response = yield request
                    rejected = (
                        response.status_code == 402
                        and proof_client.error_name(response) == "InvalidPaymentProof"
                    )
                    if not rejected:
                        return
                    if attempt == self.retries:
                        raise InvalidPaymentProof(
                            f"the server rejected the proof: {proof_client.error_message(response)}"
                        )
                    await asyncio.sleep(0.2 * 2**attempt)
                return
            if protocol == "x402" and required is not None:
                name, value = await self._pay_x402(required, origin)
                request.headers[name] = value
                response = yield request
                if response.status_code == 402:
                    raise PaymentRefused(x402.refusal_reason(response))
                return
            if protocol == "mpp" and charges:
                request.headers["authorization"] = await self._pay_mpp_here(charges, origin)
                response = yield request
                if response.status_code == 402:
                    detail = _problem(response).get("detail") or response.text[:200]
                    raise PaymentRefused(f"the server refused the MPP charge: {detail}")
                return
        raise self._none_acceptable(terms, required, charges)

    def _offers(
        self, response: httpx.Response
    ) -> tuple[PaymentRequired | None, x402.AnyRequired | None, list[charge_client.ChargeOffer]]:
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
        charges = [c for c in charges if cluster.serves(c.network)]
        return await self._pay_mpp(charges, origin)

    def _none_acceptable(
        self,
        terms: PaymentRequired | None,
        required: x402.AnyRequired | None,
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

    # -- sessions ------------------------------------------------------------------------

    def _session_offer(self, response: httpx.Response) -> SessionOffer | None:
        """The first session offer on this client's svc_billing, in a token it may pay in."""
        for challenge in mpp.parse_challenges(response.headers.get_list("www-authenticate")):
            offer = SessionOffer.parse(challenge)
            # Only the program this client knows: a deposit sent to another would be lost.
            if (
                offer is not None
                and offer.program == self._program
                and self._allowed(str(offer.currency))
            ):
                return offer
        return None

    def _sessions_client(self) -> Sessions:
        return Sessions(self.billing or BillingClient(self.rpc, self._program))

    async def _tab(self, offer: SessionOffer, origin: str) -> Tab | None:
        """The open tab for this gate, opened now if there is none and the limits allow the
        deposit; None: pay another way."""
        key = tab_key(offer)
        tab = self.tabs.get(key)
        if tab is not None:
            return tab
        deposit = self.session_deposit or offer.suggested_deposit or 1000 * offer.amount
        deposit = min(deposit, self.max_per_request)
        if deposit < offer.amount:
            return None  # not one call's worth within the limits
        try:
            entry = self._reserve(deposit, origin, str(offer.currency))
        except SpendingLimitExceeded:
            return None
        key_pair = Keypair()
        sessions = self._sessions_client()

        async def open_and_keep() -> Tab:
            now = await sessions.billing.chain_time()  # the program's clock, not this machine's
            channel = await sessions.open(
                self.owner, mint=offer.currency, recipient=offer.recipient_token,
                deposit=deposit, price=offer.amount, expires_at=now + self.session_secs,
                dispute_secs=max(offer.min_dispute_secs, 60), signer=key_pair.pubkey(),
            )  # fmt: skip
            # A transfer-fee mint withholds part of the deposit: vouchers may reach what
            # the vault received (the session's deposit), not what left the wallet.
            state = await sessions.fetch(channel)
            tab = Tab(channel, key_pair, state.deposit if state is not None else deposit)
            self.tabs.put(key, tab)
            return tab

        try:
            # A Ctrl-C waits for the open to be decided and kept: a deposit in a session
            # whose key is lost could be spent by no one (svcpay.stopping).
            return await stopping.finishing(open_and_keep())
        except BaseException:
            if self.tabs.get(key) is None:
                self._release(entry)
            raise

    async def _top_up(self, offer: SessionOffer, tab: Tab, price: int, origin: str) -> bool:
        """Adds another deposit's worth when the tab cannot pay `price`; False when the
        limits refuse it."""
        amount = min(self.session_deposit or tab.deposit, self.max_per_request)
        if amount < price:
            return False
        try:
            entry = self._reserve(amount, origin, str(offer.currency))
        except SpendingLimitExceeded:
            return False

        async def top_up_and_keep() -> None:
            sessions = self._sessions_client()
            await sessions.top_up(tab.channel, self.owner, amount)
            state = await sessions.fetch(tab.channel)  # net of a fee mint's fee, as at open
            tab.deposit = state.deposit if state is not None else tab.deposit + amount
            self.tabs.put(tab_key(offer), tab)

        try:
            await stopping.finishing(top_up_and_keep())  # kept before a Ctrl-C stops it
        except asyncio.CancelledError:
            raise
        except BaseException:
            self._release(entry)
            raise
        return True

    async def _session_flow(
        self, request: httpx.Request, offer: SessionOffer, tab: Tab, where: str
    ) -> AsyncGenerator[httpx.Request, httpx.Response]:
        """Sends `request` with the tab's next voucher; resyncs with the gate (a lost receipt,
        a fresh challenge) and retries up to `retries` times."""
        price = offer.amount
        for attempt in range(self.retries + 1):
            if tab.left() < price and not await self._top_up(offer, tab, price, _origin(request)):
                raise SpendingLimitExceeded(
                    f"the session {tab.channel} has {tab.left()} left, and topping it up "
                    "would pass the spending limits"
                )
            voucher = tab.sign(price)
            request.headers["authorization"] = tab.credential(offer, voucher)
            response = yield request
            receipt = response.headers.get("payment-receipt")
            if response.status_code < 400 and receipt:
                tab.accepted(mpp.Receipt.parse(receipt))
                self.tabs.put(tab_key(offer), tab)
                return
            if response.status_code != 402:
                return  # the handler failed: the gate did not count the voucher
            problem = _problem(response)
            fresh = self._session_offer(response)
            moved = tab.resync(problem)
            kind = str(problem.get("type", "")).rsplit("/", 1)[-1]
            detail = str(problem.get("detail", ""))
            if kind == "verification-failed" and (
                "no open session" in detail or "session has expired" in detail
            ):
                raise _TabGone(detail)
            if fresh is not None and kind in ("payment-expired", "invalid-challenge"):
                offer = self._known_offers[where] = fresh  # answer the new challenge
            elif kind == "payment-insufficient" and "deposit" in problem:
                seen = int(str(problem["deposit"]))
                if seen < tab.deposit:  # the gate has yet to read the top-up
                    await asyncio.sleep(1.0)
                else:
                    tab.deposit = seen
            elif not moved:
                break
            if attempt == self.retries:
                break
        raise PaymentRefused(f"the gate refused the session voucher: {problem.get('detail')}")

    async def aclose(self) -> None:
        """Asks to close every open session (the provider redeems what was served; the rest
        of each deposit comes back to the wallet after the dispute window, when the wallet
        or the provider closes it)."""
        for key, tab in self.tabs.items():
            sessions = self._sessions_client()
            state = await sessions.fetch(tab.channel)
            if state is not None and type(state.status).__name__ == "Open":
                await sessions.request_close(tab.channel, self.owner)
            self.tabs.drop(key)

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
            facilitator, self.rpc, self.owner, option, mints=self.mints
        )

    async def _cost(self, mint: str, price: int) -> int:
        """What paying `price` of `mint` takes from the wallet: the price, or in a
        transfer-fee mint the gross that leaves the payee the price this epoch."""
        try:
            now = await self.mints.at_epoch(Pubkey.from_string(mint))
            return now.gross_for_net(price)
        except (MintUnavailable, ValueError) as e:
            raise PaymentError(f"cannot pay in {mint}: {e}") from e

    async def _pay_x402(self, required: x402.AnyRequired, origin: str) -> tuple[str, str]:
        """The header paying `required` (x402 v2 or v1), within the limits."""
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
        allowed = [o for o in usable if self._allowed(o.asset)]
        if not allowed:
            assets = ", ".join(sorted({o.asset for o in usable}))
            raise NoAcceptableOption(
                f"the server asks for tokens this client may not pay in: {assets}"
            )
        # The server's first choice within the per-request limit (else the first, refused).
        option = next((o for o in allowed if x402.amount_of(o) <= self.max_per_request), allowed[0])
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
        return x402.payment_header(payload)

    async def _pay_mpp(self, charges: list[charge_client.ChargeOffer], origin: str) -> str:
        """The `Authorization: Payment` value paying the first charge this client may pay
        (pull before push, as the server ordered them), within the limits."""
        allowed = [c for c in charges if self._allowed(c.mint)]
        if not allowed:
            mints = ", ".join(sorted({c.mint for c in charges}))
            raise NoAcceptableOption(
                f"the server asks for tokens this client may not pay in: {mints}"
            )
        offer = next((c for c in allowed if c.amount <= self.max_per_request), allowed[0])
        try:
            cost = await self.charges.cost(offer)
        except charge_client.CannotPay as e:
            raise PaymentError(f"cannot pay the server's MPP charge: {e}") from e
        entry = self._reserve(cost, origin, offer.mint)
        try:
            return await self.charges.credential(offer)
        except Exception as e:
            if offer.pull:  # nothing was sent
                self._release(entry)
            raise PaymentError(f"cannot pay the server's MPP charge: {e}") from e

    @property
    def networks_from_node(self) -> bool:
        return self._networks_given is None

    async def _cluster_now(self) -> Cluster:
        """The cluster the RPC node is on (one getGenesisHash, then cached)."""
        if self._cluster is None:
            self._cluster = await cluster_of(self.rpc)
        return self._cluster

    async def _require_network(self, network: str, what: str) -> None:
        """Raises WrongNetwork, naming both, unless `network` is the RPC node's cluster."""
        cluster = await self._cluster_now()
        if not cluster.serves(network):
            raise WrongNetwork(f"{what} is on {network}, but the RPC node is {cluster.describe()}")

    async def _x402_networks(self) -> frozenset[str]:
        if self.networks is None:
            cluster = await self._cluster_now()
            self.networks = frozenset(n for n in (cluster.name, cluster.presented_as) if n)
        return self.networks


def _network_names(networks: Collection[str]) -> frozenset[str]:
    names = set()
    for n in networks:
        name = svcpay_network(n)
        if name is None:
            raise ValueError(
                f"{n!r} is not a Solana network x402 knows: use one of {', '.join(CAIP2)}"
            )
        names.add(name)
    return frozenset(names)


def _origin(request: httpx.Request) -> str:
    return _normal(str(request.url))


def _normal(url: str) -> str:
    """scheme://host[:port] of `url`, the port left out when it is the scheme's default."""
    parsed = httpx.URL(url)
    default = {"http": 80, "https": 443}.get(parsed.scheme)
    port = f":{parsed.port}" if parsed.port is not None and parsed.port != default else ""
    return f"{parsed.scheme}://{parsed.host}{port}"


def _resource_key(request: httpx.Request) -> str:
    url = request.url
    return f"{request.method} {url.scheme}://{url.netloc.decode()}{url.path}"


class _TabGone(Exception):
    """The gate no longer takes this tab's session (closed, expired): open another."""


def _problem(response: httpx.Response) -> dict[str, object]:
    try:
        body = response.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def _named_facilitator(option: PaymentOption) -> str | None:
    return option.svc.facilitator if option.svc is not None else None


def _payment_id() -> str:
    """A payment-identifier id (x402's extension), sent when the server declares it."""
    return "pay_" + os.urandom(16).hex()


def _run_forever(loop: asyncio.AbstractEventLoop) -> None:
    try:
        loop.run_forever()
    finally:
        loop.close()


async def _awaited(step: Awaitable[T]) -> T:
    return await step


async def pay(url: str, auth: PaymentAuth, method: str = "GET", **kwargs: object) -> httpx.Response:
    """The whole one-time flow in one call (spec `pay()`): request, pay on 402, retry."""
    async with httpx.AsyncClient(auth=auth) as client:
        return await client.request(method, url, **kwargs)  # type: ignore[arg-type]
