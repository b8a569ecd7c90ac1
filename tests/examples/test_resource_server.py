"""The example resource server (svcpay.examples.resource_server): its three paid routes and
its configuration, in process against the local validator and a real facilitator, and once
as `python -m` over HTTP."""

from __future__ import annotations

import dataclasses
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from solders.keypair import Keypair

from svcpay.client import PaymentAuth
from svcpay.examples.resource_server import (
    DATA_PRICE,
    PROCESS_PRICE,
    ConfigError,
    Settings,
    create_app,
    fetch_facilitator_key,
    paywall_of,
)
from svcpay.keys import save_keypair
from svcpay.localnet.process import Localnet
from svcpay.program import pda
from svcpay.program.client import BillingClient
from svcpay.protocol.models import PaymentRequired, SvcExtension
from svcpay.schemes.x402_exact.wire import decode_json
from tests.support.billing import DAY, USDC, Billing, Plan, Subscriber
from tests.support.chain import Chain
from tests.support.facilitator import FACILITATOR_URL, InProcessFacilitator, in_process_facilitator

pytestmark = pytest.mark.anyio


@dataclass
class Provider:
    settings: Settings
    plan: Plan  # opens GET /v1/resource
    metered: Plan  # its allowances pay for POST /v1/process
    facilitator: InProcessFacilitator


@pytest.fixture
async def provider(
    validator: Localnet, chain: Chain, billing: Billing, tmp_path: Path
) -> AsyncIterator[Provider]:
    """A provider's plans in one mint, the metered plan's billing authority in a keypair
    file, and a facilitator; the settings point at them as the environment would."""
    plan = billing.plan(amount=10 * USDC, period_secs=30 * DAY)
    metered = billing.plan(amount=USDC, mint=plan.mint)
    authority_file = save_keypair(metered.billing_authority, tmp_path / "billing-authority.json")
    async with in_process_facilitator(
        validator.url, chain.funded_keypair(), pay_to=[plan.destination]
    ) as facilitator:
        supported = (await facilitator.http.get("/supported")).json()
        settings = Settings(
            facilitator_url=FACILITATOR_URL,
            pay_to=str(plan.destination),
            mint=str(plan.mint),
            subscription_plan=str(plan.address),
            metered_plan=str(metered.address),
            billing_authority=authority_file,
            rpc_url=validator.url,
            facilitator_key=supported["facilitatorKey"],
            state_db=tmp_path / "state.db",
        )
        yield Provider(settings, plan, metered, facilitator)


@asynccontextmanager
async def serving(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    """The app started (its lifespan: the usage meter) and a client; stopped on exit."""
    app = create_app(settings)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api") as api,
    ):
        yield api


@pytest.fixture
async def api(provider: Provider) -> AsyncIterator[httpx.AsyncClient]:
    async with serving(provider.settings) as client:
        yield client


def subscribed(billing: Billing, plan: Plan, max_overage: int | None = None) -> str:
    """A new subscriber's ACTIVE subscription to `plan`: its id (X-Svc-Sub)."""
    subscriber = billing.subscriber(plan, 20 * USDC)
    assert billing.subscribe(plan, subscriber, max_overage).ok
    return str(pda.subscription_address(plan.address, subscriber.pubkey))


async def test_health_is_free(api: httpx.AsyncClient) -> None:
    reply = await api.get("/health")
    assert (reply.status_code, reply.json()) == (200, {"status": "ok"})


async def test_data_costs_050_usdc_per_request(
    provider: Provider, api: httpx.AsyncClient, chain: Chain, billing: Billing
) -> None:
    unpaid = await api.get("/v1/data")
    assert unpaid.status_code == 402
    (option,) = PaymentRequired.parse(unpaid.content).accepts
    assert (option.amount, option.token, option.pay_to, option.svc) == (
        "500000",
        provider.settings.mint,
        provider.settings.pay_to,
        SvcExtension(facilitator=FACILITATOR_URL),  # where to pay: the URL is all a client needs
    )
    assert option.memo and DATA_PRICE == 500_000
    x402 = decode_json(unpaid.headers["PAYMENT-REQUIRED"])  # x402 is on by default
    (offer,) = x402["accepts"]
    assert (offer["payTo"], offer["amount"], offer["extra"]["memo"]) == (
        str(provider.plan.authority.pubkey()),  # the wallet owning the token account
        "500000",
        option.memo,
    )
    assert offer["extra"]["feePayer"] == provider.settings.facilitator_key

    wallet: Subscriber = billing.subscriber(provider.plan, 2 * USDC)  # a funded wallet
    auth = PaymentAuth(
        wallet.keypair,
        rpc=provider.facilitator.rpc,
        facilitator=provider.facilitator.http,
        max_per_request=USDC,
    )
    paid = await api.get("/v1/data", auth=auth)
    assert paid.status_code == 200, paid.text
    assert paid.json()["paidBy"] == str(wallet.pubkey)
    assert chain.token_state(wallet.token_account)["amount"] == 2 * USDC - 500_000
    assert chain.token_state(provider.plan.destination)["amount"] == 500_000

    again = await api.get("/v1/data", headers={"X-PAYMENT": paid.request.headers["X-PAYMENT"]})
    assert (again.status_code, again.json()["error"]) == (402, "InvalidPaymentProof")


