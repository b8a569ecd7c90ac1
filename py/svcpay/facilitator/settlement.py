"""Settling a client's signed transfer: check it pays the terms by its scheme's rules, co-sign
as fee payer, send, confirm, and (for svcpay's /authorize) sign the proof (docs/adr/0008).

The rules for `/authorize` are `svcpay.schemes.svcpay_proof.facilitator`.

`Settler.settle` is the durable send-and-confirm path; x402's `/settle`
(`svcpay.schemes.x402_exact.facilitator`) checks by its own rules and settles through it.

A payment through Token-2022 is checked against its mint as it is now (`Settler.mint_now`:
the fee schedule in force, the hook; read over RPC, cached): a transfer-fee mint's payment
must leave payTo at least the price, and its settlement records the fee withheld, so the
proof says what payTo received (`amount`) beside what was sent (`gross`) and withheld
(`fee`), and payment.settled carries `amount` (gross), `fee` and `net` (docs/adr/0031).
A payment in an SPL Token mint costs no read.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import time
from typing import Any

from solana.exceptions import SolanaRpcException
from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Confirmed
from solana.rpc.core import (
    RPCException,
)
from solders.keypair import Keypair
from solders.message import to_bytes_versioned
from solders.pubkey import Pubkey
from solders.signature import Signature
from solders.transaction import VersionedTransaction

from svcpay.facilitator.errors import SettlementError
from svcpay.facilitator.outage import DATABASE, RETRY_AFTER_SECS, outage
from svcpay.facilitator.store import Event, Store, new_id
from svcpay.facilitator.store.settlements import INTERRUPTED
from svcpay.program.client import BLOCKHASH_LIFETIME_SECS, BillingClient
from svcpay.protocol.mints import ChainMints, MintReader, MintUnavailable
from svcpay.protocol.models import PaymentOption
from svcpay.protocol.proof import PaymentProof
from svcpay.protocol.settlement import SCHEME_SVCPAY
from svcpay.protocol.token2022 import MintAtEpoch, names_token_2022
from svcpay.rpc.landing import Expired, Landed, Lander, Outcome, Pending, Rejected, Unsent
from svcpay.schemes.svcpay_proof.facilitator import check_transfer, decode_payment

log = logging.getLogger("svcpay.facilitator")
# A settlement still "sending" this long after it was stored has no live request on it (a
# flight ends once its blockhash expires, about 60-90 s): recovery and x402 retries may
# take it over.
ABANDONED_AFTER_SECS = 120
# How long a request waits for its transaction to land before it is answered
# SettlementPending (504: send the same request again; it joins the flight in progress).
SETTLE_WAIT_SECS = 15.0
# How long a flight may take at most: past a blockhash's lifetime (150 blocks), with room.
LAND_WAIT_SECS = 180.0


class RateLimit:
    """A token bucket per key (here: per payer): `rate` per second, bursts of `burst`.
    In memory, per instance: it bounds what one payer can make an instance pay in fees."""

    def __init__(self, rate: float, burst: int) -> None:
        self.rate, self.burst = rate, burst
        self._buckets: dict[str, tuple[float, float]] = {}  # key -> (tokens, updated)

    def take(self, key: str, now: float | None = None) -> float:
        """0 if `key` may go on now (a token is taken), else the seconds to wait."""
        now = time.monotonic() if now is None else now
        tokens, updated = self._buckets.get(key, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + (now - updated) * self.rate)
        if tokens < 1:
            self._buckets[key] = (tokens, now)
            return (1 - tokens) / self.rate
        self._buckets[key] = (tokens - 1, now)
        if len(self._buckets) > 100_000:  # forget the idle: full buckets hold no state
            self._buckets = {
                k: v
                for k, v in self._buckets.items()
                if v[0] + (now - v[1]) * self.rate < self.burst
            }
        return 0.0


class Settler:
    """Settles one-time payments, durably: the co-signed transaction is stored before it is
    sent, and its proof once it is confirmed. The same transaction submitted again (also
    racing, on another instance sharing the database, or after a restart) is never sent as
    a new payment (its signature is its identity on chain). svcpay's /authorize answers a
    repeat with the same proof; x402's /settle (`exclusive`) refuses it (docs/adr/0019)."""

    def __init__(
        self,
        rpc: AsyncClient,
        fee_payer: Keypair,
        store: Store,
        *,
        network: str,
        proof_ttl_secs: int = 300,
        settle_unregistered: bool = False,
        rate_limit: RateLimit | None = None,
        mints: MintReader | None = None,
    ) -> None:
        """Unless `settle_unregistered`, only payments to a payTo account a provider
        registered are settled: the facilitator pays the fees, and would otherwise pay them
        for anyone's transfers. `mints` reads Token-2022 mints (default: over `rpc`)."""
        self.rpc, self.fee_payer, self.store, self.network = rpc, fee_payer, store, network
        self._chain = BillingClient(rpc)
        self.proof_ttl_secs = proof_ttl_secs
        self.settle_unregistered = settle_unregistered
        self.rate_limit = rate_limit or RateLimit(rate=5.0, burst=20)
        self.mints: MintReader = mints if mints is not None else ChainMints(rpc)
        self.lander = Lander(rpc)
        self.wait_secs = SETTLE_WAIT_SECS
        # One settling task per transaction in this process: a repeat joins it (docs/adr/0036).
        self._settling: dict[str, asyncio.Task[tuple[dict[str, Any], bool]]] = {}

    async def mint_now(self, mint: str | Pubkey) -> MintAtEpoch:
        """`mint` as a payment in it is judged now (its token program, the fee schedule in
        force, its hook). SettlementError RpcUnavailable (503) when the RPC node cannot
        say, InvalidMint (400) when it is no token mint."""
        try:
            address = mint if isinstance(mint, Pubkey) else Pubkey.from_string(mint)
            return await self.mints.at_epoch(address)
        except MintUnavailable as e:
            raise SettlementError(
                "RpcUnavailable",
                f"the mint {mint} cannot be read ({e}); send the same request again in "
                f"{RETRY_AFTER_SECS} s",
                503,
            ) from e
        except ValueError as e:
            raise SettlementError("InvalidMint", f"{mint} is not a token mint: {e}") from e

    async def mint_for(self, tx: VersionedTransaction, mint: str) -> MintAtEpoch | None:
        """`mint_now(mint)` when `tx` goes through Token-2022; None (no read) otherwise."""
        return await self.mint_now(mint) if names_token_2022(tx) else None

    async def authorize(self, signed_payment: bytes, option: PaymentOption) -> PaymentProof:
        """Settles `signed_payment` for `option` and returns the signed proof."""
        tx = decode_payment(signed_payment)
        mint = await self.mint_for(tx, option.token)
        paid = check_transfer(tx, option, self.fee_payer.pubkey(), mint)
        payer = paid.payer
        await self.admit(str(payer), option.pay_to)
        record = {
            "payer": str(payer),
            "pay_to": option.pay_to,
            "token": option.token,
            "amount": paid.amount,
            "fee": paid.fee,
            "memo": option.memo or "",
        }
        row, _ = await self.settle(self.cosign(tx), record, scheme=SCHEME_SVCPAY)
        if row["scheme"] != SCHEME_SVCPAY:
            raise SettlementError(
                "AlreadySettled",
                "this transaction was settled through x402's /settle; it pays for that, once",
                409,
            )
        return PaymentProof.model_validate_json(row["proof"])

    async def admit(self, payer: str, pay_to: str) -> None:
        """The facilitator's policy before it pays any fee: `payer` within its rate, and
        `pay_to` (a token account) registered by a provider unless settle_unregistered."""
        wait = self.rate_limit.take(payer)
        if wait:
            raise SettlementError(
                "RateLimited", f"too many payments from {payer}; retry in {wait:.1f} s", 429
            )
        if not self.settle_unregistered and not await self.registered(pay_to):
            raise SettlementError(
                "UnknownPayTo",
                f"payTo {pay_to} is not registered with this facilitator: its provider "
                "registers it (`svcpay facilitator provider add PROVIDER --pay-to ...`)",
                403,
            )

    async def registered(self, pay_to: str) -> bool:
        return (
            self.settle_unregistered
            or await self.store.providers.resource_owner(pay_to) is not None
        )

    async def landed_transaction(self, signature: str) -> VersionedTransaction | None:
        sig = Signature.from_string(signature)  # ValueError for anything else
        try:
            reply = await self.rpc.get_transaction(
                sig, encoding="base64", commitment=Confirmed, max_supported_transaction_version=0
            )
        except SolanaRpcException as e:
            raise SettlementError(
                "RpcUnavailable",
                f"the RPC node is unreachable; send the same request again in {RETRY_AFTER_SECS} s",
                503,
            ) from e
        found = reply.value
        if found is None:
            return None
        meta = found.transaction.meta
        if meta is None or meta.err is not None:
            return None
        tx = found.transaction.transaction
        return tx if isinstance(tx, VersionedTransaction) else None

    async def known(self, signature: str) -> bool:
        return await self.store.settlements.get(signature) is not None

    def cosign(self, tx: VersionedTransaction) -> VersionedTransaction:
        """`tx` with the fee payer's signature in slot 0 (deterministic: ed25519), so one
        message always yields one signature, its identity on chain and in the store."""
        signatures = list(tx.signatures)
        signatures[0] = self.fee_payer.sign_message(to_bytes_versioned(tx.message))
        return VersionedTransaction.populate(tx.message, signatures)

    async def simulate(self, signed: VersionedTransaction) -> None:
        """Runs `signed` (co-signed, so a node that checks signatures anyway accepts it)
        without committing it; SettlementError SimulationFailed when it would fail."""
        try:
            reply = await self.rpc.simulate_transaction(
                signed, sig_verify=False, commitment=Confirmed, replace_recent_blockhash=False
            )
        except RPCException as e:
            raise SettlementError("SimulationFailed", f"simulation refused: {e}", 422) from e
        except SolanaRpcException as e:
            raise SettlementError(
                "RpcUnavailable",
                f"the RPC node is unreachable; send the same request again in {RETRY_AFTER_SECS} s",
                503,
            ) from e
        if reply.value.err is not None:
            logs = " | ".join((reply.value.logs or [])[-3:])
            raise SettlementError(
                "SimulationFailed", f"simulation failed: {reply.value.err} {logs}"[:400], 422
            )

    async def settle(
        self,
        signed: VersionedTransaction,
        record: dict[str, Any],
        *,
        scheme: str,
        exclusive: bool = False,
        simulate: bool = False,
    ) -> tuple[dict[str, Any], bool]:
        """The durable path both schemes share: stores the co-signed transaction, sends it
        unless the cluster knows it already, waits for confirmation and records the proof
        and the payment event. Returns the settlement's row and whether this call recorded
        it settled (of any number of calls with one transaction, exactly one does).

        Args:
            signed: the checked, co-signed transaction.
            record: payer, pay_to (token account), token, amount (base units sent), memo,
                and fee (what a transfer-fee mint withholds of amount; None or absent for
                a mint without one).
            scheme: SCHEME_SVCPAY or SCHEME_X402; a row of the other scheme is returned
                untouched (one transaction pays through one scheme).
            exclusive: a row that another live request is settling is returned untouched
                (x402: the caller answers duplicate_settlement instead of waiting).
            simulate: simulate before the first send (a failure forgets the row).
        """
        key = str(signed.signatures[0])
        row, created = await self.store.settlements.begin(
            {
                **record,
                "signature": key,
                "network": self.network,
                "transaction": base64.b64encode(bytes(signed)).decode(),
                "status": "sending",
                "issued_at": 0,
                "created_at": int(time.time()),
                "scheme": scheme,
            }
        )
        if row["status"] == "settled" or row["scheme"] != scheme:
            return row, False
        task = self._settling.get(key)
        if exclusive and not created and (task is not None or not _abandoned(row)):
            return row, False  # another request (here or on another instance) is on it
        if task is None:
            if created and simulate:
                try:
                    await self.simulate(signed)
                except Exception:
                    await self._interrupted(key, forget=True)
                    raise
            task = asyncio.create_task(self._land(signed, row, created), name=f"settle {key[:8]}")
            self._settling[key] = task
            task.add_done_callback(self._settled)
        try:
            return await asyncio.wait_for(asyncio.shield(task), self.wait_secs)
        except TimeoutError:
            raise SettlementError(
                "SettlementPending",
                f"the transaction {key} was sent and is rebroadcast until it lands or its "
                "blockhash expires; submit the same request again for the proof",
                504,
            ) from None

    def _settled(self, task: asyncio.Task[tuple[dict[str, Any], bool]]) -> None:
        for key, known in list(self._settling.items()):
            if known is task:
                del self._settling[key]
        if not task.cancelled():
            task.exception()  # retrieved: a waiter that timed out no longer reads it

    async def _land(
        self, signed: VersionedTransaction, row: dict[str, Any], created: bool
    ) -> tuple[dict[str, Any], bool]:
        """Lands `signed` (svcpay.rpc.landing: rebroadcast until confirmed or expired by
        block height) and records the outcome: the proof when it landed, the row forgotten
        when it never will. An outage before anything was sent ends it with a 503."""
        sig = signed.signatures[0]
        key = str(sig)
        try:
            if not created and await self._landed(sig):  # a repeat: it may have landed
                return await self._finish(row)
            # A repeat of a payment received long ago (a request before an outage or a
            # restart, or another instance, stored it): its never-seen-valid window counts
            # from then, so a blockhash that expired meanwhile is answered BlockhashExpired
            # now, not after another 90 s on each instance it is retried on.
            outcome = await self.lander.land(
                signed, wait_secs=LAND_WAIT_SECS, received_at=float(row["created_at"])
            )
        except SettlementError as e:
            if e.status == 503:
                await self._interrupted(key, forget=False)
            else:  # it failed on chain: nothing was paid
                await self.store.settlements.forget(key)
            raise
        except Exception as e:
            if outage(e) is not None:
                await self._interrupted(key, forget=False)
            raise
        if isinstance(outcome, Landed) and outcome.err is None:
            return await self._finish(row)
        if isinstance(outcome, Unsent):  # nothing went out: the same request, later
            await self._interrupted(key, forget=created)
            raise SettlementError(
                "RpcUnavailable",
                f"the RPC node is unreachable ({outcome.reason[:200]}); send the same request "
                f"again in {RETRY_AFTER_SECS} s",
                503,
            ) from outcome.error
        if isinstance(outcome, Pending):  # not decided within LAND_WAIT_SECS: recovery will
            raise SettlementError(
                "SettlementPending",
                f"the transaction {key} is not yet confirmed; submit the same request again",
                504,
            )
        await self.store.settlements.forget(key)  # it did not land and never will
        raise _refusal(outcome)

    async def recover(self, older_than_secs: int = ABANDONED_AFTER_SECS) -> int:
        """After a restart: finishes the settlements that were sent but not recorded as
        settled (their events fire), forgets those that never landed. Rows younger than
        `older_than_secs` may still have a live request on them and are left to it.
        Returns how many were finished."""
        finished = 0
        for row in await self.store.settlements.pending():
            if row["created_at"] > time.time() - older_than_secs:
                continue
            try:
                landed = await self._landed(Signature.from_string(row["signature"]))
            except SettlementError:  # it failed on chain: nothing was paid
                await self.store.settlements.forget(row["signature"])
                continue
            if landed:
                await self._finish(row)
                finished += 1
            elif row["created_at"] < time.time() - BLOCKHASH_LIFETIME_SECS:
                await self.store.settlements.forget(row["signature"])  # expired unsent
        return finished

    async def _interrupted(self, key: str, *, forget: bool) -> None:
        """An outage ended this request: the row is forgotten if this request stored it and
        sent nothing, else marked interrupted (a repeat may take it over at once, where x402
        would otherwise refuse it as a settlement in progress). Best effort: the database
        may be what is down, and recovery finds the row either way."""
        with contextlib.suppress(Exception):
            if forget:
                await self.store.settlements.forget(key)
            else:
                await self.store.settlements.interrupted(key)

    async def _landed_quietly(self, sig: Signature) -> bool:
        try:
            return bool(await self._landed(sig))
        except SettlementError:
            return False

    async def _landed(self, sig: Signature) -> bool | None:
        """True if `sig` succeeded on chain, None if the cluster does not know it; raises
        SettlementFailed if it failed there."""
        landed = await self._chain.landed(str(sig))
        if landed is False:
            raise SettlementError("SettlementFailed", "the transaction failed on chain", 422)
        return landed

    async def _finish(self, row: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        """Records the landed settlement `row` (its proof and its event) and returns the
        stored row and whether this call recorded it. When the database fails here the
        transfer has still landed, and the chain holds the money: the answer is the proof
        all the same (recovery records it once the database is back), never an error that
        reads as "not paid"."""
        now = int(time.time())
        gross = int(row["amount"])
        withheld = row.get("fee")
        fee = 0 if withheld is None else int(withheld)
        # A transfer-fee mint's proof says what payTo received, and what was sent and
        # withheld beside it (signed extra fields: a gate checks `amount` as before).
        extra = {} if withheld is None else {"gross": str(gross), "fee": str(fee)}
        proof = PaymentProof(
            network=row["network"],
            transaction=row["signature"],
            payer=row["payer"],
            pay_to=row["pay_to"],
            token=row["token"],
            amount=str(gross - fee),
            memo=row["memo"],
            issued_at=now,
            expires_at=now + self.proof_ttl_secs,
            facilitator=str(self.fee_payer.pubkey()),
            **extra,
        ).signed_by(self.fee_payer)
        event = Event(
            id=new_id("evt"),
            type="payment.settled",
            created_at=now,
            data={
                "transaction": row["signature"],
                "payer": row["payer"],
                "payTo": row["pay_to"],
                "token": row["token"],
                "amount": str(gross),
                "fee": str(fee),
                "net": str(gross - fee),
                "memo": row["memo"],
                "network": row["network"],
            },
            mode="one-time",
            amount=gross,
            fee=fee or None,
        )
        try:
            stored, won = await self.store.settlements.finish(
                row["signature"], proof.model_dump_json(), event
            )
        except Exception as e:
            found = outage(e)
            if found is None or found.dependency != DATABASE:
                raise
            log.info("settlement %s landed; recording it waits for the database", row["signature"])
            return {**row, "status": "settled", "proof": proof.model_dump_json()}, True
        return {**row, "status": "settled", "proof": stored}, won

    async def check_proof(self, proof: PaymentProof) -> str | None:
        """None if `proof` is one this facilitator signed, unexpired, for a transaction that
        succeeded on chain; otherwise the reason."""
        if proof.facilitator != str(self.fee_payer.pubkey()) or not proof.signature_valid():
            return "the proof was not signed by this facilitator"
        if proof.expires_at < int(time.time()):
            return "the proof has expired"
        try:
            landed = await self._chain.landed(proof.transaction)
        except ValueError:
            return "the proof names no valid transaction"
        return None if landed else "the proof's transaction did not succeed on chain"


def _refusal(outcome: Outcome) -> SettlementError:
    """What a transaction that did not land, and never will, is answered with."""
    if isinstance(outcome, Landed):  # confirmed, but it failed
        return SettlementError(
            "SettlementFailed", f"the transaction failed on chain: {outcome.err}", 422
        )
    if isinstance(outcome, Expired):
        return SettlementError(
            "BlockhashExpired",
            "the transaction's blockhash expired before it landed; nothing was paid: sign again",
        )
    text = outcome.message if isinstance(outcome, Rejected) else str(outcome)
    if "custom program error: 0x1" in text or "Custom(1)" in text or "insufficient funds" in text:
        return SettlementError(
            "InsufficientFunds", "the payer's token account lacks the amount; top up USDC", 402
        )
    return SettlementError(
        "SettlementFailed", f"the transaction failed in simulation: {text[:300]}", 422
    )


def _abandoned(row: dict[str, Any]) -> bool:
    """No live request is on `row`: an outage ended the one that was, or it is old."""
    return row.get("error") == INTERRUPTED or (
        int(row["created_at"]) < time.time() - ABANDONED_AFTER_SECS
    )
