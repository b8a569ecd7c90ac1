"""The gate's side of sessions (docs/adr/0025): MPP's `session` intent on `svc_billing`.

A 402 on a route priced with `Session` offers a `WWW-Authenticate: Payment ... intent="session"`
challenge. The payer opens a session on chain (`svcpay session open`, or `PaymentAuth`) whose
recipient is the gate's token account, then sends one voucher per request in
`Authorization: Payment` (action `voucher`). Each voucher is checked here, offline:

- the challenge is one this gate issued, for this route's terms, not expired;
- the voucher's Ed25519 signature, by the session's signer;
- the session's state, from a cache of its account (no RPC call on the hot path: one per
  session per `ttl`, and one when a voucher passes the cached deposit, for a top-up);
- the voucher adds at least the request's price to the highest one taken, and stays within
  the deposit.

The voucher is then taken in the ledger (atomic across workers) before the handler runs, so
a replay or a concurrent copy is refused, and a kill -9 after the response loses nothing.
A handler that fails (status >= 400, or raises) is not charged: the ledger puts the previous
voucher back. A 2xx carries `Payment-Receipt`.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from solders.pubkey import Pubkey

from svcpay.protocol import mpp
from svcpay.protocol.pricing import PricingEntry, Session, Terms
from svcpay.protocol.voucher import SignedVoucher, VoucherError
from svcpay.schemes.decision import Admit, RawHeaders, Reply, Request
from svcpay.schemes.session.ledger import VoucherLedger

log = logging.getLogger("svcpay.gate")

METHOD, INTENT = "solana", "session"
RETRY_AFTER_SECS = 2
KNOWN_CHALLENGES = 10_000  # checked challenges remembered (then forgotten all at once)
MPP_NETWORKS = {"solana-mainnet": "mainnet", "solana-devnet": "devnet"}


class SessionView(Protocol):
    """What the gate reads of a session's account (the generated `Session` qualifies)."""

    @property
    def signer(self) -> Pubkey: ...
    @property
    def recipient(self) -> Pubkey: ...
    @property
    def mint(self) -> Pubkey: ...
    @property
    def deposit(self) -> int: ...
    @property
    def redeemed(self) -> int: ...
    @property
    def expires_at(self) -> int: ...
    @property
    def dispute_secs(self) -> int: ...


class Reporter(Protocol):
    def poke(self) -> None:
        """A voucher was served: report it soon."""
        ...


class SessionsUnavailable(Exception):
    """The sessions' source cannot be read now: the gate answers 503, never serves on a guess."""


class SessionStates(Protocol):
    program_id: Pubkey

    async def lookup(self, channel: Pubkey, *, fresh: bool = False) -> SessionView | None:
        """The session's state if it is open (None when there is none, or it is closing or
        closed), read anew when `fresh`; raises SessionsUnavailable."""
        ...


@dataclass(frozen=True)
class SessionPolicy:
    """`challenge_secs`: how long a challenge may be answered. `min_dispute_secs`: the
    shortest dispute window the gate accepts (the provider needs the time to redeem once the
    payer asks to close). `voucher_margin_secs`: a voucher with an expiry must leave this
    long to redeem it."""

    challenge_secs: int = 300
    min_dispute_secs: int = 60
    voucher_margin_secs: int = 300


