"""The paying side of MPP Solana `charge`: choose a `solana`/`charge` challenge a client can
pay, and build its credential. Pull (the server pays the fee, `feePayer: true`) is preferred:
the transaction is `[SetComputeUnitLimit, SetComputeUnitPrice, TransferChecked, Memo
(externalId)]`, fee payer the server's key, signed by the payer only; push (`feePayer:
false`) sends that transaction itself, waits for `confirmed`, and hands over its signature.
A pushed transaction is landed as svcpay's own are (svcpay.rpc.landing: rebroadcast until
confirmed or expired by block height), so a leader that drops it costs a second, not the
payment. `currency` may be a mint or a symbol pay-kit servers send (USDC, PYUSD, USDT), resolved for
the network as pay-kit resolves it (a local validator uses mainnet's mints). The charge's
amount is what the recipient receives: for a Token-2022 mint with a transfer fee the
transfer is of the gross that leaves it the amount after this epoch's fee, and a hooked
mint's transfer carries the hook's accounts (docs/adr/0031)."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Confirmed, Finalized
from solders.compute_budget import set_compute_unit_limit, set_compute_unit_price
from solders.hash import Hash
from solders.instruction import AccountMeta, Instruction
from solders.keypair import Keypair
from solders.message import MessageV0, to_bytes_versioned
from solders.pubkey import Pubkey
from solders.signature import Signature
from solders.transaction import VersionedTransaction
from spl.token.instructions import transfer_checked
from spl.token.models import TransferCheckedParams

from svcpay.protocol import mpp
from svcpay.protocol.mints import ChainMints, MintUnavailable
from svcpay.protocol.programs import MEMO_PROGRAM, TOKEN_2022_PROGRAM, TOKEN_PROGRAM
from svcpay.protocol.stablecoins import DEVNET, MAINNET, mint_of
from svcpay.rpc.fees import PriorityFees, unit_price
from svcpay.rpc.landing import Expired, Landed, Lander, Pending, Rejected, Unsent
from svcpay.schemes.mpp_charge.wire import INTENT, METHOD
from svcpay.schemes.x402_exact.svm import associated_token_address

COMPUTE_UNIT_LIMIT = 50_000  # a transfer and a memo need about 10,000
HOOK_COMPUTE_UNITS = 60_000  # added for a transfer-hook mint: Token-2022 calls the hook
COMPUTE_UNIT_PRICE = 1  # micro-lamports: pay-kit's servers accept at most 10,000 when paying
# A pushed charge's flight ends when it lands or its blockhash expires by block height (about
# a minute on a real cluster); this bounds a node that stops answering.
PUSH_WAIT_SECS = 90.0


class CannotPay(Exception):
    """The challenge cannot be paid by this client; the message says why."""


class PushFailed(Exception):
    """A pushed charge did not land. `nothing_paid`: it never can (refused, expired, failed
    on chain), so its amount may be spent again; else it may still land."""

    def __init__(self, message: str, *, nothing_paid: bool) -> None:
        super().__init__(message)
        self.nothing_paid = nothing_paid


@dataclass(frozen=True)
class ChargeOffer:
    """A payable `solana`/`charge` challenge, its request read."""

    challenge: mpp.Challenge
    amount: int
    mint: str
    recipient: str
    decimals: int
    token_program: str
    fee_payer: str | None  # the server's key (pull), None (push)
    external_id: str | None
    recent_blockhash: str | None
    network: str = "mainnet"  # methodDetails.network (the draft's default)

    @property
    def pull(self) -> bool:
        return self.fee_payer is not None


def resolve_mint(currency: str, network: str) -> str:
    """A mint address for `currency` (a mint, or a stablecoin symbol) on `network`."""
    # MPP names mainnet, devnet, localnet; a local validator uses mainnet's addresses, as
    # pay-kit's servers (and the demo's USDC) do.
    net = {"mainnet": MAINNET, "mainnet-beta": MAINNET, "localnet": MAINNET, "devnet": DEVNET}
    known = mint_of(currency, net[network]) if network in net else None
    if known is not None:
        return known
    try:
        Pubkey.from_string(currency)
    except ValueError:
        raise CannotPay(
            f"currency {currency!r} is neither a mint nor a stablecoin known on {network}"
        ) from None
    return currency


def offers(response_headers: list[str]) -> list[ChargeOffer]:
    """The `solana`/`charge` challenges of a 402's `WWW-Authenticate` values that a token
    payer can pay (SPL, no splits), pull ones first; others are skipped."""
    found = []
    for challenge in mpp.parse_challenges(response_headers):
        if (challenge.method, challenge.intent) != (METHOD, INTENT):
            continue
        try:
            found.append(read(challenge))
        except (CannotPay, KeyError, TypeError, ValueError, mpp.MppError):
            continue
    return sorted(found, key=lambda o: not o.pull)


def read(challenge: mpp.Challenge) -> ChargeOffer:
    request: Any = challenge.request_json
    details = request.get("methodDetails") or {}
    if request.get("splits") or details.get("splits"):
        raise CannotPay("split payments are not supported")
    currency = str(request["currency"])
    if currency.lower() == "sol":
        raise CannotPay("this client pays in tokens, not SOL")
    network = str(details.get("network", "mainnet"))
    fee_payer = details.get("feePayerKey") if details.get("feePayer") else None
    return ChargeOffer(
        challenge=challenge,
        amount=int(request["amount"]),
        mint=resolve_mint(currency, network),
        recipient=str(request["recipient"]),
        decimals=int(details["decimals"]),
        token_program=str(details.get("tokenProgram") or TOKEN_PROGRAM),
        fee_payer=str(fee_payer) if fee_payer else None,
        external_id=request.get("externalId"),
        recent_blockhash=details.get("recentBlockhash"),
        network=network,
    )


class ChargeClient:
    """Builds credentials for charge offers, paying from `owner`'s associated token account
    (a Token-2022 mint's fee schedule and hook read through `mints`, cached)."""

    def __init__(
        self,
        owner: Keypair,
        rpc: AsyncClient,
        mints: ChainMints | None = None,
        fees: PriorityFees | None = None,
    ) -> None:
        self.owner, self.rpc, self.fees = owner, rpc, fees
        self.mints = mints if mints is not None else ChainMints(rpc)
        # blockhash -> its last valid block height, for those this client read itself
        self.lifetimes: dict[str, int] = {}

    async def cost(self, offer: ChargeOffer) -> int:
        """What paying `offer` takes from the wallet: its amount, or for a transfer-fee
        mint the gross that leaves the recipient the amount after this epoch's fee."""
        if offer.token_program != str(TOKEN_2022_PROGRAM):
            return offer.amount
        try:
            now = await self.mints.at_epoch(Pubkey.from_string(offer.mint))
            return now.gross_for_net(offer.amount)
        except (MintUnavailable, ValueError) as e:
            raise CannotPay(f"cannot read the mint {offer.mint}: {e}") from e

    async def transaction(
        self, offer: ChargeOffer, *, compute_unit_price: int | None = None
    ) -> VersionedTransaction:
        """The transaction paying `offer`, signed by the payer (and the fee payer's slot
        left empty when the server sponsors it); `compute_unit_price` fixes the price, else
        `fees` estimates it (else COMPUTE_UNIT_PRICE)."""
        mint = Pubkey.from_string(offer.mint)
        program = Pubkey.from_string(offer.token_program)
        payer = self.owner.pubkey()
        source = associated_token_address(payer, mint, program)
        dest = associated_token_address(Pubkey.from_string(offer.recipient), mint, program)
        amount, limit = await self.cost(offer), COMPUTE_UNIT_LIMIT
        hook: list[AccountMeta] = []
        if program == TOKEN_2022_PROGRAM:
            try:
                hook = await self.mints.hook_accounts(
                    mint, source=source, destination=dest, authority=payer, amount=amount
                )
            except (MintUnavailable, ValueError) as e:
                raise CannotPay(f"cannot resolve the transfer hook's accounts: {e}") from e
            if hook:
                limit += HOOK_COMPUTE_UNITS
        transfer = transfer_checked(
            TransferCheckedParams(
                program_id=program,
                source=source,
                mint=mint,
                dest=dest,
                owner=payer,
                amount=amount,
                decimals=offer.decimals,
            )
        )
        if hook:
            transfer = Instruction(transfer.program_id, transfer.data, [*transfer.accounts, *hook])
        fee_payer = Pubkey.from_string(offer.fee_payer) if offer.fee_payer else payer
        if compute_unit_price is None:
            compute_unit_price = await unit_price(self.fees, [fee_payer, dest], COMPUTE_UNIT_PRICE)
        ixs = [
            set_compute_unit_limit(limit),
            set_compute_unit_price(compute_unit_price),
            transfer,
        ]
        if offer.external_id:
            ixs.append(Instruction(MEMO_PROGRAM, offer.external_id.encode(), []))
        if offer.pull:
            # The server sends a pulled transaction, and may preflight it at the RPC's
            # default commitment, `finalized` (@solana/mpp 0.6.0's server does, after
            # offering a `confirmed` recentBlockhash): a blockhash younger than the finalized
            # root is then Agave's "Blockhash not found". A finalized one passes any
            # preflight, its lifetime ~13 s shorter; so a pull ignores `recentBlockhash`.
            blockhash = (await self.rpc.get_latest_blockhash(Finalized)).value.blockhash
        elif offer.recent_blockhash:
            blockhash = Hash.from_string(offer.recent_blockhash)
        else:
            latest = (await self.rpc.get_latest_blockhash(Confirmed)).value
            blockhash = latest.blockhash
            self.lifetimes[str(blockhash)] = latest.last_valid_block_height
        msg = MessageV0.try_compile(fee_payer, ixs, [], blockhash)
        own = self.owner.sign_message(to_bytes_versioned(msg))
        sigs = [Signature.default(), own] if offer.fee_payer else [own]
        return VersionedTransaction.populate(msg, sigs)

    async def credential(self, offer: ChargeOffer) -> str:
        """The `Authorization` value paying `offer`: pull hands over the signed transaction;
        push sends it, waits for `confirmed`, and hands over its signature."""
        tx = await self.transaction(offer)
        if offer.pull:
            payload = {"type": "transaction", "transaction": base64.b64encode(bytes(tx)).decode()}
        else:
            payload = {"type": "signature", "signature": await self.push(tx)}
        return mpp.Credential(offer.challenge, payload).header()

    async def push(self, tx: VersionedTransaction) -> str:
        """Sends `tx` and rebroadcasts it until it lands; its signature, or PushFailed."""
        valid_until = self.lifetimes.pop(str(tx.message.recent_blockhash), None)
        lander = Lander(self.rpc)
        try:
            outcome = await lander.land(
                tx, wait_secs=PUSH_WAIT_SECS, last_valid_block_height=valid_until
            )
        finally:
            await lander.aclose()
        if isinstance(outcome, Landed) and outcome.err is None:
            return outcome.signature
        if isinstance(outcome, Landed):
            raise PushFailed(f"the charge failed on chain: {outcome.err}", nothing_paid=True)
        if isinstance(outcome, Rejected):
            raise PushFailed(f"the charge was refused: {outcome.message}", nothing_paid=True)
        if isinstance(outcome, Unsent):
            raise PushFailed(f"the charge could not be sent: {outcome.reason}", nothing_paid=True)
        if isinstance(outcome, Expired):
            raise PushFailed(
                "the charge expired before it landed (its blockhash's last valid block "
                "height passed)",
                nothing_paid=True,
            )
        assert isinstance(outcome, Pending)
        raise PushFailed(
            f"the charge {outcome.signature} was sent but not confirmed in "
            f"{PUSH_WAIT_SECS:.0f} s: it may still land",
            nothing_paid=False,
        )
