"""x402 `exact` on Solana, the client's side: read a server's terms, build the payment it asks
for, and read the settlement it answers with (x402-foundation/x402
`specs/schemes/exact/scheme_exact_svm.md`, `specs/transports-v2/http.md`).

The payment is a v0 transaction whose fee payer is the facilitator named in `extra.feePayer`:
    0  SetComputeUnitLimit (COMPUTE_UNIT_LIMIT)
    1  SetComputeUnitPrice (COMPUTE_UNIT_PRICE micro-lamports: x402 facilitators require one)
    2  TransferChecked of `amount` of `asset`, from the payer's associated token account to
       ATA(payTo, asset), under the mint's own program (SPL Token or Token-2022), with the
       mint's decimals (read from the chain); for a Token-2022 mint with a transfer fee, of
       the gross that leaves payTo `amount` after this epoch's fee, and for one with a
       transfer hook, followed by the hook's extra accounts (docs/adr/0031)
    3  Memo: `extra.memo`, or 16 random bytes in hex so that two payments of the same terms
       are two transactions
signed by the payer as token authority only: the fee payer's signature slot is left empty
for the facilitator, which the server asks to settle. Before it is returned, the transaction
is checked by the same rules the facilitator applies (`svm.check_payment`), so terms this
client cannot pay safely (a fee payer that is the payer itself, say) are refused here.

`PaymentAuth` (`svcpay.client`) drives this on a 402; nothing here talks to a facilitator.
"""

from __future__ import annotations

import base64
import binascii
import os
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Confirmed
from solders.hash import Hash
from solders.instruction import AccountMeta, Instruction
from solders.keypair import Keypair
from solders.message import MessageV0, to_bytes_versioned
from solders.pubkey import Pubkey
from solders.signature import Signature
from solders.transaction import VersionedTransaction

from svcpay.protocol.mints import ChainMints, MintUnavailable
from svcpay.protocol.models import ProtocolError
from svcpay.protocol.token2022 import MintAtEpoch
from svcpay.rpc.fees import PriorityFees, unit_price
from svcpay.schemes.x402_exact import svm
from svcpay.schemes.x402_exact.wire import (
    PAYMENT_IDENTIFIER,
    PAYMENT_REQUIRED,
    PAYMENT_RESPONSE,
    PAYMENT_SIGNATURE,
    SCHEME,
    X_PAYMENT,
    X_PAYMENT_RESPONSE,
    PaymentPayload,
    PaymentPayloadV1,
    PaymentRequired,
    PaymentRequiredV1,
    Requirements,
    RequirementsV1,
    SettleResponse,
    SvmPayload,
    decode_header,
    decode_json,
    encode_header,
    parse,
    svcpay_network,
)

COMPUTE_UNIT_LIMIT = 20_000  # the transfer and a memo use about 10,000
HOOK_COMPUTE_UNITS = 60_000  # added for a transfer-hook mint: Token-2022 calls the hook
# Added for any Token-2022 mint: its transfer costs more than SPL Token's (a fee mint's more
# again); on solana-test-validator 4.2.2 a fee mint's transfer left the memo short of units.
TOKEN_2022_COMPUTE_UNITS = 20_000
COMPUTE_UNIT_PRICE = 1  # micro-lamports per unit: the least a facilitator accepts
MAX_MEMO_BYTES = 256

AnyRequired = PaymentRequired | PaymentRequiredV1
AnyRequirements = Requirements | RequirementsV1
AnyPayload = PaymentPayload | PaymentPayloadV1


class CannotPay(ValueError):
    """These terms cannot be paid as given (unknown mint, no fee payer, a memo too long,
    a transaction the facilitator's rules would refuse); nothing was signed."""


@dataclass(frozen=True)
class Mint:
    address: Pubkey
    decimals: int
    token_program: Pubkey  # SPL Token or Token-2022: the mint account's owner


