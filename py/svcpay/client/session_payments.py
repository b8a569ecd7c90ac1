"""How the paying client pays MPP `session` offers on svc_billing (docs/adr/0025): the first
offer on its program in a token it may pay in, a tab (a session it opened, its deposit within
the limits) per gate, one voucher per request, top-ups, and asking to close on `aclose()`."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator

import httpx
from solana.rpc.async_api import AsyncClient
from solders.keypair import Keypair
from solders.pubkey import Pubkey

from svcpay import stopping
from svcpay.client.spending import SpendingLimits, request_origin
from svcpay.program.client import BillingClient
from svcpay.program.session_client import Sessions
from svcpay.protocol import mpp
from svcpay.protocol.errors import PaymentRefused, SpendingLimitExceeded
from svcpay.schemes.session.client import SessionOffer, Tab, Tabs, tab_key


class SessionPayments(SpendingLimits):
    """`PaymentAuth`'s sessions (it sets these attributes and runs `_session_flow`)."""

    owner: Keypair
    rpc: AsyncClient
    billing: BillingClient | None
    retries: int
    sessions: bool
    session_deposit: int | None
    session_secs: int
    tabs: Tabs
    _known_offers: dict[str, SessionOffer]  # by URL (no query): paid by session
    _program: Pubkey

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
            origin = request_origin(request)
            if tab.left() < price and not await self._top_up(offer, tab, price, origin):
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
            problem = problem_of(response)
            fresh = self._session_offer(response)
            moved = tab.resync(problem)
            kind = str(problem.get("type", "")).rsplit("/", 1)[-1]
            detail = str(problem.get("detail", ""))
            if kind == "verification-failed" and (
                "no open session" in detail or "session has expired" in detail
            ):
                raise TabGone(detail)
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


class TabGone(Exception):
    """The gate no longer takes this tab's session (closed, expired): open another."""


def problem_of(response: httpx.Response) -> dict[str, object]:
    try:
        body = response.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}
