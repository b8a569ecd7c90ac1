"""Sessions end to end on the local validator (scripts/bench-sessions): `--clients` payers
each open a session and make `--calls` paid calls through the gate (PaymentAuth over ASGI;
the gate reads each session from the chain, then from its cache; vouchers in a SQLite
ledger); the gate's reporter hands the served vouchers to the facilitator (its real API, in
process, on SQLite), and one redeemer pass redeems them. Prints paid calls per redeem
transaction, fees per call, compute units, and the gate's rate for these calls. Setup is not
timed. Prints numbers; asserts nothing."""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from pathlib import Path

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from svcpay.client import PaymentAuth
from svcpay.facilitator.app import create_app
from svcpay.facilitator.config import FacilitatorConfig
from svcpay.facilitator.service import Facilitator
from svcpay.gate import Session, payment_gate
from svcpay.gate.chain import session_scheme
from svcpay.gate.pricing import Terms
from svcpay.localnet.chain import Chain
from svcpay.localnet.process import localnet
from svcpay.program.client import BillingClient
from svcpay.protocol.memo import Memos
from svcpay.protocol.replay import MemoryReplayStore
from svcpay.schemes.session.ledger import SqliteVoucherLedger
from svcpay.schemes.session.reporter import VoucherReporter

PRICE = 1_000  # 0.001 of a 6-decimal token a call
ONE_TIME_FEE = 5_000  # lamports per one-time payment: its transaction's one signature


async def quote(request: Request) -> JSONResponse:
    return JSONResponse({"quote": 42})


async def main(clients: int, calls: int) -> None:
    with localnet() as node, tempfile.TemporaryDirectory() as tmp:
        chain = Chain(node.url, node.can_time_travel)
        provider, fee_payer = chain.funded_keypair(), chain.funded_keypair()
        mint = chain.create_mint()
        recipient = chain.token_account(provider.pubkey(), mint)
        service = Facilitator(
            FacilitatorConfig(
                keypair=fee_payer,
                rpc_url=node.url,
                database_url=f"sqlite:///{Path(tmp) / 'facilitator.db'}",
                session_redeem_secs=0,
            )
        )
        store = service.store
        provider_id = await store.providers.create("bench")
        _, api_key = await store.api_keys.create(provider_id)
        await store.providers.add_resource(provider_id, "payTo", str(recipient))
        facilitator = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=create_app(service, background=False)),
            base_url="http://facilitator",
        )
        billing = BillingClient.connect(node.url)
        terms = Terms(pay_to=str(recipient), token=str(mint))
        ledger = SqliteVoucherLedger(Path(tmp) / "gate.db")
        reporter = VoucherReporter(ledger, "http://facilitator", api_key, http=facilitator)
        gate = payment_gate(
            Starlette(routes=[Route("/v1/quote", quote)]),
            pricing={"/v1/quote": [Session(PRICE)]},
            terms=terms,
            memos=Memos(os.urandom(32)),
            trusted_facilitators=set(),
            replay=MemoryReplayStore(),
            sessions=session_scheme(terms, billing, os.urandom(32), ledger, reporter=reporter),
        )
        payers = []
        for _ in range(clients):
            wallet = chain.funded_keypair()
            chain.token_account(wallet.pubkey(), mint, calls * PRICE)
            auth = PaymentAuth(
                wallet,
                rpc=billing.rpc,
                billing=billing,
                max_per_request=calls * PRICE,
                session_deposit=calls * PRICE,
            )
            payers.append(auth)
        transport = httpx.ASGITransport(app=gate)
        served, elapsed = 0, 0.0
        async with httpx.AsyncClient(transport=transport, base_url="http://api") as http:
            for auth in payers:
                await http.get("/v1/quote", auth=auth)  # opens the session (not timed)
                served += 1
                began = time.perf_counter()
                for _ in range(calls - 1):
                    r = await http.get("/v1/quote", auth=auth)
                    served += r.status_code == 200
                elapsed += time.perf_counter() - began
        await reporter.aclose()
        before = chain.rpc("getBalance", str(fee_payer.pubkey()), {"commitment": "confirmed"})
        # Reported vouchers are due at once (redeem_secs 0); no pass runs until this one.
        summary = await service.redeem_once()
        after = chain.rpc("getBalance", str(fee_payer.pubkey()), {"commitment": "confirmed"})
        fees = int(before["value"]) - int(after["value"])
        events = [
            e
            for e in await store.events.read(provider_id, limit=1000)
            if e.type == "session.redeemed"
        ]
        units = []
        for signature in sorted({str(e.data["transaction"]) for e in events}):
            tx = chain.rpc(
                "getTransaction",
                signature,
                {
                    "encoding": "json",
                    "commitment": "confirmed",
                    "maxSupportedTransactionVersion": 0,
                },
            )
            units.append(int(tx["meta"]["computeUnitsConsumed"]))
        paid = int(chain.token_state(recipient)["amount"])
        await facilitator.aclose()
        await service.aclose()
        await billing.close()
    txs = max(summary.transactions, 1)
    print(
        f"{clients} sessions x {calls:,} calls at {PRICE} base units: {served:,} served, "
        f"{paid:,} base units redeemed ({paid // PRICE:,} calls' worth)"
    )
    print(
        f"gate, in process with PaymentAuth: {(served - clients) / elapsed:,.0f} paid calls/s "
        "(vouchers signed and checked, sessions from the cache)"
    )
    print(
        f"redeem transactions: {summary.transactions} ({summary.redeemed} sessions, "
        f"{summary.redeemed / txs:.1f} per transaction); compute units each: {units}"
    )
    print(f"paid calls per redeem transaction: {served / txs:,.0f}")
    print(
        f"fees: {fees:,} lamports = {fees / served:.2f} lamports per paid call "
        f"(one-time payments: {ONE_TIME_FEE:,} per call, {ONE_TIME_FEE * served // max(fees, 1):,}"
        " times as much)"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--clients", type=int, default=3, help="sessions (default 3: one transaction)"
    )
    parser.add_argument(
        "--calls", type=int, default=1000, help="paid calls per session (default 1000)"
    )
    args = parser.parse_args()
    asyncio.run(main(args.clients, args.calls))