class SessionScheme:
    def __init__(
        self,
        terms: Terms,
        issuer: mpp.ChallengeIssuer,
        states: SessionStates,
        ledger: VoucherLedger,
        policy: SessionPolicy | None = None,
        clock: Callable[[], float] = time.time,
        reporter: Reporter | None = None,
    ) -> None:
        """`reporter` hands served vouchers to whoever redeems them (`VoucherReporter`: the
        facilitator); without one, read them from `ledger.unreported()`."""
        self.terms, self.issuer, self.states, self.ledger = terms, issuer, states, ledger
        self.reporter = reporter
        self.policy, self.clock = policy or SessionPolicy(), clock
        self.pay_to, self.mint = Pubkey.from_string(terms.pay_to), Pubkey.from_string(terms.token)
        self._requests: dict[Session, str] = {}
        self._known: dict[tuple[str, str], int] = {}  # checked challenges -> their expiry
        self._stamp = (0, "")
        self._ledger_down = False

    # -- the 402 ---------------------------------------------------------------------------

    def request_json(self, entry: Session) -> dict[str, Any]:
        """The challenge's `request`: MPP's session request, with svc_billing's specifics in
        `methodDetails` (unknown fields are ignored by other clients)."""
        details: dict[str, Any] = {
            "network": MPP_NETWORKS.get(self.terms.network, "localnet"),
            "channelProgram": str(self.states.program_id),
            "voucherSigner": "client",
            "minVoucherDelta": str(entry.amount),
            "recipientTokenAccount": self.terms.pay_to,
            "minDisputeSeconds": self.policy.min_dispute_secs,
        }
        request: dict[str, Any] = {
            "amount": str(entry.amount),
            "currency": self.terms.token,
            "recipient": self.terms.owner or self.terms.pay_to,
            "unitType": entry.unit,
            "suggestedDeposit": str(entry.suggested_deposit),
            "methodDetails": details,
        }
        if entry.description:
            request["description"] = entry.description
        return request

    def _encoded(self, entry: Session) -> str:
        encoded = self._requests.get(entry)
        if encoded is None:
            encoded = self._requests[entry] = mpp.encode_json(self.request_json(entry))
        return encoded

    def challenge(self, entry: Session) -> mpp.Challenge:
        expires = int(self.clock()) + self.policy.challenge_secs
        return self.issuer.issue_encoded(
            METHOD, INTENT, self._encoded(entry), expires=expires, description=entry.description
        )

    # -- as an intent of the Payment scheme (svcpay.schemes.payment_auth) -------------------
    method, intent = METHOD, INTENT

    def serves(self, pricing: list[PricingEntry]) -> bool:
        return any(isinstance(e, Session) for e in pricing)

    def challenges(
        self, request: Request, pricing: list[PricingEntry], memos: Any = None
    ) -> RawHeaders:
        return self.headers(pricing)

    def headers(self, pricing: list[PricingEntry]) -> RawHeaders:
        return [
            (b"www-authenticate", self.challenge(e).header().encode())
            for e in pricing
            if isinstance(e, Session)
        ]

    def refuse(self, pricing: list[PricingEntry], kind: str, detail: str, **extra: Any) -> Reply:
        """A 402 with fresh challenges and the problem (a 400 for `method-unsupported`)."""
        body = mpp.problem(kind, detail, **extra)
        headers = self.headers(pricing) if body["status"] == 402 else []
        reply = Reply.json(body["status"], body, headers)
        reply.headers[0] = (b"content-type", b"application/problem+json")
        return reply

    # -- a credential ----------------------------------------------------------------------

    async def admit(
        self, request: Request, pricing: list[PricingEntry], header: bytes
    ) -> Reply | Admit:
        entry = next(e for e in pricing if isinstance(e, Session))
        try:
            credential = mpp.parse_credential(header.decode("latin-1"))
        except mpp.MppError as e:
            return self.refuse(pricing, e.problem, str(e))
        echo = credential.challenge
        expires = self._challenge_expiry(pricing, entry, echo)
        if isinstance(expires, Reply):
            return expires
        now = self.clock()
        if expires < now:
            return self.refuse(pricing, "payment-expired", "the challenge has expired")
        voucher = self._voucher(pricing, credential.payload, now)
        if isinstance(voucher, Reply):
            return voucher
        state = await self._session(pricing, voucher, now)
        if isinstance(state, Reply):
            return state
        try:
            price = entry.price(request)
        except (ValueError, TypeError, KeyError) as e:  # the provider's `units` refused it
            body = {"error": "InvalidUnits", "message": f"cannot count this request's units: {e}"}
            return Reply.json(400, body)
        if (refused := await self._take(pricing, voucher, state, price)) is not None:
            return refused
        return _Taken(self, voucher, self._receipt(voucher, state.deposit, echo.id, int(now)))

    def _challenge_expiry(
        self, pricing: list[PricingEntry], entry: Session, echo: mpp.Challenge
    ) -> Reply | int:
        """When the echoed challenge expires, once it is known to be one this gate issued for
        this route's terms (then remembered until it expires); else the refusal."""
        if (echo.method, echo.intent) != (METHOD, INTENT):
            return self.refuse(
                pricing,
                "method-unsupported",
                f"this route takes {METHOD}/{INTENT}, not {echo.method}/{echo.intent}",
            )
        expires = self._known.get((echo.id, echo.request))
        if expires is None:  # not seen yet: check it (then it is remembered until it expires)
            if not self.issuer.recognises(echo):
                return self.refuse(
                    pricing, "invalid-challenge", "the challenge was not issued here"
                )
            if echo.request != self._encoded(entry):
                return self.refuse(
                    pricing,
                    "invalid-challenge",
                    "the challenge was issued for other terms than this route's",
                )
            expires = mpp.parse_rfc3339(echo.expires) if echo.expires else None
            if expires is None:
                return self.refuse(pricing, "invalid-challenge", "the challenge has no expiry")
            if len(self._known) >= KNOWN_CHALLENGES:
                self._known.clear()
            self._known[echo.id, echo.request] = expires
        return expires

    def _voucher(
        self, pricing: list[PricingEntry], payload: dict[str, Any], now: float
    ) -> Reply | SignedVoucher:
        """The credential's voucher, signed by its signer and not about to expire; else the
        refusal."""
        action = payload.get("action")
        if action != "voucher":
            return self.refuse(
                pricing,
                "method-unsupported",
                f"session action {action!r} is not taken here: open and top up the "
                "session on chain (svcpay session open), then send vouchers",
            )
        try:
            voucher = SignedVoucher.from_json_dict(payload.get("voucher"))
        except VoucherError as e:
            return self.refuse(pricing, "malformed-credential", f"voucher: {e}")
        if payload.get("channelId") != str(voucher.channel):
            return self.refuse(
                pricing, "malformed-credential", "channelId differs from the voucher's channelId"
            )
        if not voucher.verifies():
            return self.refuse(pricing, "verification-failed", "the voucher's signature is invalid")
        margin = self.policy.voucher_margin_secs
        if voucher.expiry and voucher.expiry < now + margin:
            return self.refuse(
                pricing,
                "payment-expired",
                f"the voucher expires within {margin} s; sign one without an expiry or a later one",
            )
        return voucher

    async def _session(
        self, pricing: list[PricingEntry], voucher: SignedVoucher, now: float
    ) -> Reply | SessionView:
        """The voucher's session, open and fit to pay this gate (read anew when the voucher
        passes the cached deposit: a top-up?); else the refusal, or a 503."""
        try:
            state = await self.states.lookup(voucher.channel)
            if state is not None and voucher.cumulative > state.deposit:
                state = await self.states.lookup(voucher.channel, fresh=True)  # a top-up?
        except SessionsUnavailable as e:
            body = {"error": "SessionsUnavailable", "message": str(e)}
            return Reply.json(503, body, [(b"retry-after", str(RETRY_AFTER_SECS).encode())])
        reason = self._unfit(state, voucher, now)
        if reason is not None:
            return self.refuse(pricing, "verification-failed", reason)
        assert state is not None
        return state

    async def _take(
        self, pricing: list[PricingEntry], voucher: SignedVoucher, state: SessionView, price: int
    ) -> Reply | None:
        """Takes the voucher in the ledger (None), or refuses one over the deposit or that
        adds less than `price` to the highest taken (a replay, a concurrent copy, stale)."""
        if voucher.cumulative > state.deposit:
            return self.refuse(
                pricing,
                "payment-insufficient",
                f"the voucher ({voucher.cumulative}) is over the session's deposit "
                f"({state.deposit}); top the session up",
                deposit=str(state.deposit),
            )
        try:
            if voucher.cumulative < state.redeemed + price:
                taken = None
            else:
                taken = await self.ledger.advance(voucher, floor=state.redeemed, step=price)
            highest = None if taken is not None else await self.ledger.highest(str(voucher.channel))
        except Exception as e:
            if not ledger_outage(e):
                raise
            return self.ledger_down(e)
        self.ledger_back()
        if taken is None:
            accepted = max(highest if highest is not None else 0, state.redeemed)
            return self.refuse(
                pricing,
                "payment-insufficient",
                f"the voucher must add at least {price} to the highest one taken "
                f"({accepted}): it is a replay, a concurrent copy, or stale",
                acceptedCumulative=str(accepted),
            )
        return None

    def ledger_down(self, e: BaseException) -> Reply:
        """A JSON 503 with Retry-After while the voucher ledger's database is unreachable
        (logged once until it answers again); nothing was served or charged."""
        if not self._ledger_down:
            log.warning("the voucher ledger is unreachable (%s); session calls answer 503", e)
            self._ledger_down = True
        body = {"error": "LedgerUnavailable", "message": "the voucher ledger is unreachable"}
        return Reply.json(503, body, [(b"retry-after", str(RETRY_AFTER_SECS).encode())])

    def ledger_back(self) -> None:
        if self._ledger_down:
            log.warning("the voucher ledger answers again")
            self._ledger_down = False

    def _receipt(self, voucher: SignedVoucher, deposit: int, challenge_id: str, now: int) -> bytes:
        """The `Payment-Receipt` value: MPP's session receipt, in JCS (its keys in order, every
        value ASCII: written directly, as it is on every paid request)."""
        stamp = self._stamp
        if stamp[0] != now:
            stamp = self._stamp = (now, mpp.rfc3339(now))
        cumulative = voucher.cumulative
        text = (
            f'{{"acceptedCumulative":"{cumulative}","challengeId":"{challenge_id}",'
            f'"deposit":"{deposit}","idleTimeoutSeconds":0,"intent":"{INTENT}",'
            f'"method":"{METHOD}","reference":"{voucher.channel}","spent":"{cumulative}",'
            f'"status":"success","timestamp":"{stamp[1]}"}}'
        )
        return mpp.b64url(text.encode()).encode()

    def _unfit(self, state: SessionView | None, voucher: SignedVoucher, now: float) -> str | None:
        """Why this session cannot pay this gate, or None."""
        if state is None:
            return f"no open session at {voucher.channel}"
        if state.recipient != self.pay_to:
            return f"the session pays {state.recipient}, not this gate's {self.pay_to}"
        if state.mint != self.mint:
            return f"the session holds {state.mint}, not {self.mint}"
        if state.signer != voucher.signer:
            return "the voucher is not signed by the session's signer"
        if state.expires_at <= now:
            return "the session has expired; open a new one"
        if state.dispute_secs < self.policy.min_dispute_secs:
            return (
                f"the session's dispute window ({state.dispute_secs} s) is shorter than "
                f"this gate needs ({self.policy.min_dispute_secs} s)"
            )
        return None


