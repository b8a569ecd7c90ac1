"""A small x402 facilitator for gate tests, until svcpay's own speaks x402 (issue 13 part 2):
`POST /verify` checks the transaction minimally (our fee payer pays and signs nothing else,
one TransferChecked to ATA(payTo, asset) of at least the amount, the memo when asked for)
and `POST /settle` co-signs it as fee payer and really sends it to the local validator,
waiting for `confirmed`. A transaction settled before gets `duplicate_settlement`. Answers
are x402's: HTTP 200 with `isValid` / `success`. Counts its calls."""

from __future__ import annotations

import asyncio
import base64
import hashlib
from dataclasses import dataclass, field
from typing import Any

import httpx
from solders.keypair import Keypair
from solders.message import to_bytes_versioned
from solders.pubkey import Pubkey
from solders.transaction import VersionedTransaction
from spl.token.constants import TOKEN_PROGRAM_ID
from spl.token.instructions import get_associated_token_address
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

MEMO_PROGRAM = Pubkey.from_string("MemoSq4gqABAXKb96qnH8TysNcWxMyWCqXgDLGmfcHr")
TRANSFER_CHECKED = 12
SEND_CONFIG = {"encoding": "base64", "preflightCommitment": "confirmed"}


@dataclass
class FakeX402Facilitator:
    rpc_url: str
    fee_payer: Keypair
    verified: int = 0
    settled: list[str] = field(default_factory=list)  # signatures it sent
    _seen: set[bytes] = field(default_factory=set)

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/verify", self._verify, methods=["POST"]),
                Route("/settle", self._settle, methods=["POST"]),
            ]
        )

    async def _verify(self, request: Request) -> JSONResponse:
        self.verified += 1
        body = await request.json()
        tx, why = self._check(body)
        payer = str(tx.message.account_keys[1]) if tx is not None else None
        if why:
            return JSONResponse({"isValid": False, "invalidReason": why, "payer": payer})
        return JSONResponse({"isValid": True, "payer": payer})

    async def _settle(self, request: Request) -> JSONResponse:
        body = await request.json()
        network = body["paymentRequirements"]["network"]
        tx, why = self._check(body)
        if tx is None or why:
            return JSONResponse({"success": False, "errorReason": why, "network": network})
        digest = hashlib.sha256(to_bytes_versioned(tx.message)).digest()
        if digest in self._seen:
            return JSONResponse(
                {"success": False, "errorReason": "duplicate_settlement", "network": network}
            )
        self._seen.add(digest)
        message = tx.message
        signatures = list(tx.signatures)
        signatures[0] = self.fee_payer.sign_message(to_bytes_versioned(message))
        signed = VersionedTransaction.populate(message, signatures)
        wire = base64.b64encode(bytes(signed)).decode()
        payer = str(message.account_keys[1])
        async with httpx.AsyncClient(timeout=30) as rpc:
            sent = await _rpc(rpc, self.rpc_url, "sendTransaction", wire, SEND_CONFIG)
            if "error" in sent:
                reason = "transaction_simulation_failed"
                return JSONResponse(
                    {"success": False, "errorReason": reason, "network": network, "payer": payer}
                )
            signature = sent["result"]
            for _ in range(300):
                status = (await _rpc(rpc, self.rpc_url, "getSignatureStatuses", [signature]))[
                    "result"
                ]["value"][0]
                if status and status.get("confirmationStatus") in ("confirmed", "finalized"):
                    break
                await asyncio.sleep(0.1)
        if status is None or status.get("err") is not None:
            return JSONResponse(
                {"success": False, "errorReason": "transaction_failed", "network": network}
            )
        self.settled.append(signature)
        return JSONResponse(
            {"success": True, "transaction": signature, "network": network, "payer": payer}
        )

    def _check(self, body: dict[str, Any]) -> tuple[VersionedTransaction | None, str | None]:
        payload, req = body["paymentPayload"], body["paymentRequirements"]
        try:
            tx = VersionedTransaction.from_bytes(
                base64.b64decode(payload["payload"]["transaction"])
            )
        except (ValueError, KeyError):
            return None, "invalid_exact_svm_payload_transaction_could_not_be_decoded"
        keys = tx.message.account_keys
        if keys[0] != self.fee_payer.pubkey():
            return tx, "invalid_exact_svm_payload_missing_fee_payer"
        amount = int(req.get("amount") or req.get("maxAmountRequired"))
        want = get_associated_token_address(
            Pubkey.from_string(req["payTo"]), Pubkey.from_string(req["asset"])
        )
        transfers, memos = [], []
        for ix in tx.message.instructions:
            program = keys[ix.program_id_index]
            accounts = [keys[i] for i in bytes(ix.accounts)]
            if self.fee_payer.pubkey() in accounts:
                return tx, "invalid_exact_svm_payload_transaction_fee_payer_transferring_funds"
            data = bytes(ix.data)
            if program == TOKEN_PROGRAM_ID and data[:1] == bytes([TRANSFER_CHECKED]):
                transfers.append((accounts[2], int.from_bytes(data[1:9], "little")))
            elif program == MEMO_PROGRAM:
                memos.append(data.decode())
        if len(transfers) != 1:
            return tx, "invalid_exact_svm_payload_no_transfer_instruction"
        if transfers[0][0] != want:
            return tx, "invalid_exact_svm_payload_recipient_mismatch"
        if transfers[0][1] < amount:
            return tx, "invalid_exact_svm_payload_amount_insufficient"
        memo = (req.get("extra") or {}).get("memo")
        if memo is not None and memos != [memo]:
            return tx, "invalid_exact_svm_payload_memo_mismatch"
        return tx, None


async def _rpc(client: httpx.AsyncClient, url: str, method: str, *params: Any) -> Any:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": list(params)}
    return (await client.post(url, json=body)).json()
