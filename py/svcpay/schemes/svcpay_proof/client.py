"""The client's side of svcpay proofs: build the transfer the terms ask for, signed by the
payer as token authority (the facilitator pays the fee), and trade it for a proof at the
facilitator's `POST /authorize` (docs/adr/0006, 0008). `PaymentAuth` (`svcpay.client`)
drives this on a 402 and sends the proof in `X-PAYMENT`; the facilitator checks the
transfer by `svcpay.schemes.svcpay_proof.facilitator`. The transfer goes through the mint's
own program; for a Token-2022 mint with a transfer fee it sends the gross that leaves payTo
the price after this epoch's fee, and for one with a transfer hook it carries the hook's
accounts (docs/adr/0031).
"""

from __future__ import annotations

import asyncio
import base64
import time

import httpx
from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Confirmed
from solders.compute_budget import set_compute_unit_limit, set_compute_unit_price
from solders.instruction import AccountMeta, Instruction
from solders.keypair import Keypair
from solders.message import MessageV0, to_bytes_versioned
from solders.pubkey import Pubkey
from solders.signature import Signature
from solders.transaction import VersionedTransaction
from spl.token.instructions import get_associated_token_address, transfer_checked
from spl.token.models import TransferCheckedParams

from svcpay.protocol.errors import InsufficientFunds, PaymentError
from svcpay.protocol.mints import ChainMints, MintUnavailable
from svcpay.protocol.models import PaymentOption
from svcpay.protocol.programs import MEMO_PROGRAM, TOKEN_2022_PROGRAM
from svcpay.rpc.fees import PriorityFees, unit_price

# build_payment's priority fee: x402 facilitators require a price instruction, svcpay's
# /authorize accepts one (at most 1,000,000); 1 micro-lamport a unit adds under 1 lamport.
COMPUTE_UNIT_PRICE = 1
COMPUTE_UNIT_LIMIT = 50_000  # the transfer and the memo need about 10,000
# Added for a Token-2022 mint, and again for one with a transfer hook (its CPI and the PDAs
# of its extra accounts): as svcpay.schemes.x402_exact.client budgets them.
TOKEN_2022_COMPUTE_UNITS = 20_000
HOOK_COMPUTE_UNITS = 60_000
SETTLE_PATIENCE_SECS = 90.0  # a signed payment's blockhash lives about a minute
SIGNINGS = 3  # a payment is signed again after its blockhash expired unpaid, up to this


async def authorize(
    facilitator: httpx.AsyncClient,
    rpc: AsyncClient,
    owner: Keypair,
    option: PaymentOption,
    patience: float = SETTLE_PATIENCE_SECS,
    *,
    mints: ChainMints | None = None,
    fees: PriorityFees | None = None,
) -> str:
    """The proof (base64, `X-PAYMENT`'s value) of `owner` paying `option` once, settled by
    `facilitator` (an httpx client on its base URL). InsufficientFunds or PaymentError when
    it refuses. `mints` reads the mint (default: once, over `rpc`); `fees` prices the
    transaction's compute units from the cluster's recent fees (default: a fixed price).
    A payment the facilitator answers `BlockhashExpired` (never landed, never will) is
    signed again with a fresh blockhash, up to `SIGNINGS` times in all."""
    supported = (await facilitator.get("/supported")).json()
    fee_payer = Pubkey.from_string(supported["feePayer"])
    for signing in range(1, SIGNINGS + 1):
        # A payment whose blockhash expired before it landed was never paid (the
        # facilitator watched it past its last valid block height): a new one is signed
        # with a fresh blockhash, as a wallet does, a bounded number of times.
        tx = await build_payment(rpc, owner, option, fee_payer, mints=mints, fees=fees)
        body: dict[str, object] = {
            "signedPayment": base64.b64encode(tx).decode(),
            "paymentRequirements": option.to_json_dict(),
        }
        reply = await _post_until_final(facilitator, body, patience)
        if error_name(reply) != "BlockhashExpired" or signing == SIGNINGS:
            break
    if reply.status_code == 200:
        return base64.b64encode(reply.content).decode()
    if error_name(reply) == "InsufficientFunds":
        raise InsufficientFunds(error_message(reply))
    raise PaymentError(
        f"the facilitator refused the payment ({reply.status_code}): {error_message(reply)}"
    )