async def test_resource_needs_an_active_subscription(
    provider: Provider, api: httpx.AsyncClient, billing: Billing
) -> None:
    unpaid = await api.get("/v1/resource")
    assert unpaid.status_code == 402
    (option,) = PaymentRequired.parse(unpaid.content).accepts
    assert option.svc is not None
    assert (option.svc.plan_id, option.svc.subscription_scheme, option.svc.interval) == (
        provider.settings.subscription_plan,
        True,
        30 * DAY,
    )
    assert option.amount == str(10 * USDC)  # the plan's price, read from the chain

    sub_id = subscribed(billing, provider.plan)
    served = await api.get("/v1/resource", headers={"X-Svc-Sub": sub_id})
    assert (served.status_code, served.json()) == (
        200,
        {"resource": "the resource", "paidBy": sub_id},
    )

    metered_sub = subscribed(billing, provider.metered, max_overage=USDC)
    other = await api.get("/v1/resource", headers={"X-Svc-Sub": metered_sub})
    assert (other.status_code, other.json()["error"]) == (402, "SubscriptionNotActive")


async def test_process_is_metered_until_the_allowance_is_exhausted(
    provider: Provider, billing: Billing, client: BillingClient
) -> None:
    sub_id = subscribed(billing, provider.metered, max_overage=3 * PROCESS_PRICE)
    async with serving(provider.settings) as api:
        unpaid = await api.post("/v1/process", json={"text": "hello"})
        (option,) = PaymentRequired.parse(unpaid.content).accepts
        assert option.svc is not None and option.svc.plan_id == provider.settings.metered_plan

        for _ in range(3):
            reply = await api.post(
                "/v1/process", headers={"X-Svc-Sub": sub_id}, json={"text": "count these words"}
            )
            assert (reply.status_code, reply.json()) == (
                200,
                {"result": {"words": 3}, "paidBy": sub_id, "charged": str(PROCESS_PRICE)},
            )
        exhausted = await api.post("/v1/process", headers={"X-Svc-Sub": sub_id}, json={})
        assert (exhausted.status_code, exhausted.json()["error"]) == (402, "AllowanceExhausted")
        assert "raise the overage limit or upgrade the plan" in exhausted.json()["message"]
    allowance = await client.fetch_allowance(sub_id)  # the meter flushed when the app stopped
    assert allowance is not None and allowance.used == 3 * PROCESS_PRICE


async def test_a_misconfigured_server_refuses_to_start(
    provider: Provider, chain: Chain, tmp_path: Path
) -> None:
    s = provider.settings
    stranger = save_keypair(Keypair(), tmp_path / "stranger.json")
    cases = {
        "billed by": dataclasses.replace(s, billing_authority=stranger),
        "is not priced in": dataclasses.replace(s, mint=str(chain.create_mint())),
        "is not a svc_billing plan": dataclasses.replace(s, metered_plan=s.pay_to),
        "not the associated token account": dataclasses.replace(s, owner=str(Keypair().pubkey())),
    }
    for reason, settings in cases.items():
        with pytest.raises(ConfigError, match=reason):
            create_app(settings)


def environment(settings: Settings) -> dict[str, str]:
    """The SVCPAY_* variables that configure `settings`."""
    return {
        "SVCPAY_RPC_URL": settings.rpc_url,
        "SVCPAY_NETWORK": settings.network,
        "SVCPAY_FACILITATOR_URL": settings.facilitator_url,
        "SVCPAY_FACILITATOR_KEY": settings.facilitator_key or "",
        "SVCPAY_PAY_TO": settings.pay_to,
        "SVCPAY_MINT": settings.mint,
        "SVCPAY_SUBSCRIPTION_PLAN": settings.subscription_plan,
        "SVCPAY_METERED_PLAN": settings.metered_plan,
        "SVCPAY_BILLING_AUTHORITY": str(settings.billing_authority),
        "SVCPAY_STATE_DB": str(settings.state_db),
    }


