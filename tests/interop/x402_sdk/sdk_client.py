"""The x402 SDK's paying httpx client, as an agent uses it, against one URL.

    sdk_client.py URL --keypair FILE --rpc URL --network CAIP2 --mint MINT [--replay]

GETs URL through `x402_httpx_transport` (the SDK pays a 402 with the exact SVM scheme,
building its transaction with the given RPC) and prints one JSON object: `status`,
`paymentResponse` (the PAYMENT-RESPONSE header, decoded; null if none), `body` (JSON if it
is, else text), `paymentHeaders` (what the SDK sent to pay). With `--replay`, the same
payment headers are then sent again, unchanged, without the SDK, and `replay` holds that
answer: {status, paymentResponse, body}. A payment the SDK refuses to make exits 1 with
`{"error": ...}`.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import httpx
from common import payer_arguments, paying_client, print_report
from x402.http import decode_payment_response_header
from x402.http.clients import x402_httpx_transport
from x402.http.clients.httpx import PaymentError

PAYMENT_HEADERS = ("payment-signature", "x-payment")


class Recording(httpx.AsyncBaseTransport):
    """The plain transport underneath the SDK's, keeping the headers of what it sent."""

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
    settled = None
    if header:
        settled = decode_payment_response_header(header).model_dump(
            by_alias=True, exclude_none=True
        )
    try:
        body: Any = reply.json()
    except ValueError:
        body = reply.text
    return {"status": reply.status_code, "paymentResponse": settled, "body": body}


async def run(args: argparse.Namespace) -> dict[str, Any]:
    client = paying_client(args.keypair, args.rpc, args.network, args.mint)
    recording = Recording()
    async with httpx.AsyncClient(
        transport=x402_httpx_transport(client, recording), timeout=60
    ) as http:
        reply = await http.get(args.url)
    result = outcome(reply)
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
    return print_report(run, payer_arguments(parser).parse_args(), PaymentError)


if __name__ == "__main__":
    sys.exit(main())
