"""solana-foundation's pay-kit paying client (`PayKitClient`, x402 and MPP), as an agent uses
it, against one URL.

    pk_client.py URL --keypair FILE --rpc URL --mint MINT [--accept mpp,x402] [--replay]

pay-kit names the local validator `localnet` and advertises it with devnet's CAIP-2 id, as
svcpay's services are told to here. GETs URL (pay-kit pays a 402 it accepts, building its
transaction with the given RPC) and prints one JSON object, the report of
../x402_sdk/sdk_client.py: `status`, `paymentResponse` (PAYMENT-RESPONSE decoded, or null),
`paymentReceipt` (MPP's Payment-Receipt decoded, or null), `body`, `paymentHeaders` (what
pay-kit sent to pay); `--accept` restricts the protocols it may pay with (default both, MPP
first, as pay-kit prefers); with `--replay`, the same payment
headers sent again without pay-kit, in `replay`. A payment pay-kit refuses exits 1 with
`{"error": ...}`.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import sys
from pathlib import Path
from typing import Any

import httpx
from solana.rpc.async_api import AsyncClient
from solana_pay_kit.client import AssetPermission, ClientPermissions, PayKitClient
from solana_pay_kit.client.permissions import PermissionDeniedError
from solana_pay_kit.signer import LocalSigner

PAYMENT_HEADERS = ("payment-signature", "x-payment", "authorization")


class Recording(httpx.AsyncBaseTransport):
    """The plain transport underneath pay-kit's, keeping the headers of what it sent."""

    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.sent: list[httpx.Headers] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.sent.append(request.headers)
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


def outcome(reply: httpx.Response) -> dict[str, Any]:
    header = reply.headers.get("payment-response") or reply.headers.get("x-payment-response")
    settled = json.loads(base64.b64decode(header)) if header else None
    receipt = reply.headers.get("payment-receipt")
    if receipt:  # base64url without padding
        receipt = json.loads(base64.urlsafe_b64decode(receipt + "=" * (-len(receipt) % 4)))
    try:
        body: Any = reply.json()
    except ValueError:
        body = reply.text
    return {
        "status": reply.status_code,
        "paymentResponse": settled,
        "paymentReceipt": receipt or None,
        "body": body,
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    secret = json.loads(Path(args.keypair).read_text())
    permissions = (
        ClientPermissions.builder()
        .only_network("localnet")
        .allow_asset(AssetPermission.with_cap("localnet", args.mint, 10_000_000))
        .build()
    )
    recording = Recording()
    rpc = AsyncClient(args.rpc)
    client = (
        PayKitClient.builder()
        .signer(LocalSigner.from_bytes(secret))
        .rpc(rpc)
        .network("localnet")
        .permissions(permissions)
        .accept(args.accept.split(","))
        .base_transport(recording)
        .httpx_options(timeout=60)
        .build()
    )
    try:
        async with client:
            reply = await client.get(args.url)
            result = outcome(reply)
    finally:
        await rpc.close()
    paid = [h for h in recording.sent if any(name in h for name in PAYMENT_HEADERS)]
    headers = {k: v for k, v in paid[-1].items() if k in PAYMENT_HEADERS} if paid else {}
    result["paymentHeaders"] = headers
    if args.replay:
        async with httpx.AsyncClient(timeout=60) as plain:
            result["replay"] = outcome(await plain.get(args.url, headers=headers))
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("url")
    parser.add_argument("--keypair", required=True, help="the payer's keypair file")
    parser.add_argument("--rpc", required=True, help="the cluster's JSON-RPC URL")
    parser.add_argument("--mint", required=True, help="the token pay-kit may pay in")
    parser.add_argument("--accept", default="mpp,x402", help="protocols pay-kit may pay with")
    parser.add_argument("--replay", action="store_true", help="then replay the payment")
    args = parser.parse_args()
    try:
        result = asyncio.run(run(args))
    except PermissionDeniedError as e:
        print(json.dumps({"error": f"{type(e).__name__}: {e}"}))
        return 1
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