async def build_payment(
    rpc: AsyncClient,
    owner: Keypair,
    option: PaymentOption,
    fee_payer: Pubkey,
    *,
    mints: ChainMints | None = None,
    fees: PriorityFees | None = None,
) -> bytes:
    """The transfer of `option` from `owner`'s associated token account, with its memo,
    signed by `owner` as token authority; the fee payer's signature is left for the
    facilitator. Laid out as x402's `exact` asks (compute-unit limit, price, transfer,
    memo), so x402 facilitators accept it too. A transfer-fee mint's transfer is of the
    gross that leaves payTo the price; a hooked mint's carries the hook's accounts."""
    mint = Pubkey.from_string(option.token)
    mints = mints if mints is not None else ChainMints(rpc)
    try:
        info = await mints.mint(mint)
        program = info.program
        source = get_associated_token_address(owner.pubkey(), mint, program)
        amount = option.amount_units
        hook: list[AccountMeta] = []
        if program == TOKEN_2022_PROGRAM:
            now = await mints.at_epoch(mint)
            amount = now.gross_for_net(amount)
            hook = await mints.hook_accounts(
                mint,
                source=source,
                destination=Pubkey.from_string(option.pay_to),
                authority=owner.pubkey(),
                amount=amount,
            )
    except MintUnavailable as e:
        raise PaymentError(f"the token {mint} cannot be read now: {e}") from e
    except ValueError as e:
        raise PaymentError(f"the token {mint} is no mint on this network: {e}") from e
    params = TransferCheckedParams(
        program_id=program,
        source=source,
        mint=mint,
        dest=Pubkey.from_string(option.pay_to),
        owner=owner.pubkey(),
        amount=amount,
        decimals=info.decimals,
    )
    transfer = transfer_checked(params)
    limit = COMPUTE_UNIT_LIMIT
    if program == TOKEN_2022_PROGRAM:
        limit += TOKEN_2022_COMPUTE_UNITS + (HOOK_COMPUTE_UNITS if hook else 0)
    if hook:
        transfer = Instruction(transfer.program_id, transfer.data, [*transfer.accounts, *hook])
    ixs = [
        set_compute_unit_limit(limit),
        set_compute_unit_price(
            await unit_price(fees, [fee_payer, params.dest], COMPUTE_UNIT_PRICE)
        ),
        transfer,
        Instruction(MEMO_PROGRAM, (option.memo or "").encode(), []),
    ]
    blockhash = (await rpc.get_latest_blockhash(Confirmed)).value.blockhash
    message = MessageV0.try_compile(fee_payer, ixs, [], blockhash)
    owner_sig = owner.sign_message(to_bytes_versioned(message))
    return bytes(VersionedTransaction.populate(message, [Signature.default(), owner_sig]))


async def _post_until_final(
    facilitator: httpx.AsyncClient, body: dict[str, object], patience: float
) -> httpx.Response:
    """POST /authorize until a final answer. A timeout, `SettlementPending` or a 503 (the
    facilitator's database or RPC node away for a moment) leaves the payment possibly in
    flight: the same signed transaction is sent again (the facilitator settles it at most
    once), never a new one, so a payment is never made twice."""
    deadline = time.monotonic() + patience
    delay = 0.5
    while True:
        wait = delay
        try:
            reply = await facilitator.post("/authorize", json=body, timeout=30.0)
            if reply.status_code == 503:
                why = f"{error_name(reply) or 'unavailable'} (503)"
                wait = max(delay, _retry_after(reply))
            elif reply.status_code == 504 and error_name(reply) == "SettlementPending":
                why = "SettlementPending"
            else:
                return reply
        except httpx.TimeoutException as e:
            why = f"timeout ({type(e).__name__})"
        if time.monotonic() + wait > deadline:
            raise PaymentError(
                f"the facilitator did not settle the payment in {patience:.0f} s ({why}); "
                "it may still land: check your wallet before paying again"
            )
        await asyncio.sleep(wait)
        delay = min(delay * 2, 8.0)


def _retry_after(reply: httpx.Response) -> float:
    """A 503's Retry-After in seconds (at most 30), or 0 when it names none."""
    raw = reply.headers.get("retry-after", "")
    return float(min(int(raw), 30)) if raw.isascii() and raw.isdigit() else 0.0


def error_name(response: httpx.Response) -> str | None:
    """The `error` of an svcpay error body (a facilitator's or a gate's), if it is one."""
    value = _body(response).get("error")
    return value if isinstance(value, str) else None


def error_message(response: httpx.Response) -> str:
    """The `message` of an svcpay error body, else the start of the body."""
    return str(_body(response).get("message", response.text[:200]))


def _body(response: httpx.Response) -> dict[str, object]:
    try:
        body = response.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}
