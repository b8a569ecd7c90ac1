"""An example resource server: a FastAPI app whose API is sold through svcpay's payment gate.

    GET  /v1/data      one-time payment, 0.50 USDC per request: an svcpay proof
                       (X-PAYMENT) or x402 (PAYMENT-SIGNATURE, or an x402 v1 X-PAYMENT)
    GET  /v1/resource  subscription to a plan (X-Svc-Sub)
    POST /v1/process   metered: a subscription with an allowance, 0.10 USDC deducted per
                       call (402 AllowanceExhausted at the cap)
    GET  /v1/quote     a session (MPP `Authorization: Payment`, intent session): 0.001
                       USDC per call, paid by a voucher on a deposit escrowed on chain
    GET  /health       free

Run it with `python -m svcpay.examples.resource_server --port 8000`; it prints one line
when it is ready. Configuration comes from the environment:

    SVCPAY_RPC_URL             the cluster's JSON-RPC URL (default http://127.0.0.1:8899)
    SVCPAY_NETWORK             the network named in terms and proofs (default: the RPC
                               node's cluster; another cluster stops it: docs/adr/0038)
    SVCPAY_TOKEN_SYMBOL        what the browser paywall calls SVCPAY_MINT when it is no
                               stablecoin it knows by address (the demo's USDC: "USDC")
    SVCPAY_PAYWALL_RPC_URL     the JSON-RPC URL a payer's browser reaches, for the paywall's
                               wallet payments (default SVCPAY_RPC_URL); "off" leaves the
                               browser paywall without its wallet script
    SVCPAY_FACILITATOR_URL     the facilitator clients pay through (advertised in `svc`)
    SVCPAY_FACILITATOR_KEY     the facilitator's proof-signing key; by default read at
                               startup from `GET {SVCPAY_FACILITATOR_URL}/supported`
                               (`facilitatorKey`). Proofs are then verified offline.
    SVCPAY_PAY_TO              the token account one-time payments go to
    SVCPAY_MINT                the token (a 6-decimal mint such as USDC)
    SVCPAY_PLAN_MINT           optional: the token the plans are priced in, when not
                               SVCPAY_MINT (say PYUSD, a Token-2022 mint, beside one-time
                               payments and sessions in USDC); their 402 options name it
                               and each plan's destination
    SVCPAY_SUBSCRIPTION_PLAN   the plan that opens GET /v1/resource
    SVCPAY_METERED_PLAN        the plan whose allowance POST /v1/process draws on
    SVCPAY_BILLING_AUTHORITY   keypair file (Solana CLI format) of the metered plan's billing
                               authority, which signs deduct_allowance
    SVCPAY_STATE_DB            SQLite file of used proofs, pending metered usage and
                               session vouchers (default resource-server.db)
    SVCPAY_FACILITATOR_API_KEY the provider's API key at the facilitator: served session
                               vouchers are reported to it, and it redeems them on chain.
                               Without it they wait in SVCPAY_STATE_DB (a warning says so).
    SVCPAY_MEMO_SECRET         optional, at least 16 bytes: the key of the memos in 402
                               terms. Random per process by default, so processes serving
                               the same API must share one.
    SVCPAY_X402                "off" turns x402 off (it is on by default): then 402s carry
                               svcpay's body only and only svcpay proofs pay /v1/data
    SVCPAY_OWNER               the wallet that owns SVCPAY_PAY_TO (x402's payTo); by default
                               read from the token account on chain at startup. SVCPAY_PAY_TO
                               must be its associated token account for x402.
    SVCPAY_FEE_PAYER           the facilitator's fee payer (x402's extra.feePayer); by
                               default the facilitator's key (svcpay's facilitator pays fees
                               with the key that signs proofs). x402 payments are verified
                               and settled by SVCPAY_FACILITATOR_URL's /verify and /settle.

At startup the plans are read from the chain (their price and period are what the 402 body
shows) and checked against the mint and the billing authority; a misconfiguration stops the
server with the reason. Handlers run only once the gate has verified the payment, so they
can read the verified credential (the X-PAYMENT proof, the x402 payment or the X-Svc-Sub id)
from the request; an x402 answer also carries the settlement in PAYMENT-RESPONSE.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import hashlib
import hmac
import logging
import os
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Annotated, Any

import httpx
import uvicorn
from fastapi import APIRouter, FastAPI, Header
from pydantic import BaseModel
from solders.account import Account
from solders.pubkey import Pubkey
from solders.rpc.responses import GetAccountInfoResp

from svcpay import stopping
from svcpay.amounts import to_base_units

# The settings are imported from here too (`svcpay example serve`, the tests): re-exported.
from svcpay.examples.resource_server_settings import UNFLAGGED as UNFLAGGED
from svcpay.examples.resource_server_settings import ConfigError as ConfigError
from svcpay.examples.resource_server_settings import Settings as Settings
from svcpay.examples.resource_server_settings import base58_address
from svcpay.examples.resource_server_settings import unflagged_from_env as unflagged_from_env
from svcpay.gate import OneTime, Paywall, Session, Subscription, payment_gate
from svcpay.gate.chain import ChainSubscriptions, session_scheme
from svcpay.gate.meter import BatchingMeter
from svcpay.gate.pricing import Terms
from svcpay.keys import load_keypair
from svcpay.program.client import BillingClient
from svcpay.program.generated.accounts.plan import Plan
from svcpay.program.generated.program_id import PROGRAM_ID
from svcpay.protocol import token2022
from svcpay.protocol.headers import SCHEME_EXACT, X_PAYMENT, X_SVC_SUB
from svcpay.protocol.memo import Memos
from svcpay.protocol.mints import ChainMints
from svcpay.protocol.models import ProtocolError
from svcpay.protocol.programs import TOKEN_PROGRAMS
from svcpay.protocol.proof import parse_payment_proof
from svcpay.protocol.replay import SqliteReplayStore
from svcpay.rpc.cluster import Cluster, WrongCluster, canonical
from svcpay.schemes.session.ledger import SqliteVoucherLedger
from svcpay.schemes.session.reporter import VoucherReporter
from svcpay.schemes.x402_exact.facilitator_client import X402FacilitatorClient
from svcpay.schemes.x402_exact.server import check_x402_terms
from svcpay.schemes.x402_exact.wire import svcpay_network

log = logging.getLogger("svcpay.examples")
DATA_PRICE = to_base_units("0.50")  # 500000 base units of a 6-decimal mint
QUOTE_PRICE = to_base_units("0.001")  # per GET /v1/quote, from a session's deposit
PROCESS_PRICE = to_base_units("0.10")  # per POST /v1/process, from the allowance
DECIMALS = 6  # the prices above assume it


# -- the API: handlers run only for requests the gate let through ---------------------------
router = APIRouter()
PaymentHeader = Annotated[str | None, Header(alias=X_PAYMENT)]
SubscriptionHeader = Annotated[str, Header(alias=X_SVC_SUB)]


class Document(BaseModel):
    text: str = ""


@router.get("/health")
async def health() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/v1/data")
async def data(
    x_payment: PaymentHeader = None, authorization: Annotated[str | None, Header()] = None
) -> dict[str, str]:
    if authorization is not None and authorization.lower().startswith("payment "):
        return {"data": "the data", "paidWith": "mpp"}  # its receipt: Payment-Receipt
    try:
        proof = parse_payment_proof(x_payment or "")  # already verified (and claimed)
    except ProtocolError:  # paid with x402: its settlement goes out in PAYMENT-RESPONSE
        return {"data": "the data", "paidWith": "x402"}
    return {"data": "the data", "paidBy": proof.payer, "transaction": proof.transaction}


@router.get("/v1/resource")
async def resource(x_svc_sub: SubscriptionHeader) -> dict[str, str]:
    return {"resource": "the resource", "paidBy": x_svc_sub}  # an ACTIVE subscription's id


@router.get("/v1/quote")
async def quote(authorization: Annotated[str, Header()]) -> dict[str, object]:
    # The gate took the voucher in Authorization before this runs; its receipt goes out in
    # Payment-Receipt.
    return {"quote": {"SOL/USDC": "150.00"}, "charged": str(QUOTE_PRICE)}


@router.post("/v1/process")
async def process(x_svc_sub: SubscriptionHeader, doc: Document | None = None) -> dict[str, object]:
    words = len(doc.text.split()) if doc else 0
    return {"result": {"words": words}, "paidBy": x_svc_sub, "charged": str(PROCESS_PRICE)}


def create_app(settings: Settings) -> FastAPI:
    """The API behind the gate. Reads the mint, the plans (and, unless configured, the
    facilitator's key) at once, and builds the gate then too, so a configuration it cannot
    serve stops it with a ConfigError before it serves; the usage meter runs with the app
    and is flushed when it stops."""
    authority = load_keypair(settings.billing_authority)
    settings = replace(settings, network=on_the_nodes_cluster(settings))
    facilitator_key = settings.facilitator_key or fetch_facilitator_key(settings)
    check_mint(settings)
    subscription = plan_pricing(settings, settings.subscription_plan)
    metered = plan_pricing(settings, settings.metered_plan, PROCESS_PRICE, authority.pubkey())
    owner = (settings.owner or token_account_owner(settings)) if settings.x402 else None
    billing = BillingClient.connect(settings.rpc_url)
    meter = BatchingMeter(billing, authority, settings.state_db)
    ledger = SqliteVoucherLedger(settings.state_db)
    reporter = None
    if settings.facilitator_api_key:
        reporter = VoucherReporter(ledger, settings.facilitator_url, settings.facilitator_api_key)
    else:
        log.warning("SVCPAY_FACILITATOR_API_KEY is not set: session vouchers are kept in %s "
                    "and not redeemed", settings.state_db)  # fmt: skip

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await meter.start()
        if reporter is not None:
            with contextlib.suppress(Exception):  # the facilitator may come later
                await reporter.flush()  # what a previous run served and did not report
        # Everything loaded so far lives as long as the process: out of the collector's
        # sight, a full collection no longer walks it (the paid path's p99 at 32
        # concurrent requests: 36 ms before, 19 after; docs/adr/0027).
        gc.collect()
        gc.freeze()
        try:
            yield
        finally:
            try:
                await meter.close()  # deducts the usage still pending
                if reporter is not None:
                    await reporter.aclose()  # reports the vouchers still unreported
            finally:
                await x402.aclose()
                await billing.close()

    terms = Terms(
        settings.pay_to,
        settings.mint,
        settings.network,
        settings.facilitator_url,
        owner=owner,
        fee_payer=(settings.fee_payer or facilitator_key) if owner else None,
    )
    x402 = X402FacilitatorClient(settings.facilitator_url)
    if owner is not None:
        try:
            check_x402_terms(terms)
        except ValueError as e:
            raise ConfigError(f"{e} (or set SVCPAY_X402=off)") from e

    memo_secret = settings.memo_secret or os.urandom(32)
    # The challenges' key, derived from the memo secret (processes share both).
    challenge_secret = hmac.new(memo_secret, b"svcpay mpp challenges", hashlib.sha256).digest()
    sessions = session_scheme(terms, billing, challenge_secret, ledger, reporter=reporter)
    app = FastAPI(title="svcpay example resource server", lifespan=lifespan)
    app.include_router(router)
    app.add_middleware(
        payment_gate,
        pricing={
            "/v1/data": [OneTime(DATA_PRICE)],
            "/v1/resource": [subscription],
            "/v1/process": [metered],
            "/v1/quote": [Session(QUOTE_PRICE, description="a price quote")],
        },
        terms=terms,
        memos=Memos(memo_secret),
        trusted_facilitators={facilitator_key},
        replay=SqliteReplayStore(settings.state_db),
        subscriptions=ChainSubscriptions(billing),
        meter=meter,
        x402_facilitator=x402,
        sessions=sessions,
        paywall=paywall_of(settings),
        # A Token-2022 mint (its transfer fee, its hook) is read as payments meet it.
        mints=ChainMints(billing.rpc),
    )
    # Starlette builds the middleware on the first request or lifespan event, where a
    # ValueError would answer every request with a 500: build it now instead.
    try:
        app.middleware_stack = app.build_middleware_stack()
    except ValueError as e:
        raise ConfigError(str(e)) from e
    return app


def paywall_of(settings: Settings) -> Paywall:
    """The browser paywall: its wallet script reaches the RPC node at SVCPAY_PAYWALL_RPC_URL
    (default SVCPAY_RPC_URL; "off": the page shows the terms only)."""
    rpc = settings.paywall_rpc_url or settings.rpc_url
    try:
        return Paywall(
            title="svcpay example API",
            rpc_url=None if rpc == "off" else rpc,
            token_symbol=settings.token_symbol,
        )
    except ValueError as e:
        raise ConfigError(f"SVCPAY_PAYWALL_RPC_URL: {e}") from e


# -- startup reads and checks -------------------------------------------------------------
def fetch_facilitator_key(settings: Settings, http: httpx.Client | None = None) -> str:
    """The facilitator's proof-signing key, from its `GET /supported` (which must list
    `exact` payments on the configured network, in x402's CAIP-2 or svcpay's name; unset:
    the RPC node's cluster)."""
    network = settings.network or on_the_nodes_cluster(settings)
    url = settings.facilitator_url.rstrip("/") + "/supported"
    client = http or httpx.Client(timeout=10)
    try:
        reply = client.get(url)
        body = reply.json() if reply.status_code == 200 else None
    except (httpx.HTTPError, ValueError) as e:
        raise ConfigError(f"cannot read the facilitator's key from {url}: {e}") from e
    finally:
        if http is None:
            client.close()
    if not isinstance(body, dict) or not isinstance(body.get("facilitatorKey"), str):
        raise ConfigError(f"{url} did not answer with a facilitatorKey")
    kinds = body.get("kinds")
    if not any(
        isinstance(k, dict)
        and k.get("scheme") == SCHEME_EXACT
        and isinstance(k.get("network"), str)
        and (svcpay_network(k["network"]) or k["network"]) == network
        for k in (kinds if isinstance(kinds, list) else [])
    ):
        raise ConfigError(f"the facilitator at {url} does not settle on {network}")
    return base58_address(body["facilitatorKey"], f"{url} facilitatorKey")


def on_the_nodes_cluster(settings: Settings) -> str:
    """The network the terms name: SVCPAY_NETWORK if the RPC node serves it (else a
    ConfigError naming both), the node's cluster when it is unset (svcpay.rpc.cluster)."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "getGenesisHash"}
    try:
        reply = _rpc_post(settings.rpc_url, body)
        cluster = Cluster.of(str(reply.json()["result"]))
    except (httpx.HTTPError, ValueError, KeyError, TypeError) as e:
        raise ConfigError(f"cannot read the genesis hash of {settings.rpc_url}: {e}") from e
    if not settings.network:
        return cluster.network
    try:
        cluster.require(settings.network, "SVCPAY_NETWORK (--network)", settings.rpc_url)
    except WrongCluster as e:
        raise ConfigError(f"{e}: {cluster.hint(settings.network)}") from None
    return canonical(settings.network) or settings.network


def check_mint(settings: Settings) -> None:
    """Checks that SVCPAY_MINT is a mint (SPL Token or Token-2022) of 6 decimals, as the
    prices assume."""
    info = read_account(settings.rpc_url, base58_address(settings.mint, "SVCPAY_MINT"))
    try:
        mint = token2022.mint_info(info.owner, bytes(info.data)) if info is not None else None
    except ValueError:
        mint = None
    if mint is None:
        raise ConfigError(f"SVCPAY_MINT {settings.mint} is not a token mint on {settings.rpc_url}")
    if mint.decimals != DECIMALS:
        raise ConfigError(
            f"SVCPAY_MINT {settings.mint} has {mint.decimals} decimals: the example's prices "
            f"are for a mint of {DECIMALS}"
        )


def token_account_owner(settings: Settings) -> str:
    """The wallet that owns the token account SVCPAY_PAY_TO (x402's payTo), read on chain."""
    info = read_account(settings.rpc_url, settings.pay_to)
    data = bytes(info.data) if info is not None else b""
    if info is None or info.owner not in TOKEN_PROGRAMS or len(data) < 165:
        raise ConfigError(f"SVCPAY_PAY_TO {settings.pay_to} is not a token account")
    return str(Pubkey.from_bytes(data[32:64]))


def plan_pricing(
    settings: Settings,
    address: str,
    metered: int | None = None,
    billed_by: Pubkey | None = None,
) -> Subscription:
    """The gate's entry for a plan, with its price and period as on chain, after checking
    that it is priced in the configured mint (SVCPAY_PLAN_MINT, else SVCPAY_MINT) and (for
    metered use) that `billed_by` is the billing authority that may deduct from its
    allowances."""
    info = read_account(settings.rpc_url, base58_address(address, "a plan"))
    data = bytes(info.data) if info is not None and info.owner == PROGRAM_ID else b""
    if not data.startswith(Plan.discriminator):
        raise ConfigError(f"{address} is not a svc_billing plan on {settings.rpc_url}")
    plan = Plan.decode(data)
    priced_in = settings.plan_mint or settings.mint
    if str(plan.mint) != priced_in or plan.decimals != DECIMALS:
        raise ConfigError(f"plan {address} is not priced in {priced_in} (6 decimals)")
    if billed_by is not None and plan.billing_authority != billed_by:
        raise ConfigError(
            f"plan {address} is billed by {plan.billing_authority}, not by the keypair in "
            f"{settings.billing_authority} ({billed_by})"
        )
    if priced_in == settings.mint:
        return Subscription(address, plan.amount, plan.period_secs, metered)
    # Its own token: its 402 option names it and the plan's destination, not SVCPAY_PAY_TO.
    return Subscription(
        address, plan.amount, plan.period_secs, metered, priced_in, str(plan.destination)
    )


def read_account(rpc_url: str, address: str) -> Account | None:
    """The account at `address` (None if there is none), read at `confirmed` before the
    app's event loop runs: one getAccountInfo, parsed by solders as solana-py parses it."""
    params = [address, {"encoding": "base64", "commitment": "confirmed"}]
    body = {"jsonrpc": "2.0", "id": 1, "method": "getAccountInfo", "params": params}
    try:
        reply = _rpc_post(rpc_url, body)
        parsed = GetAccountInfoResp.from_json(reply.text)
    except (httpx.HTTPError, ValueError) as e:
        raise ConfigError(f"cannot read {address} from {rpc_url}: {e}") from e
    if not isinstance(parsed, GetAccountInfoResp):  # an RPC error
        reason = getattr(parsed, "message", None) or type(parsed).__name__
        raise ConfigError(f"cannot read {address} from {rpc_url}: {reason}")
    return parsed.value


def _rpc_post(rpc_url: str, body: dict[str, Any], attempts: int = 6) -> httpx.Response:
    """One JSON-RPC call at start-up, before the app's event loop (and svcpay.rpc's
    transport) runs: a 429 or a 5xx from the provider is waited out (its Retry-After, at
    most 5 s, else a doubling backoff from 0.5 s) rather than taken for a bad configuration;
    the last answer's error is raised (httpx.HTTPStatusError)."""
    for attempt in range(attempts):
        reply = httpx.post(rpc_url, json=body, timeout=10)
        if reply.status_code != 429 and reply.status_code < 500 or attempt == attempts - 1:
            break
        try:
            wait = min(5.0, float(reply.headers.get("retry-after", "")))
        except ValueError:
            wait = 0.5 * 2**attempt
        time.sleep(max(0.0, wait))
    reply.raise_for_status()
    return reply


# -- python -m svcpay.examples.resource_server ---------------------------------------------
def serve(app: FastAPI, host: str, port: int) -> bool:
    """Serves `app` until Ctrl-C or SIGTERM (svcpay.stopping); whether it started."""
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning"))

    def ready(bound: int) -> None:
        print(f"svcpay resource server ready http://{host}:{bound}", flush=True)

    return stopping.serve(server, ready)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m svcpay.examples.resource_server",
        description="The example API sold through svcpay's gate (configured by SVCPAY_* "
        "environment variables; see the module's docstring).",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    args = parser.parse_args(argv)
    with stopping.handling():
        try:
            app = create_app(Settings.from_env())
        except ValueError as e:  # ConfigError, KeypairFileError
            print(f"resource server: {e}", file=sys.stderr)
            return 2
        try:
            return 0 if serve(app, args.host, args.port) else 1
        except stopping.Interrupted:  # stopped before it served: a normal stop too
            return 0


if __name__ == "__main__":
    sys.exit(main())