class _Taken(Admit):
    """A voucher taken before the handler runs. A status below 400 commits it (before the
    response goes out: a kill -9 then loses nothing) and carries the receipt; a failed
    handler puts the previous voucher back."""

    wants_start = True

    def __init__(self, scheme: SessionScheme, voucher: SignedVoucher, receipt: bytes) -> None:
        self.scheme, self.voucher, self.receipt = scheme, voucher, receipt
        self.committed = False

    async def start(self, status: int, headers: RawHeaders) -> Reply | RawHeaders:
        if status >= 400:
            return []
        try:
            await self.scheme.ledger.commit(self.voucher)
        except Exception as e:  # not committed: the response is replaced, not charged
            if not ledger_outage(e):
                raise
            return self.scheme.ledger_down(e)
        self.committed = True
        if self.scheme.reporter is not None:
            self.scheme.reporter.poke()
        return [(b"payment-receipt", self.receipt)]

    async def end(self, status: int | None, body: bytes | None) -> None:
        if not self.committed:
            try:
                await self.scheme.ledger.release(self.voucher)
            except Exception as e:
                if not ledger_outage(e):
                    raise
                # Still the highest taken, never served: the client's next voucher, resynced
                # from the 402 it gets, counts on it (one call's price, while the
                # ledger's database is away).
                self.scheme.ledger_down(e)


def ledger_outage(e: BaseException) -> bool:
    """Whether `e` says the ledger's database is unreachable (SQLite locked or its disk
    failing, PostgreSQL down), not a bug."""
    if isinstance(e, sqlite3.OperationalError | OSError):
        return True
    try:
        import psycopg
    except ImportError:
        return False
    return isinstance(e, psycopg.OperationalError | psycopg.InterfaceError)
