"""Subscribing from the paywall in headless Chromium (issue 26): on /v1/resource, sold by a
plan, a wallet with SOL and USDC subscribes (svc_billing's `subscribe`, signed by the
wallet, sent by the page) and the page shows the response the subscription opens; the
demo's client, already a subscriber, is served with the subscription it holds."""

from __future__ import annotations

import json

import httpx
from playwright.sync_api import Browser
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from spl.token.constants import TOKEN_PROGRAM_ID
from spl.token.instructions import (
    create_associated_token_account,
    get_associated_token_address,
    transfer_checked,
)
from spl.token.models import TransferCheckedParams

from svcpay.keys import load_keypair
from svcpay.localnet.chain import Chain
from svcpay.program import pda
from tests.browser.chain import wallet_balance
from tests.browser.conftest import ServedDemo
from tests.support.browser import inject_wallet, shot, unlabelled_controls, watch

PLAN_PRICE = 10_000_000  # the demo's plan: 10 USDC every 30 days
PATIENCE_MS = 90_000


def resource(demo: ServedDemo) -> str:
    return demo.paywall.replace("/v1/data", "/v1/resource")


def plan_and_mint(demo: ServedDemo) -> tuple[Pubkey, Pubkey]:
    reply = httpx.get(resource(demo), headers={"Accept": "application/json"}, timeout=30)
    assert reply.status_code == 402
    option = reply.json()["accepts"][0]
    return Pubkey.from_string(option["svc"]["planId"]), Pubkey.from_string(option["token"])


def a_new_subscriber(demo: ServedDemo, mint: Pubkey) -> Keypair:
    """A wallet with 1 SOL and 20 USDC (sent by the demo's client)."""
    chain = Chain(demo.validator)
    fresh = chain.funded_keypair(10**9)
    giver = load_keypair(demo.wallet)
    target = get_associated_token_address(fresh.pubkey(), mint, TOKEN_PROGRAM_ID)
    chain.send_ok(
        [
            create_associated_token_account(fresh.pubkey(), fresh.pubkey(), mint),
            transfer_checked(
                TransferCheckedParams(
                    program_id=TOKEN_PROGRAM_ID,
                    source=get_associated_token_address(giver.pubkey(), mint, TOKEN_PROGRAM_ID),
                    mint=mint,
                    dest=target,
                    owner=giver.pubkey(),
                    amount=2 * PLAN_PRICE,
                    decimals=6,
                )
            ),
        ],
        [fresh, giver],
    )
    return fresh


def test_a_wallet_subscribes_from_the_page_and_is_served(
    browser: Browser, served_demo: ServedDemo
) -> None:
    plan, mint = plan_and_mint(served_demo)
    wallet = a_new_subscriber(served_demo, mint)
    context = browser.new_context()
    inject_wallet(context, wallet)
    page = context.new_page()
    watched = watch(page, resource(served_demo))
    response = page.goto(resource(served_demo))
    assert response is not None and response.status == 402
    page.get_by_role("button", name="Connect svcpay test wallet").click()
    subscribe = page.get_by_role("button", name="Subscribe: 10.00 USDC every 30 days")
    assert page.locator("#svcpay-pay").count() == 0  # a plan only: nothing to pay once
    assert unlabelled_controls(page) == []
    before = wallet_balance(served_demo.validator, wallet.pubkey(), mint)
    subscribe.click()
    page.wait_for_selector("#svcpay-status[data-kind=ok]", timeout=PATIENCE_MS)
    subscription = pda.subscription_address(plan, wallet.pubkey())
    status = page.locator("#svcpay-status").inner_text()
    assert status.startswith(f"Subscribed. Subscription {subscription}"), status
    assert page.locator("#svcpay-result-status").inner_text().startswith("200")
    served = json.loads(page.locator("#svcpay-result-body").inner_text())
    assert served["paidBy"] == str(subscription), served
    shot(page, "paywall-subscribed")
    assert wallet_balance(served_demo.validator, wallet.pubkey(), mint) == before - PLAN_PRICE
    assert Chain(served_demo.validator).account(subscription) is not None
    watched.clean()
    context.close()


def test_a_subscriber_is_served_with_the_subscription_it_holds(
    browser: Browser, served_demo: ServedDemo
) -> None:
    _, mint = plan_and_mint(served_demo)
    wallet = load_keypair(served_demo.wallet)  # subscribed in the walkthrough
    before = wallet_balance(served_demo.validator, wallet.pubkey(), mint)
    context = browser.new_context()
    inject_wallet(context, wallet)
    page = context.new_page()
    watched = watch(page, resource(served_demo))
    page.goto(resource(served_demo))
    page.get_by_role("button", name="Connect svcpay test wallet").click()
    page.get_by_role("button", name="Subscribe: 10.00 USDC every 30 days").click()
    page.wait_for_selector("#svcpay-status[data-kind=ok]", timeout=PATIENCE_MS)
    assert page.locator("#svcpay-status").inner_text().startswith("Served with your subscription")
    assert page.locator("#svcpay-result-status").inner_text().startswith("200")
    assert page.evaluate("window.svcpayTestWallet.signed") == 0  # nothing to sign
    assert wallet_balance(served_demo.validator, wallet.pubkey(), mint) == before
    watched.clean()
    context.close()