async def read_mint(rpc: AsyncClient, address: Pubkey) -> Mint:
    """The mint's decimals and token program, read from the chain; CannotPay when the
    account is no SPL Token or Token-2022 mint."""
    info = (await rpc.get_account_info(address, Confirmed)).value
    if info is None:
        raise CannotPay(f"the token {address} does not exist on this network")
    data = bytes(info.data)
    if info.owner not in svm.TOKEN_PROGRAMS or len(data) < 82 or data[45] != 1:
        raise CannotPay(f"{address} is not an SPL Token or Token-2022 mint")
    return Mint(address, data[44], info.owner)


def memo_bytes(requirements: Requirements) -> bytes:
    """`extra.memo` as sent, or a random one (so equal terms still make distinct payments)."""
    memo = requirements.memo
    if not memo:
        return binascii.hexlify(os.urandom(16))
    data = memo.encode()
    if len(data) > MAX_MEMO_BYTES:
        raise CannotPay(f"extra.memo is longer than {MAX_MEMO_BYTES} bytes")
    return data


def exact_instructions(
    payer: Pubkey,
    requirements: Requirements,
    mint: Mint,
    memo: bytes,
    *,
    compute_unit_limit: int = COMPUTE_UNIT_LIMIT,
    compute_unit_price: int = COMPUTE_UNIT_PRICE,
    amount: int | None = None,
    hook_accounts: Sequence[AccountMeta] = (),
) -> list[Instruction]:
    """The four instructions of an `exact` payment by `payer` (see the module's docstring).
    `amount`: what the transfer moves (default the requirements' amount; a transfer-fee
    mint's gross); `hook_accounts`: a transfer-hook mint's, after the transfer's four."""
    pay_to = Pubkey.from_string(requirements.pay_to)
    source = svm.associated_token_address(payer, mint.address, mint.token_program)
    destination = svm.associated_token_address(pay_to, mint.address, mint.token_program)
    sent = int(requirements.amount) if amount is None else amount
    transfer = struct.pack("<BQB", svm.TRANSFER_CHECKED, sent, mint.decimals)
    return [
        Instruction(
            svm.COMPUTE_BUDGET,
            struct.pack("<BI", svm.SET_COMPUTE_UNIT_LIMIT, compute_unit_limit),
            [],
        ),
        Instruction(
            svm.COMPUTE_BUDGET,
            struct.pack("<BQ", svm.SET_COMPUTE_UNIT_PRICE, compute_unit_price),
            [],
        ),
        Instruction(
            mint.token_program,
            transfer,
            [
                AccountMeta(source, is_signer=False, is_writable=True),
                AccountMeta(mint.address, is_signer=False, is_writable=False),
                AccountMeta(destination, is_signer=False, is_writable=True),
                AccountMeta(payer, is_signer=True, is_writable=False),
                *hook_accounts,
            ],
        ),
        Instruction(svm.MEMO_PROGRAM, memo, []),
    ]


def sign_as_payer(message: MessageV0, payer: Keypair) -> VersionedTransaction:
    """`message` signed by `payer` alone; every other signature slot (the fee payer's)
    left default for its owner to fill."""
    signature = payer.sign_message(to_bytes_versioned(message))
    keys = list(message.account_keys)[: message.header.num_required_signatures]
    signatures = [signature if k == payer.pubkey() else Signature.default() for k in keys]
    return VersionedTransaction.populate(message, signatures)


