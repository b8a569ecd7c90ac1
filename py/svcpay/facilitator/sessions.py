"""The session redeemer (docs/adr/0025): providers' gates report the highest voucher of each
session (POST /v1/sessions/vouchers); the facilitator redeems them on chain, as many sessions
per transaction as fit.

A reported voucher is checked (its signature, by the session's signer; the session is
`svc_billing`'s and pays one of the provider's registered token accounts; it stays within the
deposit) and kept if it is the session's highest. It is due for redemption
`redeem_secs` after it was first reported, at once when the unredeemed amount reaches
`redeem_at`, when the payer asked to close (the dispute window runs), and before the
voucher or the session expires. Each pass reads the due sessions' accounts in one call,
leases them (so instances sharing a database never redeem one twice), and sends only what
the chain has not redeemed yet: after a crash mid-redeem the next pass finds the redeem
landed and records it without sending. Redeems are recorded as lifecycle events
(session.redeemed: webhooks, analytics, attributed to the provider) at once; the indexer
records opens, top-ups and closes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from solana.rpc.commitment import Confirmed
from solders.instruction import AccountMeta
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from solders.signature import Signature

from svcpay.facilitator.lifecycle import from_program_event
from svcpay.facilitator.store import Store
from svcpay.facilitator.store.sessions import HeldVoucher
from svcpay.program import sessions as ix
from svcpay.program.client import BillingClient, TransactionError
from svcpay.program.errors import ProgramError
from svcpay.program.generated.accounts.session import Session
from svcpay.program.generated.types.session_status import Closing, Open
from svcpay.program.session_client import MAX_TX_BYTES, pack, withdraw_extras
from svcpay.protocol.voucher import SignedVoucher

log = logging.getLogger("svcpay.facilitator")

RETRY_SECS = 60  # a redeem that failed is tried again this much later
EXPIRY_MARGIN_SECS = 120  # redeem this long before a voucher or the dispute window runs out


@dataclass
class RedeemSummary:
    pending: int = 0
    due: int = 0
    redeemed: int = 0  # sessions whose redeem landed in this pass
    amount: int = 0  # base units paid to providers in this pass
    transactions: int = 0
    already: int = 0  # found redeemed on chain (a crash mid-redeem, another redeemer)
    failed: int = 0
    errors: list[str] = field(default_factory=list)

    def to_json_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v}


class SessionRedeemer:
    def __init__(
        self,
        store: Store,
        billing: BillingClient,
        keypair: Keypair,
        *,
        instance: str,
        redeem_secs: int = 300,
        redeem_at: int = 1_000_000,
        lease_secs: int = 10,
    ) -> None:
        """`lease_secs`: how long a pass holds the sessions it redeems (the crank's lease,
        SVCPAY_CRANK_LEASE_SECS): another instance takes them over after a crash then."""
        self.store, self.billing, self.keypair = store, billing, keypair
        self.instance, self.redeem_secs, self.redeem_at = instance, redeem_secs, redeem_at
        self.lease_secs = lease_secs

    # -- reports from gates --------------------------------------------------------------

    async def report(
        self, provider_id: str, vouchers: Sequence[SignedVoucher]
    ) -> list[dict[str, Any]]:
        """Checks and keeps each voucher; one answer per voucher, in order:
        `{session, status: "kept" | "stale" | "refused", reason?}`."""
        states = await self.states([v.channel for v in vouchers])
        answers = []
        ts = int(time.time())
        for voucher in vouchers:
            session = str(voucher.channel)
            state = states.get(voucher.channel)
            reason = await self._refusal(provider_id, voucher, state)
            if reason is not None:
                answers.append({"session": session, "status": "refused", "reason": reason})
                continue
            assert state is not None
            if voucher.cumulative <= state.redeemed:
                answers.append({"session": session, "status": "stale"})
                continue
            kept = await self.store.sessions.offer(
                provider_id,
                session,
                signer=str(voucher.signer),
                cumulative=voucher.cumulative,
                expiry=voucher.expiry,
                signature=str(voucher.signature),
                redeemed=state.redeemed,
                due_at=self._due(state, voucher, ts),
            )
            answers.append({"session": session, "status": "kept" if kept else "stale"})
        return answers

    async def _refusal(
        self, provider_id: str, voucher: SignedVoucher, state: Session | None
    ) -> str | None:
        if not voucher.verifies():
            return "the voucher's signature is invalid"
        if state is None:
            return f"no svc_billing session at {voucher.channel}"
        if state.signer != voucher.signer:
            return "the voucher is not signed by the session's signer"
        owner = await self.store.providers.resource_owner(str(state.recipient))
        if owner != provider_id:
            return f"the session pays {state.recipient}, which is not one of your payTo accounts"
        if voucher.cumulative > state.deposit:
            return f"the voucher ({voucher.cumulative}) is over the deposit ({state.deposit})"
        return None

    def _due(self, state: Session, voucher: SignedVoucher, ts: int) -> int:
        due = ts + self.redeem_secs
        if voucher.cumulative - state.redeemed >= self.redeem_at or isinstance(
            state.status, Closing
        ):
            due = ts
        if voucher.expiry:
            due = min(due, voucher.expiry - EXPIRY_MARGIN_SECS)
        # After expiry plus the dispute window the payer may close and take the rest.
        due = min(due, state.expires_at + state.dispute_secs - EXPIRY_MARGIN_SECS)
        return due

    # -- the chain -----------------------------------------------------------------------

    async def states(self, channels: Sequence[Pubkey]) -> dict[Pubkey, Session]:
        """The sessions among `channels` that exist (svc_billing's accounts), in few calls."""
        found: dict[Pubkey, Session] = {}
        unique = list(dict.fromkeys(channels))
        for i in range(0, len(unique), 100):
            chunk = unique[i : i + 100]
            infos = (await self.billing.rpc.get_multiple_accounts(chunk, Confirmed)).value
            for key, info in zip(chunk, infos, strict=True):
                if info is None or info.owner != self.billing.program_id:
                    continue
                data = bytes(info.data)
                if data[:8] == Session.discriminator:
                    found[key] = Session.decode(data)
        return found

    async def run_once(self) -> RedeemSummary:
        """One pass: redeems what is due; returns what it did."""
        summary = RedeemSummary()
        pending = await self.store.sessions.pending()
        summary.pending = len(pending)
        if not pending:
            return summary
        ts = int(time.time())
        states = await self.states([Pubkey.from_string(h.session) for h in pending])
        due: list[HeldVoucher] = []
        for held in pending:
            state = states.get(Pubkey.from_string(held.session))
            if state is None or not isinstance(state.status, Open | Closing):
                # Closed before it was redeemed: the rest went back to the payer.
                log.warning(
                    "session %s closed with %d unredeemed",
                    held.session,
                    held.cumulative - held.redeemed,
                )
                await self.store.sessions.redeemed(held.session, held.cumulative)
                continue
            if state.redeemed >= held.cumulative:
                summary.already += 1
                await self.store.sessions.redeemed(held.session, state.redeemed)
                continue
            if held.due_at <= ts or isinstance(state.status, Closing):
                due.append(held)
        summary.due = len(due)
        names = [h.session for h in due]
        claimed = set(await self.store.sessions.claim(self.instance, names, self.lease_secs))
        items = []
        for held in due:
            if held.session not in claimed:
                continue
            channel = Pubkey.from_string(held.session)
            voucher = SignedVoucher(
                channel,
                held.cumulative,
                held.expiry,
                Pubkey.from_string(held.signer),
                Signature.from_string(held.signature),
            )
            items.append((states[channel], channel, voucher))
        owners = {h.session: h.provider_id for h in due}
        extra = await withdraw_extras(self.billing, items)
        limit = MAX_TX_BYTES - self.billing.budget_bytes  # room for the compute budget
        for group in pack(items, self.keypair.pubkey(), extra=extra, limit=limit):
            await self._redeem(group, summary, owners, extra)
        return summary

    async def _redeem(
        self,
        group: list[tuple[Session, Pubkey, SignedVoucher]],
        summary: RedeemSummary,
        owners: dict[str, str],
        extra: Mapping[Pubkey, Sequence[AccountMeta]] | None = None,
    ) -> None:
        names = [str(channel) for _, channel, _ in group]
        try:
            receipt = await self.billing.send(ix.redeem_many(group, extra=extra), [self.keypair])
        except (ProgramError, TransactionError) as e:
            if len(group) > 1:  # find the one that fails; redeem the others
                for item in group:
                    await self._redeem([item], summary, owners, extra)
                return
            _, channel, voucher = group[0]
            now_on_chain = (await self.states([channel])).get(channel)
            if now_on_chain is not None and now_on_chain.redeemed >= voucher.cumulative:
                # Redeemed meanwhile (another instance whose lease ran out mid-pass, or a
                # transaction of ours that landed late): nothing was lost or paid twice.
                summary.already += 1
                await self.store.sessions.redeemed(names[0], now_on_chain.redeemed)
                return
            summary.failed += 1
            summary.errors.append(f"{names[0]}: {e}")
            await self.store.sessions.give_back(names, self.instance, str(e), RETRY_SECS)
            return
        except BaseException:
            await self.store.sessions.give_back(names, self.instance, "interrupted")
            raise
        summary.transactions += 1
        await self.store.events.add_many(
            [
                replace(e, provider_id=owners.get(e.session or ""))
                for index, event in enumerate(receipt.events)
                for e in from_program_event(
                    event.name,
                    event.data,
                    signature=receipt.signature,
                    index=index,
                    at=int(time.time()),
                )
            ]
        )
        for event in receipt.events:
            if event.name == "SessionRedeemed":
                summary.amount += int(event.data["amount"])
        for _, channel, voucher in group:
            summary.redeemed += 1
            await self.store.sessions.redeemed(str(channel), voucher.cumulative, self.instance)
