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
  402 to the paid request raises `PaymentRefused` with the server's reason, unless the
  payment can never land and did not (its blockhash expired unsent: the client checks both
  on chain, `svcpay.schemes.x402_exact.expiry`), when it signs a new one, at most
  `X402_SIGNINGS` a request.

The schemes' client sides build the payments (`svcpay.schemes.svcpay_proof.client`,
`svcpay.schemes.x402_exact.client`); this module chooses among the terms and retries, with
its siblings: `spending` keeps the limits, `one_time` pays one-time prices and subscriptions,
`session_payments` pays by session. A one-time price is what the payee receives: in a
Token-2022 mint with a transfer fee the wallet sends more (the gross that nets the price
this epoch; the mints are read once a minute through one `ChainMints`), and the limits count
what it sends (docs/adr/0031).

It works with `httpx.AsyncClient` and `httpx.Client` alike: the logic is one async generator
(`_flow`); the sync flow runs its steps on a private event loop in a daemon thread.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import AsyncGenerator, Awaitable, Collection, Generator, Sequence
from typing import TypeVar

import httpx
from solana.rpc.async_api import AsyncClient
from solders.keypair import Keypair

from svcpay.client.one_time import OneTimePayments
from svcpay.client.session_payments import SessionPayments, TabGone, problem_of
from svcpay.client.spending import SpendingPolicy, Spent, request_origin
from svcpay.program.client import BillingClient
from svcpay.program.generated.program_id import PROGRAM_ID
from svcpay.protocol.errors import (
    InvalidPaymentProof,
    PaymentRefused,
)
from svcpay.protocol.headers import X_SVC_SUB
from svcpay.protocol.mints import ChainMints
from svcpay.rpc.cluster import Cluster
from svcpay.rpc.fees import CLIENT_FEES_TTL_SECS, FeeSettings, PriorityFees
from svcpay.schemes.mpp_charge import client as charge_client
from svcpay.schemes.session.client import SessionOffer, Tabs, tab_key
from svcpay.schemes.svcpay_proof import client as proof_client
from svcpay.schemes.x402_exact import client as x402
from svcpay.schemes.x402_exact.wire import CAIP2, svcpay_network

__all__ = ["PROTOCOLS", "PaymentAuth", "SpendingPolicy", "pay"]

T = TypeVar("T")


PROTOCOLS = ("svcpay", "x402", "mpp")  # the default preference, most preferred first
X402_SIGNINGS = 3  # x402 payments signed for one request, at most (ADR 0036)


class PaymentAuth(SessionPayments, OneTimePayments, httpx.Auth):
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
        priority_fees: FeeSettings | None = FeeSettings(),  # noqa: B008 (frozen)
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
        priority_fees: the compute-unit price of the payments this client signs, from the
            cluster's recent fees for the accounts they write (the fee payer, the payee) at
            a percentile, within a floor and a cap (default: the median, 1 to 100,000
            micro-lamports; each facilitator bounds what it sponsors); None: 1.
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
        # One cache for every scheme's payments, and for every client of this process that
        # pays through the same RPC endpoint (a client made per payment reads them once).
        self.mints = ChainMints(rpc, shared=True)
        self.fees = (
            None
            if priority_fees is None
            else PriorityFees(rpc, priority_fees, ttl=CLIENT_FEES_TTL_SECS, shared=True)
        )
        self.x402 = x402.ExactSvmClient(owner, rpc, mints=self.mints, fees=self.fees)
        self.charges = charge_client.ChargeClient(owner, rpc, self.mints, self.fees)
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
        self._spent: deque[Spent] = deque()
        self.policy = policy or SpendingPolicy()
        self._loop: asyncio.AbstractEventLoop | None = None  # httpx.Client's flows run here
        self._loop_lock = threading.Lock()

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
        origin = request_origin(request)
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
                    except TabGone:
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
                for signing in range(1, X402_SIGNINGS + 1):
                    name, value, entry = await self._pay_x402(required, origin)
                    request.headers[name] = value
                    response = yield request
                    if response.status_code != 402:
                        return
                    # Refused: signed again only when this one can never land and did not
                    # (its blockhash expired unsent, as when every send was dropped).
                    if signing == X402_SIGNINGS or not await self._x402_expired_unpaid(value):
                        raise PaymentRefused(x402.refusal_reason(response))
                    self._release(entry)  # never paid: the next signing counts instead
                return
            if protocol == "mpp" and charges:
                request.headers["authorization"] = await self._pay_mpp_here(charges, origin)
                response = yield request
                if response.status_code == 402:
                    detail = problem_of(response).get("detail") or response.text[:200]
                    raise PaymentRefused(f"the server refused the MPP charge: {detail}")
                return
        raise self._none_acceptable(terms, required, charges)


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


def _resource_key(request: httpx.Request) -> str:
    url = request.url
    return f"{request.method} {url.scheme}://{url.netloc.decode()}{url.path}"


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