class ExactSvmClient:
    """Builds `exact` payments by `payer` on the cluster `rpc` reaches (mints read once; a
    Token-2022 mint's fee schedule and hook through `mints`, cached)."""

    def __init__(
        self,
        payer: Keypair,
        rpc: AsyncClient,
        *,
        compute_unit_limit: int = COMPUTE_UNIT_LIMIT,
        compute_unit_price: int = COMPUTE_UNIT_PRICE,
        mints: ChainMints | None = None,
        fees: PriorityFees | None = None,
    ) -> None:
        self.payer, self.rpc, self.fees = payer, rpc, fees
        self.compute_unit_limit, self.compute_unit_price = compute_unit_limit, compute_unit_price
        self.mints = mints if mints is not None else ChainMints(rpc)
        self._mints: dict[Pubkey, Mint] = {}
        # blockhash -> its last valid block height, for the blockhashes this client read
        self.lifetimes: dict[str, int] = {}

    async def mint(self, address: Pubkey) -> Mint:
        """The mint's decimals and token program, through `mints` (a paying client's is
        shared by the process); CannotPay when it is no mint or cannot be read."""
        if address not in self._mints:
            try:
                info = await self.mints.mint(address)
            except MintUnavailable as e:
                raise CannotPay(f"the token {address} cannot be read now: {e}") from e
            except ValueError as e:
                raise CannotPay(f"the token {address} is no mint here: {e}") from e
            self._mints[address] = Mint(address, info.decimals, info.program)
        return self._mints[address]

    async def mint_now(self, mint: Mint) -> MintAtEpoch | None:
        """A Token-2022 mint as a payment meets it now (fee schedule, hook); None for SPL
        Token. CannotPay when it cannot be read."""
        if mint.token_program != svm.TOKEN_2022_PROGRAM:
            return None
        try:
            return await self.mints.at_epoch(mint.address)
        except (MintUnavailable, ValueError) as e:
            raise CannotPay(f"cannot read the mint {mint.address}: {e}") from e

    async def cost(self, requirements: AnyRequirements) -> int:
        """What paying `requirements` takes from the wallet: the amount, or for a
        transfer-fee mint the gross that leaves payTo the amount after this epoch's fee."""
        amount = amount_of(requirements)
        now = await self.mint_now(await self.mint(Pubkey.from_string(requirements.asset)))
        return amount if now is None else _gross(now, amount)

    async def transaction(self, requirements: AnyRequirements) -> VersionedTransaction:
        """The payer-signed transaction paying `requirements` (v1 or v2); CannotPay when
        they cannot be paid as given."""
        req = requirements.as_v2() if isinstance(requirements, RequirementsV1) else requirements
        if req.scheme != SCHEME:
            raise CannotPay(f"scheme {req.scheme!r} is not {SCHEME!r}")
        if not req.fee_payer:
            raise CannotPay("the terms name no fee payer (extra.feePayer)")
        try:
            fee_payer = Pubkey.from_string(req.fee_payer)
            recent = req.extra.get("recentBlockhash")
            blockhash = Hash.from_string(recent) if isinstance(recent, str) and recent else None
        except ValueError as e:
            raise CannotPay(f"malformed extra: {e}") from e
        mint = await self.mint(Pubkey.from_string(req.asset))
        now = await self.mint_now(mint)
        amount = int(req.amount) if now is None else _gross(now, int(req.amount))
        hook: list[AccountMeta] = []
        limit = self.compute_unit_limit
        if now is not None:
            limit += TOKEN_2022_COMPUTE_UNITS
        if now is not None and now.hook_program is not None:
            payer, owner = self.payer.pubkey(), Pubkey.from_string(req.pay_to)
            try:
                hook = await self.mints.hook_accounts(
                    mint.address,
                    source=svm.associated_token_address(payer, mint.address, mint.token_program),
                    destination=svm.associated_token_address(
                        owner, mint.address, mint.token_program
                    ),
                    authority=payer,
                    amount=amount,
                )
            except (MintUnavailable, ValueError) as e:
                raise CannotPay(f"cannot resolve the transfer hook's accounts: {e}") from e
            limit += HOOK_COMPUTE_UNITS
        ixs = exact_instructions(
            self.payer.pubkey(),
            req,
            mint,
            memo_bytes(req),
            compute_unit_limit=limit,
            compute_unit_price=await unit_price(
                self.fees,
                [
                    fee_payer,
                    svm.associated_token_address(
                        Pubkey.from_string(req.pay_to), mint.address, mint.token_program
                    ),
                ],
                self.compute_unit_price,
            ),
            amount=amount,
            hook_accounts=hook,
        )
        if blockhash is None:
            latest = (await self.rpc.get_latest_blockhash(Confirmed)).value
            blockhash = latest.blockhash
            if len(self.lifetimes) > 1024:
                self.lifetimes.clear()
            self.lifetimes[str(blockhash)] = latest.last_valid_block_height
        tx = sign_as_payer(MessageV0.try_compile(fee_payer, ixs, [], blockhash), self.payer)
        try:  # what the facilitator will check, checked before anything leaves this process
            svm.check_payment(
                tx,
                fee_payer=fee_payer,
                asset=req.asset,
                pay_to=req.pay_to,
                amount=int(req.amount),
                memo=req.memo or None,
                mint=now,
            )
        except svm.Refusal as e:
            raise CannotPay(f"{e.reason}: {e.message}") from e
        return tx

    async def payload(
        self,
        requirements: AnyRequirements,
        required: AnyRequired | None = None,
        payment_id: str | None = None,
    ) -> AnyPayload:
        """The signed payment for `requirements` (one of `required.accepts`) as the server's
        version wants it: v2 `{x402Version, accepted, resource, payload}` (with the
        payment-identifier extension's id when the server declared it and `payment_id` is
        given) or v1 `{x402Version, scheme, network, payload}`."""
        tx = await self.transaction(requirements)
        encoded = SvmPayload(transaction=base64.b64encode(bytes(tx)).decode())
        if isinstance(requirements, RequirementsV1):
            return PaymentPayloadV1(
                scheme=requirements.scheme, network=requirements.network, payload=encoded
            )
        resource = required.resource if isinstance(required, PaymentRequired) else None
        declared = required.extensions if isinstance(required, PaymentRequired) else None
        extensions = None
        if (
            payment_id is not None
            and declared
            and isinstance(declared.get(PAYMENT_IDENTIFIER), dict)
        ):
            extensions = {PAYMENT_IDENTIFIER: {"info": {"id": payment_id}}}
        return PaymentPayload(
            accepted=requirements, resource=resource, payload=encoded, extensions=extensions
        )


