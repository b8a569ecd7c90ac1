"""A small x402 resource server for client tests: `GET /paid` costs `price` of `mint`, paid
to the wallet `pay_to` with x402 `exact` (v2: `PAYMENT-REQUIRED` / `PAYMENT-SIGNATURE`, or
v1: a JSON 402 body / `X-PAYMENT`). It settles a payment itself, as a server with its own
facilitator would: checks the transaction by svcpay's x402 rules (`svm.check_payment`),
co-signs it as fee payer, sends it to the local validator and waits until it is confirmed,
then answers 200 with `PAYMENT-RESPONSE`. With `refuse` set it answers every payment 402
with that reason instead, settling nothing. Counts what it was sent."""

from __future__ import annotations

import asyncio
import base64
from dataclasses import dataclass, field
from typing import Any

import httpx
from solders.keypair import Keypair
from solders.message import to_bytes_versioned
from solders.pubkey import Pubkey
from solders.transaction import VersionedTransaction
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from svcpay.protocol.models import ProtocolError
from svcpay.schemes.x402_exact import svm
from svcpay.schemes.x402_exact.wire import (
    PAYMENT_REQUIRED,
    PAYMENT_RESPONSE,
    PAYMENT_SIGNATURE,
    X_PAYMENT,
    X_PAYMENT_RESPONSE,
    PaymentPayload,
    PaymentPayloadV1,
    PaymentRequired,
    PaymentRequiredV1,
    Requirements,
    RequirementsV1,
    ResourceInfo,
    SettleResponse,
    caip2,
    decode_header,
    encode_header,
    v1_network,
)

SEND_CONFIG = {"encoding": "base64", "preflightCommitment": "confirmed"}


@dataclass
class Shop:
    rpc_url: str
    fee_payer: Keypair
    mint: Pubkey
    pay_to: Pubkey  # the merchant's wallet: payments go to its associated token account
    price: int
    version: int = 2
    network: str = "solana-mainnet"
    memo: str | None = "order-0001"
    refuse: str | None = None
    payments: int = 0  # paid requests received
    settled: list[str] = field(default_factory=list)  # signatures sent and confirmed

    def app(self) -> Starlette:
        return Starlette(routes=[Route("/paid", self._paid)])

    def requirements(self) -> Requirements:
        extra: dict[str, Any] = {"feePayer": str(self.fee_payer.pubkey())}
        if self.memo is not None:
            extra["memo"] = self.memo
        return Requirements(
            scheme="exact",
            network=caip2(self.network),
            asset=str(self.mint),
            amount=str(self.price),
            pay_to=str(self.pay_to),
            max_timeout_seconds=60,
            extra=extra,
        )

    def requirements_v1(self, url: str) -> RequirementsV1:
        req = self.requirements()
        return RequirementsV1(
            scheme="exact",
            network=v1_network(self.network),
            max_amount_required=req.amount,
            resource=url,
            pay_to=req.pay_to,
            max_timeout_seconds=60,
            asset=req.asset,
            extra=req.extra,
        )

    def _unpaid(self, url: str, error: str | None = None) -> JSONResponse:
        if self.version == 1:
            body = PaymentRequiredV1(error=error, accepts=[self.requirements_v1(url)])
            return JSONResponse(body.to_json_dict(), status_code=402)
        required = PaymentRequired(
            error=error, resource=ResourceInfo(url=url), accepts=[self.requirements()]
        )
        return JSONResponse(
            {}, status_code=402, headers={PAYMENT_REQUIRED: encode_header(required)}
        )

    async def _paid(self, request: Request) -> JSONResponse:
        url = str(request.url)
        header = request.headers.get(PAYMENT_SIGNATURE if self.version == 2 else X_PAYMENT)
        if not header:
            return self._unpaid(url)
        self.payments += 1
        try:
            payload = decode_header(
                PaymentPayload if self.version == 2 else PaymentPayloadV1, header
            )
        except ProtocolError as e:
            return self._unpaid(url, f"invalid_payload: {e.reason}")
        if isinstance(payload, PaymentPayload) and not payload.accepted.same_terms(
            self.requirements()
        ):
            return self._unpaid(url, "payment_requirements_mismatch")
        if self.refuse is not None:
            return self._unpaid(url, self.refuse)
        try:
            tx = svm.decode_transaction(payload.payload.transaction)
            transfer = svm.check_payment(
                tx,
                fee_payer=self.fee_payer.pubkey(),
                asset=str(self.mint),
                pay_to=str(self.pay_to),
                amount=self.price,
                memo=self.memo,
            )
        except svm.Refusal as e:
            return self._unpaid(url, e.reason)
        signature = await self._settle(tx)
        if signature is None:
            return self._unpaid(url, "transaction_failed")
        receipt = SettleResponse(
            success=True,
            transaction=signature,
            network=payload.accepted.network
            if isinstance(payload, PaymentPayload)
            else payload.network,
            payer=str(transfer.authority),
        )
        name = PAYMENT_RESPONSE if self.version == 2 else X_PAYMENT_RESPONSE
        return JSONResponse({"answer": "paid content"}, headers={name: encode_header(receipt)})

    async def _settle(self, tx: VersionedTransaction) -> str | None:
        signatures = list(tx.signatures)
        signatures[0] = self.fee_payer.sign_message(to_bytes_versioned(tx.message))
        wire = base64.b64encode(bytes(VersionedTransaction.populate(tx.message, signatures)))
        async with httpx.AsyncClient(timeout=30) as rpc:
            sent = await _rpc(rpc, self.rpc_url, "sendTransaction", wire.decode(), SEND_CONFIG)
            if "error" in sent:
                return None
            signature = str(sent["result"])
            for _ in range(300):
                statuses = await _rpc(rpc, self.rpc_url, "getSignatureStatuses", [signature])
                status = statuses["result"]["value"][0]
                if status and status.get("confirmationStatus") in ("confirmed", "finalized"):
                    if status.get("err") is not None:
                        return None
                    self.settled.append(signature)
                    return signature
                await asyncio.sleep(0.1)
        return None


async def _rpc(client: httpx.AsyncClient, url: str, method: str, *params: Any) -> Any:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": list(params)}
    return (await client.post(url, json=body)).json()
