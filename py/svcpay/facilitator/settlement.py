"""Settling a client's signed transfer: check it pays exactly the terms, co-sign as fee
payer, send, confirm, and sign the proof (docs/adr/0008).

The client builds and signs (as token authority) a v0 transaction whose fee payer is the
facilitator: compute-budget instructions (capped), one SPL Token `TransferChecked` of the
exact amount of the terms' mint to `payTo`, and one memo instruction with the terms' memo.
Anything else, or any use of the facilitator's key beyond paying the fee, is refused.

`Settler.settle` is the durable send-and-confirm path; x402's `/settle`
(`svcpay.schemes.x402_exact.facilitator`) checks by its own rules and settles through it.
"""

from __future__ import annotations

import asyncio
import base64
import struct
import time
from typing import Any

from solana.exceptions import SolanaRpcException
from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Confirmed
from solana.rpc.core import (
    RPCException,
    TransactionExpiredBlockheightExceededError,
    UnconfirmedTxError,
)
from solana.rpc.models import TxOpts
from solders.keypair import Keypair
from solders.message import to_bytes_versioned
from solders.pubkey import Pubkey
from solders.signature import Signature
from solders.transaction import VersionedTransaction

from svcpay.facilitator.store import Event, Store, new_id
from svcpay.program.client import BLOCKHASH_LIFETIME_SECS, BillingClient
from svcpay.protocol.models import PaymentOption
from svcpay.protocol.programs import COMPUTE_BUDGET, MEMO_PROGRAM, TOKEN_PROGRAM
from svcpay.protocol.proof import PaymentProof

TRANSFER_CHECKED = 12
# What a payment may cost the facilitator: one signature's fee (the client's signature is
# the only other one) plus at most MAX_COMPUTE_UNIT_LIMIT * MAX_COMPUTE_UNIT_PRICE / 10^6
# lamports of priority fee (50,000 lamports). The transfer and the memo need about 10,000.
MAX_COMPUTE_UNIT_LIMIT = 50_000
MAX_COMPUTE_UNIT_PRICE = 1_000_000  # micro-lamports per compute unit
SCHEME_SVCPAY = "svcpay"  # settled by /authorize
SCHEME_X402 = "x402-exact"  # settled by x402's /settle
# A settlement still "sending" this long after it was stored has no live request on it (a
# request waits at most 90 s for confirmation): recovery and x402 retries may take it over.
ABANDONED_AFTER_SECS = 120