async def create_payment(
    rpc: AsyncClient,
    payer: Keypair,
    requirements: AnyRequirements,
    required: AnyRequired | None = None,
) -> AnyPayload:
    """One payment without keeping a client (see `ExactSvmClient.payload`)."""
    return await ExactSvmClient(payer, rpc).payload(requirements, required)


def _gross(mint: MintAtEpoch, amount: int) -> int:
    try:
        return mint.gross_for_net(amount)
    except ValueError as e:  # no u64 transfer nets it
        raise CannotPay(str(e)) from e


def payment_header(payload: AnyPayload) -> tuple[str, str]:
    """(name, value) of the request header that carries `payload`: `PAYMENT-SIGNATURE` for
    v2, `X-PAYMENT` for v1."""
    name = PAYMENT_SIGNATURE if isinstance(payload, PaymentPayload) else X_PAYMENT
    return name, encode_header(payload)


@dataclass(frozen=True)
class PaidTransfer:
    """What a payment's transaction transfers (read back, e.g. to report it)."""

    token_program: Pubkey
    mint: Pubkey
    destination: Pubkey  # a token account: ATA(payTo, mint)
    authority: Pubkey  # the payer
    amount: int  # base units
    decimals: int
    memos: tuple[str, ...]


def transfer_in(payload: AnyPayload) -> PaidTransfer:
    """The TransferChecked of a payment payload's transaction, and its memos; CannotPay when
    the transaction holds no single TransferChecked (it was not built here)."""
    tx = svm.decode_transaction(payload.payload.transaction)
    keys = list(tx.message.account_keys)
    transfers, memos = [], []
    for ix in tx.message.instructions:
        program, data = keys[ix.program_id_index], bytes(ix.data)
        if program in svm.TOKEN_PROGRAMS and len(data) == 10 and data[0] == svm.TRANSFER_CHECKED:
            transfers.append((program, [keys[i] for i in bytes(ix.accounts)], data))
        elif program == svm.MEMO_PROGRAM:
            memos.append(data.decode("utf-8", "replace"))
    if len(transfers) != 1 or len(transfers[0][1]) < 4:
        raise CannotPay("the payment's transaction holds no single TransferChecked")
    program, accounts, data = transfers[0]
    _, mint, destination, authority = accounts[:4]  # then a transfer hook's, if any
    amount, decimals = struct.unpack_from("<QB", data, 1)
    return PaidTransfer(program, mint, destination, authority, amount, decimals, tuple(memos))