async def test_settings_come_from_the_environment(provider: Provider) -> None:
    env = environment(provider.settings)
    assert Settings.from_env(env) == provider.settings
    secret = Settings.from_env({**env, "SVCPAY_MEMO_SECRET": "s" * 16})
    assert secret.memo_secret == b"s" * 16
    assert not Settings.from_env({**env, "SVCPAY_X402": "off"}).x402
    partial = {k: v for k, v in env.items() if k not in ("SVCPAY_MINT", "SVCPAY_METERED_PLAN")}
    with pytest.raises(ConfigError, match="SVCPAY_MINT, SVCPAY_METERED_PLAN"):
        Settings.from_env(partial)
    for name, value in (("SVCPAY_PAY_TO", "not-an-address"), ("SVCPAY_MEMO_SECRET", "short")):
        with pytest.raises(ConfigError, match=name):
            Settings.from_env({**env, name: value})


async def test_the_paywall_pays_through_the_rpc_url_unless_told_otherwise(
    provider: Provider,
) -> None:
    env = environment(provider.settings)
    assert paywall_of(Settings.from_env(env)).rpc_url == provider.settings.rpc_url
    browsers = {
        **env,
        "SVCPAY_PAYWALL_RPC_URL": "https://rpc.example",
        "SVCPAY_TOKEN_SYMBOL": "USDC",
    }
    paywall = paywall_of(Settings.from_env(browsers))
    assert (paywall.rpc_url, paywall.token_symbol) == ("https://rpc.example", "USDC")
    assert paywall_of(Settings.from_env({**env, "SVCPAY_PAYWALL_RPC_URL": "off"})).rpc_url is None
    with pytest.raises(ConfigError, match="SVCPAY_PAYWALL_RPC_URL: Paywall.rpc_url must be"):
        paywall_of(Settings.from_env({**env, "SVCPAY_PAYWALL_RPC_URL": "javascript:x"}))


async def test_the_facilitator_key_is_read_from_supported(provider: Provider) -> None:
    supported = (await provider.facilitator.http.get("/supported")).json()

    def answering(body: object) -> httpx.Client:
        return httpx.Client(transport=httpx.MockTransport(lambda _: httpx.Response(200, json=body)))

    key = fetch_facilitator_key(provider.settings, answering(supported))
    assert key == provider.facilitator.key
    other_network = dataclasses.replace(provider.settings, network="solana-devnet")
    with pytest.raises(ConfigError, match="does not settle on solana-devnet"):
        fetch_facilitator_key(other_network, answering(supported))
    with pytest.raises(ConfigError, match="facilitatorKey"):
        fetch_facilitator_key(provider.settings, answering({"kinds": supported["kinds"]}))
    unreachable = dataclasses.replace(provider.settings, facilitator_url="http://127.0.0.1:1")
    with pytest.raises(ConfigError, match="cannot read the facilitator's key"):
        fetch_facilitator_key(unreachable)


async def test_python_m_serves_over_http(provider: Provider, tmp_path: Path) -> None:
    env = {**os.environ, **environment(provider.settings)}
    env["SVCPAY_STATE_DB"] = str(tmp_path / "cli.db")
    proc = subprocess.Popen(
        [sys.executable, "-m", "svcpay.examples.resource_server", "--port", "0"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 60
        line = ""
        while not line and proc.poll() is None and time.monotonic() < deadline:
            if select.select([proc.stdout], [], [], 0.5)[0]:
                line = proc.stdout.readline()
        assert line.startswith("svcpay resource server ready http://127.0.0.1:"), (
            line,
            proc.poll(),
        )
        url = line.split()[-1]
        async with httpx.AsyncClient(base_url=url) as http:
            assert (await http.get("/health")).json() == {"status": "ok"}
            unpaid = await http.get("/v1/data")
            assert unpaid.status_code == 402
            assert unpaid.json()["accepts"][0]["amount"] == "500000"
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err


async def test_python_m_names_what_is_missing() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SVCPAY_")}
    done = subprocess.run(
        [sys.executable, "-m", "svcpay.examples.resource_server"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "SVCPAY_FACILITATOR_URL" in done.stderr