class SettlementError(Exception):
    """A payment cannot be settled. `name` is the spec's error (InsufficientFunds) or one of
    ours (InvalidTransaction, TermsMismatch, BlockhashExpired, SettlementFailed)."""

    def __init__(self, name: str, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.name, self.message, self.status = name, message, status


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
    ) -> None:
        """Unless `settle_unregistered`, only payments to a payTo account a provider
        registered are settled: the facilitator pays the fees, and would otherwise pay them
        for anyone's transfers."""
        self.rpc, self.fee_payer, self.store, self.network = rpc, fee_payer, store, network
        self._chain = BillingClient(rpc)
        self.proof_ttl_secs = proof_ttl_secs
        self.settle_unregistered = settle_unregistered
        self.rate_limit = rate_limit or RateLimit(rate=5.0, burst=20)
        self._locks: dict[str, asyncio.Lock] = {}

    async def authorize(self, signed_payment: bytes, option: PaymentOption) -> PaymentProof:
        """Settles `signed_payment` for `option` and returns the signed proof."""
        try:
            tx = VersionedTransaction.from_bytes(signed_payment)
        except ValueError as e:
            raise SettlementError(
                "InvalidTransaction", f"signedPayment is not a transaction: {e}"
            ) from e
        try:
            payer = self._check(tx, option)
        except IndexError as e:  # an index past the accounts or signatures it carries
            raise SettlementError(
                "InvalidTransaction", "the transaction names accounts or signatures it lacks"
            ) from e
        await self.admit(str(payer), option.pay_to)
        record = {
            "payer": str(payer),
            "pay_to": option.pay_to,
            "token": option.token,
            "amount": int(option.amount),
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
            raise SettlementError("Unavailable", "the RPC node did not answer", 503) from e
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
            record: payer, pay_to (token account), token, amount (base units), memo.
            scheme: SCHEME_SVCPAY or SCHEME_X402; a row of the other scheme is returned
                untouched (one transaction pays through one scheme).
            exclusive: a row that another live request is settling is returned untouched
                (x402: the caller answers duplicate_settlement instead of waiting).
            simulate: simulate before the first send (a failure forgets the row).
        """
        sig = signed.signatures[0]
        key = str(sig)
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            try:
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
                if exclusive and not created and not _abandoned(row):
                    return row, False  # another instance is sending it now
                try:
                    if created and simulate:
                        await self.simulate(signed)
                    if await self._landed(sig) is None:
                        await self._send(signed)
                except SettlementError as e:
                    if e.name == "SettlementPending":
                        raise
                    # Another request or instance may have landed this very transaction
                    # (ours then fails as a duplicate): look before forgetting it.
                    if await self._landed_quietly(sig):
                        return await self._finish(row)
                    await self.store.settlements.forget(key)  # nothing was paid
                    raise
                return await self._finish(row)
            finally:
                # The lock only saves duplicate work within this process; the database and
                # the chain (one signature, one transaction) are what make this safe.
                self._locks.pop(key, None)

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
        now = int(time.time())
        proof = PaymentProof(
            network=row["network"],
            transaction=row["signature"],
            payer=row["payer"],
            pay_to=row["pay_to"],
            token=row["token"],
            amount=str(int(row["amount"])),
            memo=row["memo"],
            issued_at=now,
            expires_at=now + self.proof_ttl_secs,
            facilitator=str(self.fee_payer.pubkey()),
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
                "amount": str(int(row["amount"])),
                "memo": row["memo"],
                "network": row["network"],
            },
            mode="one-time",
            amount=int(row["amount"]),
        )
        stored, won = await self.store.settlements.finish(
            row["signature"], proof.model_dump_json(), event
        )
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

    def _check(self, tx: VersionedTransaction, option: PaymentOption) -> Pubkey:
        msg = tx.message
        keys = list(msg.account_keys)
        me = self.fee_payer.pubkey()
        if not keys or keys[0] != me:
            raise SettlementError(
                "InvalidTransaction", f"the fee payer must be the facilitator {me}"
            )
        if msg.header.num_required_signatures != 2:
            raise SettlementError(
                "InvalidTransaction",
                "exactly two signers: the facilitator (fee payer) and the token authority",
            )
        if getattr(msg, "address_table_lookups", None):
            raise SettlementError("InvalidTransaction", "address lookup tables are not allowed")
        if int(option.amount) == 0:
            raise SettlementError("InvalidRequest", "the amount must be positive")
        transfers, memos, limits = [], [], 0
        for ix in msg.instructions:
            program = keys[ix.program_id_index]
            accounts = [keys[i] for i in bytes(ix.accounts)]
            if me in accounts:
                raise SettlementError(
                    "InvalidTransaction", "an instruction uses the facilitator's key"
                )
            data = bytes(ix.data)
            if program == COMPUTE_BUDGET:
                limits += _check_budget(data)
            elif (
                program == TOKEN_PROGRAM
                and data[:1] == bytes([TRANSFER_CHECKED])
                and len(data) == 10
            ):
                transfers.append((accounts, struct.unpack_from("<Q", data, 1)[0]))
            elif program == MEMO_PROGRAM:
                memos.append(data.decode("utf-8", "replace"))
            else:
                raise SettlementError(
                    "InvalidTransaction", f"instruction of program {program} is not allowed"
                )
        if limits != 1:
            raise SettlementError(
                "InvalidTransaction",
                f"need exactly one SetComputeUnitLimit (at most {MAX_COMPUTE_UNIT_LIMIT})",
            )
        if len(transfers) != 1 or len(memos) != 1:
            raise SettlementError(
                "InvalidTransaction", "need exactly one TransferChecked and one memo"
            )
        (accounts, amount), memo = transfers[0], memos[0]
        if len(accounts) < 4:
            raise SettlementError("InvalidTransaction", "TransferChecked lacks accounts")
        _, mint, destination, authority = accounts[:4]
        checks = (
            ("mint", str(mint), option.token),
            ("destination", str(destination), option.pay_to),
            ("amount", str(amount), option.amount),
            ("memo", memo, option.memo or ""),
        )
        for what, got, want in checks:
            if got != want:
                raise SettlementError(
                    "TermsMismatch", f"the transfer's {what} is {got}, the terms say {want}"
                )
        signer_index = keys.index(authority)
        if signer_index >= msg.header.num_required_signatures:
            raise SettlementError("InvalidTransaction", "the token authority must sign")
        if not tx.signatures[signer_index].verify(authority, to_bytes_versioned(msg)):
            raise SettlementError(
                "InvalidTransaction", "the token authority's signature does not verify"
            )
        return authority

    async def _send(self, tx: VersionedTransaction) -> None:
        try:
            sig = (
                await self.rpc.send_transaction(tx, opts=TxOpts(preflight_commitment=Confirmed))
            ).value
        except RPCException as e:
            text = str(e)
            if "BlockhashNotFound" in text or "Blockhash not found" in text:
                raise SettlementError(
                    "BlockhashExpired", "the transaction's blockhash expired; sign again"
                ) from e
            if (
                "custom program error: 0x1" in text
                or "Custom(1)" in text
                or "insufficient funds" in text
            ):
                raise SettlementError(
                    "InsufficientFunds",
                    "the payer's token account lacks the amount; top up USDC",
                    402,
                ) from e
            raise SettlementError(
                "SettlementFailed", f"the transaction failed in simulation: {text[:300]}", 422
            ) from e
        try:
            confirmed = await self.rpc.confirm_transaction(sig, Confirmed, sleep_seconds=0.05)
        except (
            TimeoutError,
            UnconfirmedTxError,
            TransactionExpiredBlockheightExceededError,
        ) as e:
            raise SettlementError(
                "SettlementPending",
                "the transaction was sent but not yet confirmed; submit the same request again",
                504,
            ) from e
        status = confirmed.value[0] if confirmed.value else None
        if status is not None and status.err is not None:  # confirmed, but it failed
            raise SettlementError(
                "SettlementFailed", f"the transaction failed on chain: {status.err}", 422
            )


def _check_budget(data: bytes) -> int:
    """1 for a SetComputeUnitLimit within the cap, 0 for a SetComputeUnitPrice within its
    cap; anything else is refused."""
    if data[:1] == b"\x02" and len(data) == 5:  # SetComputeUnitLimit(u32)
        if struct.unpack_from("<I", data, 1)[0] > MAX_COMPUTE_UNIT_LIMIT:
            raise SettlementError(
                "InvalidTransaction", f"compute unit limit above {MAX_COMPUTE_UNIT_LIMIT}"
            )
        return 1
    if data[:1] == b"\x03" and len(data) == 9:  # SetComputeUnitPrice(u64)
        if struct.unpack_from("<Q", data, 1)[0] > MAX_COMPUTE_UNIT_PRICE:
            raise SettlementError(
                "InvalidTransaction", f"compute unit price above {MAX_COMPUTE_UNIT_PRICE}"
            )
        return 0
    raise SettlementError(
        "InvalidTransaction", "only compute unit limit and price instructions are allowed"
    )


def _abandoned(row: dict[str, Any]) -> bool:
    return int(row["created_at"]) < time.time() - ABANDONED_AFTER_SECS