def payment_in(headers: Mapping[str, str]) -> AnyPayload | None:
    """The x402 payment a request carries: `PAYMENT-SIGNATURE` (v2) or an `X-PAYMENT` that
    decodes to `x402Version: 1` (svcpay's proofs use that header too); None otherwise."""
    h = httpx.Headers(headers)
    if h.get(PAYMENT_SIGNATURE):
        return decode_header(PaymentPayload, h[PAYMENT_SIGNATURE])
    value = h.get(X_PAYMENT)
    if value:
        try:
            data = decode_json(value)
        except ProtocolError:
            return None
        if data.get("x402Version") == 1:
            return parse(PaymentPayloadV1, data)
    return None


# -- reading the server ----------------------------------------------------------------------
def payment_required(response: httpx.Response) -> AnyRequired | None:
    """The x402 terms of a 402: the `PAYMENT-REQUIRED` header (v2), else a JSON body with
    `x402Version: 1`; None when the response carries neither. ProtocolError when the terms
    are there but malformed."""
    header = response.headers.get(PAYMENT_REQUIRED)
    if header:
        return decode_header(PaymentRequired, header)
    try:
        body = response.json()
    except ValueError:
        return None
    if isinstance(body, dict) and body.get("x402Version") == 1:
        return parse(PaymentRequiredV1, body)
    return None


def solana_options(
    required: AnyRequired, networks: Iterable[str], assets: Iterable[str] | None = None
) -> list[AnyRequirements]:
    """The `exact` options of `required` on one of `networks` (svcpay's names; the terms
    may use CAIP-2 ids or v1 names) and, when `assets` is given, in one of those mints, in
    the server's order of preference."""
    wanted = set(networks)
    allowed = None if assets is None else set(assets)
    options: list[AnyRequirements] = list(required.accepts)
    return [
        o
        for o in options
        if o.scheme == SCHEME
        and svcpay_network(o.network) in wanted
        and (allowed is None or o.asset in allowed)
    ]


def amount_of(requirements: AnyRequirements) -> int:
    """What paying `requirements` costs, in base units of its asset."""
    if isinstance(requirements, RequirementsV1):
        return int(requirements.max_amount_required)
    return int(requirements.amount)


def settlement(response: httpx.Response | Mapping[str, str]) -> SettleResponse | None:
    """The settlement an x402 server reported for a paid request: its `PAYMENT-RESPONSE`
    (v2) or `X-PAYMENT-RESPONSE` (v1) header, decoded; None when there is none.
    ProtocolError when the header is malformed."""
    headers = response.headers if isinstance(response, httpx.Response) else httpx.Headers(response)
    value = headers.get(PAYMENT_RESPONSE) or headers.get(X_PAYMENT_RESPONSE)
    return None if not value else decode_header(SettleResponse, value)


def refusal_reason(response: httpx.Response) -> str:
    """Why an x402 server answered 402 to a paid request, from its terms' `error` (header
    or v1 body) and any JSON `error`/`message` in the body."""
    parts: list[str] = []
    header = response.headers.get(PAYMENT_REQUIRED)
    if header:
        try:
            error = decode_json(header).get("error")
        except ProtocolError:
            error = None
        if isinstance(error, str) and error:
            parts.append(error)
    try:
        body: Any = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict):
        for key in ("error", "invalidReason", "errorReason", "message"):
            value = body.get(key)
            if isinstance(value, str) and value and value not in parts:
                parts.append(value)
    elif response.text and not parts:
        parts.append(response.text[:200])
    return ": ".join(parts) or "no reason given"
