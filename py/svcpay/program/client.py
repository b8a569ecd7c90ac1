"""The async API over svc_billing: what providers, subscribers and the facilitator call.

Subscriptions are named by their id (the subscription account's address, sent in
`X-Svc-Sub`); plans by theirs (the spec's `planId`). Amounts are integers in base units
(`svcpay.amounts` converts "0.50" exactly). Failures raise the program's error as an
exception of the same name (`svcpay.program.errors`), or TransactionError.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import deque

from base58 import b58encode
from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Confirmed
from solana.rpc.models import MemcmpOpts
from solders.instruction import Instruction
from solders.keypair import Keypair
from solders.message import MessageV0
from solders.pubkey import Pubkey
from solders.rpc.responses import RpcBlockhash
from solders.signature import Signature
from solders.transaction import VersionedTransaction
from solders.transaction_status import TransactionConfirmationStatus
from spl.token.instructions import get_associated_token_address

from svcpay.program import errors, instructions, pda
from svcpay.program.events import decode_logs
from svcpay.program.generated.accounts.allowance import Allowance
from svcpay.program.generated.accounts.plan import Plan
from svcpay.program.generated.accounts.subscription import Subscription
from svcpay.program.generated.program_id import PROGRAM_ID
from svcpay.program.generated.types.subscription_status import Cancelled, Expired
from svcpay.program.receipts import RECEIPT_WAIT_SECS, failing_program, served_meta

# Receipt and TransactionError are imported from here too: re-exported.
from svcpay.program.receipts import Receipt as Receipt
from svcpay.program.receipts import TransactionError as TransactionError
from svcpay.program.tokens import TokenRoutes
from svcpay.protocol.programs import COMPUTE_BUDGET
from svcpay.rpc import landing
from svcpay.rpc.blockhash import StaleBlockhash, fresh_blockhash
from svcpay.rpc.fees import BUDGET_BYTES, PriorityFees, budget, compute_limit, simulated_units
from svcpay.rpc.landing import Lander, Pending, Rejected, Unsent

CLOCK_SYSVAR = Pubkey.from_string("SysvarC1ock11111111111111111111111111111111")
# A blockhash is valid for 150 slots (about a minute); after this long an unconfirmed
# transaction can never land, so one signed anew cannot be a second copy of it.
BLOCKHASH_LIFETIME_SECS = 120
# How long send_signed waits for a landing: past a blockhash's lifetime, with room.
LAND_WAIT_SECS = 150.0


def is_live(sub: Subscription) -> bool:
    """Whether a subscription still counts (not cancelled or expired), as the program says."""
    return not isinstance(sub.status, (Cancelled, Expired))


# What counts as landed: a `processed` transaction's fork may still be dropped.
LANDED_STATUSES = (TransactionConfirmationStatus.Confirmed, TransactionConfirmationStatus.Finalized)


def status_name(subscription: Subscription) -> str:
    """ "Active", "PastDue", "Paused", "Cancelled" or "Expired"."""
    return type(subscription.status).__name__


class BillingClient:
    def __init__(
        self, rpc: AsyncClient, program_id: Pubkey = PROGRAM_ID, *, fees: PriorityFees | None = None
    ) -> None:
        """`fees`: give each transaction a compute-unit limit measured by simulation and a
        price estimated from the cluster's recent fees (the facilitator's own transactions;
        svcpay.rpc.fees). Without it, transactions carry no compute budget."""
        self.rpc = rpc
        self.program_id = program_id
        self.fees = fees
        self.tokens = TokenRoutes(rpc)
        self._sent: deque[bytes] = deque(maxlen=512)
        # The last block height at which each transaction signed here can land.
        self._valid_until: dict[str, int] = {}
        self.lander = Lander(rpc)

    @classmethod
    def connect(cls, url: str) -> BillingClient:
        """A client on `url` (one RPC URL, or several comma-separated) through svcpay.rpc:
        429s, 5xxs and timeouts are waited out and failed over."""
        from svcpay.rpc import connect

        return cls(connect(url))

    async def close(self) -> None:
        await self.lander.aclose()
        await self.rpc.close()

    async def send(self, ixs: list[Instruction], signers: list[Keypair]) -> Receipt:
        """Sends one transaction (the first signer pays), waits for confirmation."""
        return await self.send_signed(await self.sign(ixs, signers))

    async def sign(self, ixs: list[Instruction], signers: list[Keypair]) -> VersionedTransaction:
        """A signed transaction of `ixs` under a recent blockhash (valid about a minute).
        The same message under the same blockhash is the same transaction, which a cluster
        drops as a duplicate: a deliberate repeat waits for the next blockhash, whether this
        client or another process (the CLI run twice) sent the first."""
        # The budget's reads and the blockhash at once: each is a round trip (more under
        # 429s), and a renewal pass waits for all of them before its first send.
        ixs, latest = await asyncio.gather(
            self.budgeted(ixs, signers[0].pubkey()), self._blockhash()
        )
        while True:
            msg = MessageV0.try_compile(signers[0].pubkey(), ixs, [], latest.blockhash)
            tx = VersionedTransaction(msg, signers)
            if bytes(msg) not in self._sent and not await self._known(tx.signatures[0]):
                self._sent.append(bytes(msg))
                if len(self._valid_until) > 4096:  # the oldest are long expired
                    for key in list(self._valid_until)[:2048]:
                        del self._valid_until[key]
                self._valid_until[str(tx.signatures[0])] = latest.last_valid_block_height
                return tx
            await asyncio.sleep(0.1)
            latest = await self._blockhash()

    async def _blockhash(self) -> RpcBlockhash:
        """A blockhash that can still land a transaction (svcpay.rpc.blockhash); a node that
        gives only spent ones raises TransactionError(expired=True): nothing was sent."""
        try:
            return await fresh_blockhash(self.rpc, Confirmed)
        except StaleBlockhash as e:
            raise TransactionError(str(e), expired=True) from None

    async def _known(self, signature: Signature) -> bool:
        """Whether the cluster already holds `signature`: the same intent sent before under
        this blockhash, whose outcome would be taken for this one's."""
        found = (await self.rpc.get_signature_statuses([signature])).value
        return bool(found) and found[0] is not None

    @property
    def budget_bytes(self) -> int:
        """What the compute budget adds to each transaction's size (0 without `fees`): what
        packing many instructions into one transaction leaves free."""
        return BUDGET_BYTES if self.fees is not None else 0

    async def budgeted(self, ixs: list[Instruction], payer: Pubkey) -> list[Instruction]:
        """`ixs` behind a compute-unit limit (a simulation's units, plus a margin) and price
        (the cluster's recent fees for the accounts they write), with `fees`; else, or when
        the simulation fails (the send's preflight then says why), `ixs` as they are."""
        if self.fees is None or any(ix.program_id == COMPUTE_BUDGET for ix in ixs):
            return ixs
        writable = {m.pubkey for ix in ixs for m in ix.accounts if m.is_writable} | {payer}
        # The price and the simulation at once: a compute-unit price costs the same units
        # whatever its value, so the trial carries a stand-in.
        price, units = await asyncio.gather(
            self.fees.price(sorted(writable, key=str)), simulated_units(self.rpc, ixs, payer)
        )
        if units is None:  # no estimate: sent as before, its preflight decides
            return ixs
        return [*budget(compute_limit(units), price), *ixs]

    async def send_signed(self, tx: VersionedTransaction) -> Receipt:
        """Sends `tx` and rebroadcasts it until it is confirmed or its blockhash has expired
        by block height (svcpay.rpc.landing), then returns its receipt or raises its error.
        An RPC node that could not be reached at all raises as the transport raised it (an
        outage, to svcpay.rpc_errors)."""
        signature = str(tx.signatures[0])
        outcome = await self.lander.land(
            tx, wait_secs=LAND_WAIT_SECS,
            last_valid_block_height=self._valid_until.get(signature),
        )  # fmt: skip
        if isinstance(outcome, Unsent):
            if outcome.error is not None:
                raise outcome.error
            raise TransactionError(f"transaction {signature} could not be sent: {outcome.reason}")
        if isinstance(outcome, Rejected):
            data = outcome.data if isinstance(outcome.data, dict) else {}
            logs = [str(line) for line in data.get("logs") or []]
            err = json.dumps(
                data.get("err")
            )  # the RPC's JSON, as errors.from_logs_or_error reads it
            raise self._program_error(err, logs) or TransactionError(
                outcome.message, logs, rejected="InstructionError" in err
            )
        if isinstance(outcome, landing.Expired):
            raise TransactionError(
                f"transaction {signature} expired before it landed (its blockhash's last "
                "valid block height passed): sign it again",
                expired=True,
            )
        if isinstance(outcome, Pending):
            raise TransactionError(f"transaction {signature} sent but not confirmed yet")
        sig = Signature.from_string(signature)
        meta = await served_meta(self.rpc, sig)
        if meta is None:
            if outcome.err is not None:
                raise self._program_error(outcome.err, []) or TransactionError(
                    str(outcome.err), rejected="InstructionError" in str(outcome.err)
                )
            raise TransactionError(
                f"transaction {sig} landed in slot {outcome.slot}, but the RPC node did not "
                f"serve it within {RECEIPT_WAIT_SECS:.0f} s: it took effect, so do not send "
                "it again; its receipt is unknown"
            )
        logs = list(meta.log_messages or [])
        if meta.err is not None:
            raise self._program_error(meta.err, logs) or TransactionError(
                str(meta.err), logs, rejected="InstructionError" in str(meta.err)
            )
        return Receipt(str(sig), meta.compute_units_consumed or 0, logs, decode_logs(logs))

    def _program_error(self, err: object, logs: list[str]) -> errors.ProgramError | None:
        """svc_billing's error, if the failure is its own: a custom error that another program
        raised inside it (a Token-2022 transfer hook refusing, say) carries the same kind of
        code, and is a TransactionError instead, with `failed_in` set."""
        origin = failing_program(logs)
        if origin is not None and origin != str(self.program_id):
            return None
        return errors.from_logs_or_error(err)

    async def landed(self, signature: str) -> bool | None:
        """True if the transaction succeeded on chain, False if it failed there (each at
        `confirmed` or `finalized`), None if the cluster does not know it, or only as
        `processed` (yet, or ever: it may have expired unsent)."""
        sig = Signature.from_string(signature)
        # With history: the recent status cache forgets a transaction after ~2 minutes, and
        # "unknown" would then read as "never landed" (and be sent again).
        status = (
            await self.rpc.get_signature_statuses([sig], search_transaction_history=True)
        ).value[0]
        if status is None or status.confirmation_status not in LANDED_STATUSES:
            return None  # unknown, or only processed: its fork may still be dropped
        return status.err is None

    async def deduct_transaction(
        self,
        subscription: Pubkey | str,
        amount: int,
        authority: Keypair,
        known: Subscription | None = None,
    ) -> VersionedTransaction:
        """A signed, unsent deduct_allowance (for callers that record it before sending);
        `known` is the subscription's account when the caller has just read it."""
        sub = known or await self._subscription(subscription)
        route = await self.tokens.route(
            sub.terms.mint,
            source=sub.token_account,
            destination=sub.terms.destination,
            authority=pda.delegate_address(sub.subscriber, self.program_id),
            amount=amount,
        )
        ix = instructions.deduct_allowance(
            authority.pubkey(),
            sub.plan,
            sub.subscriber,
            sub.token_account,
            sub.terms.mint,
            sub.terms.destination,
            amount,
            token_program=route.program,
            extra=route.extra,
        )
        return await self.sign([ix], [authority])

    async def collect_instruction(self, sub: Subscription) -> Instruction:
        """`collect` for a fetched subscription, with its mint's token program and, for a
        hooked Token-2022 mint, the hook's accounts."""
        route = await self.tokens.route(
            sub.terms.mint,
            source=sub.token_account,
            destination=sub.terms.destination,
            authority=pda.delegate_address(sub.subscriber, self.program_id),
            amount=sub.terms.amount,
        )
        return instructions.collect_subscription(
            sub, token_program=route.program, extra=route.extra
        )

    # -- reads ----------------------------------------------------------------------
    async def _data(self, address: Pubkey) -> bytes | None:
        info = (await self.rpc.get_account_info(address, Confirmed)).value
        return bytes(info.data) if info is not None and info.owner == self.program_id else None

    async def fetch_plan(self, plan: Pubkey) -> Plan | None:
        data = await self._data(plan)
        return Plan.decode(data) if data else None

    async def fetch_subscription(self, subscription: Pubkey | str) -> Subscription | None:
        data = await self._data(_key(subscription))
        return Subscription.decode(data) if data else None

    async def fetch_allowance(self, subscription: Pubkey | str) -> Allowance | None:
        data = await self._data(pda.allowance_address(_key(subscription), self.program_id))
        return Allowance.decode(data) if data else None

    async def is_active(self, subscription_id: Pubkey | str) -> bool:
        """Whether `subscription_id` names an ACTIVE subscription (what a gate checks).
        A malformed id is simply not active."""
        try:
            sub = await self.fetch_subscription(subscription_id)
        except ValueError:
            return False
        return sub is not None and status_name(sub) == "Active"

    async def subscriptions(self, plan: Pubkey | None = None) -> list[tuple[Pubkey, Subscription]]:
        """Every subscription of `plan` (or of every plan), with its address."""
        filters: list[int | MemcmpOpts] = [
            MemcmpOpts(offset=0, bytes=b58encode(Subscription.discriminator).decode())
        ]
        if plan is not None:
            filters.append(MemcmpOpts(offset=8, bytes=str(plan)))
        accounts = (
            await self.rpc.get_program_accounts(
                self.program_id, Confirmed, encoding="base64", filters=filters
            )
        ).value
        return [(k.pubkey, Subscription.decode(bytes(k.account.data))) for k in accounts]

    async def due_subscriptions(
        self, plan: Pubkey | None = None, now: int | None = None
    ) -> list[tuple[Pubkey, Subscription]]:
        """Subscriptions `collect` would act on at `now` (default: the cluster's clock, which
        is what the program checks): ACTIVE ones whose period ended, and every PAST DUE one
        (retry or expire)."""
        now = await self.chain_time() if now is None else now
        due = []
        for key, sub in await self.subscriptions(plan):
            status = status_name(sub)
            if status == "PastDue" or (status == "Active" and sub.current_period_end <= now):
                due.append((key, sub))
        return due

    async def chain_time(self) -> int:
        """The Clock sysvar's unix_timestamp (it may differ from this machine's clock)."""
        info = (await self.rpc.get_account_info(CLOCK_SYSVAR, Confirmed)).value
        if info is None:
            return int(time.time())
        return int.from_bytes(bytes(info.data)[32:40], "little", signed=True)

    # -- provider ---------------------------------------------------------------------
    async def create_plan(
        self, authority: Keypair, *, plan_id: int, mint: Pubkey, destination: Pubkey,
        billing_authority: Pubkey, amount: int, period_secs: int, grace_secs: int = 0,
    ) -> Pubkey:  # fmt: skip
        """Publishes a plan and returns its id (address)."""
        ix = instructions.create_plan(
            authority.pubkey(),
            plan_id,
            mint,
            destination,
            billing_authority,
            amount,
            period_secs,
            grace_secs,
            token_program=await self.tokens.program(mint),
        )
        await self.send([ix], [authority])
        return pda.plan_address(authority.pubkey(), plan_id, self.program_id)

    async def update_plan(
        self,
        authority: Keypair,
        plan: Pubkey,
        billing_authority: Pubkey | None = None,
        grace_secs: int | None = None,
    ) -> Receipt:
        """Changes the billing authority and/or grace (never what subscribers pay)."""
        ix = instructions.update_plan(authority.pubkey(), plan, billing_authority, grace_secs)
        return await self.send([ix], [authority])

    async def close_plan(self, authority: Keypair, plan: Pubkey) -> Receipt:
        """Closes a plan with no live subscriptions; the rent goes back to `authority`."""
        return await self.send([instructions.close_plan(authority.pubkey(), plan)], [authority])

    async def deprecate_plan(self, authority: Keypair, plan: Pubkey) -> Receipt:
        return await self.send([instructions.deprecate_plan(authority.pubkey(), plan)], [authority])

    # -- subscriber -------------------------------------------------------------------
    async def subscribe(
        self, plan_id: Pubkey | str, subscriber: Keypair, max_overage: int | None = None,
        token_account: Pubkey | None = None,
    ) -> Pubkey:  # fmt: skip
        """Subscribes (first period charged now) and returns the subscription id. Pays from
        `token_account`, by default the subscriber's associated account of the plan's mint.

        A live subscription the subscriber already holds to the plan is returned as it is
        (nothing is charged); an ended one is replaced by a new one at the same address."""
        plan_key = _key(plan_id)
        plan = await self.fetch_plan(plan_key)
        if plan is None:
            raise ValueError(f"no svc_billing plan at {plan_key}")
        address = pda.subscription_address(plan_key, subscriber.pubkey(), self.program_id)
        previous = await self.fetch_subscription(address)
        if previous is not None and is_live(previous):
            return address
        program = await self.tokens.program(plan.mint)
        source = token_account or get_associated_token_address(
            subscriber.pubkey(), plan.mint, program
        )
        route = await self.tokens.route(
            plan.mint,
            source=source,
            destination=plan.destination,
            authority=pda.delegate_address(subscriber.pubkey(), self.program_id),
            amount=plan.amount,
        )
        ix = instructions.subscribe(
            plan_key,
            subscriber.pubkey(),
            source,
            plan.mint,
            plan.destination,
            max_overage,
            previous_allowance=previous is not None and previous.has_allowance,
            token_program=route.program,
            extra=route.extra,
        )
        await self.send([ix], [subscriber])
        return address

    async def held_subscription(
        self, plan_id: Pubkey | str, subscriber: Pubkey
    ) -> tuple[Pubkey, Subscription] | None:
        """The live subscription `subscriber` holds to the plan, if any (active, past due or
        paused; not cancelled or expired)."""
        address = pda.subscription_address(_key(plan_id), subscriber, self.program_id)
        sub = await self.fetch_subscription(address)
        return (address, sub) if sub is not None and is_live(sub) else None

    async def set_allowance(
        self, subscription: Pubkey | str, cap: int, subscriber: Keypair
    ) -> Receipt:
        """Sets the metered cap per cycle, adding the allowance to a live subscription made
        without one."""
        sub = await self._subscription(subscription)
        ix = instructions.set_allowance_cap(subscriber.pubkey(), sub.plan, cap)
        return await self.send([ix], [subscriber])

    async def increase_allowance(
        self, subscription: Pubkey | str, amount: int, subscriber: Keypair
    ) -> Receipt:
        allowance = await self.fetch_allowance(subscription)
        if allowance is None:
            raise errors.error_class("NoAllowance")("this subscription has no allowance")
        return await self.set_allowance(subscription, allowance.cap + amount, subscriber)

    async def pause(self, subscription: Pubkey | str, authority: Keypair) -> Receipt:
        sub = await self._subscription(subscription)
        return await self.send(
            [instructions.pause(authority.pubkey(), sub.plan, sub.subscriber)], [authority]
        )

    async def resume(self, subscription: Pubkey | str, authority: Keypair) -> Receipt:
        sub = await self._subscription(subscription)
        return await self.send(
            [instructions.resume(authority.pubkey(), sub.plan, sub.subscriber)], [authority]
        )

    async def cancel(
        self, subscription: Pubkey | str, authority: Keypair, at_period_end: bool = False
    ) -> Receipt:
        sub = await self._subscription(subscription)
        ix = instructions.cancel(authority.pubkey(), sub.plan, sub.subscriber, at_period_end)
        return await self.send([ix], [authority])

    async def close_subscription(self, subscription: Pubkey | str, subscriber: Keypair) -> Receipt:
        """Closes an ended subscription (and its allowance) for the rent."""
        sub = await self._subscription(subscription)
        ix = instructions.close_subscription(subscriber.pubkey(), sub.plan, sub.has_allowance)
        return await self.send([ix], [subscriber])

    # -- facilitator ------------------------------------------------------------------
    async def collect(self, subscription: Pubkey | str, payer: Keypair) -> Receipt:
        """Renews if due; the receipt carries SubscriptionRenewed, RenewalFailed or
        SubscriptionEnded."""
        sub = await self._subscription(subscription)
        return await self.send([await self.collect_instruction(sub)], [payer])

    async def deduct_allowance(
        self, subscription: Pubkey | str, amount: int, authority: Keypair
    ) -> Receipt:
        """Charges metered usage; raises AllowanceExhausted past the cap."""
        tx = await self.deduct_transaction(subscription, amount, authority)
        return await self.send_signed(tx)

    async def _subscription(self, subscription: Pubkey | str) -> Subscription:
        sub = await self.fetch_subscription(subscription)
        if sub is None:
            raise ValueError(f"no svc_billing subscription at {subscription}")
        return sub


def _key(value: Pubkey | str) -> Pubkey:
    return value if isinstance(value, Pubkey) else Pubkey.from_string(value)
