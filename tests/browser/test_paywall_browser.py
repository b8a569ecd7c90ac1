"""The paywall in headless Chromium (issue 26): a Wallet Standard wallet, injected into the
page, pays the example API's /v1/data end to end on the demo's validator, and the page shows
the paid response; without JavaScript the terms still show; the page passes basic
accessibility checks and logs no console error (its CSP allows the script and the RPC)."""

from __future__ import annotations

import json

import httpx
from playwright.sync_api import Browser, BrowserContext, Page
from solders.keypair import Keypair
from solders.pubkey import Pubkey

from svcpay.keys import load_keypair
from tests.browser.chain import token_account_balance, wallet_balance
from tests.browser.conftest import ServedDemo
from tests.support.browser import (
    Watched,
    contrast,
    inject_wallet,
    shot,
    unlabelled_controls,
    watch,
)

PRICE = 500_000  # GET /v1/data: 0.50 USDC
PAID_PATIENCE_MS = 90_000


def terms(demo: ServedDemo) -> dict[str, str]:
    """What /v1/data asks for, as JSON: the mint and the account paid."""
    reply = httpx.get(demo.paywall, headers={"Accept": "application/json"}, timeout=30)
    assert reply.status_code == 402
    accepts = reply.json()["accepts"]
    return {"mint": accepts[0]["token"], "pay_to": accepts[0]["payTo"]}


def balances(demo: ServedDemo, wallet: Keypair) -> tuple[int, int]:
    t = terms(demo)
    return (
        wallet_balance(demo.validator, wallet.pubkey(), Pubkey.from_string(t["mint"])),
        token_account_balance(demo.validator, t["pay_to"]),
    )


def with_wallet(
    browser: Browser, demo: ServedDemo, wallet: Keypair
) -> tuple[BrowserContext, Page, Watched]:
    """A browser context whose pages hold the test wallet, and a watched page in it."""
    context = browser.new_context()
    inject_wallet(context, wallet)
    page = context.new_page()
    return context, page, watch(page, demo.paywall)


def test_a_wallet_pays_the_paywall_and_the_page_shows_the_paid_response(
    browser: Browser, served_demo: ServedDemo
) -> None:
    wallet = load_keypair(served_demo.wallet)
    context, page, watched = with_wallet(browser, served_demo, wallet)
    response = page.goto(served_demo.paywall)
    assert response is not None and response.status == 402
    assert response.headers["content-type"].startswith("text/html")
    csp = response.headers["content-security-policy"]
    assert "script-src 'nonce-" in csp and f"connect-src 'self' {served_demo.validator}" in csp
    assert page.get_by_role("heading", level=1).inner_text() == "svcpay example API"
    assert page.get_by_text("0.50 USDC per request").is_visible()
    assert page.get_by_text("1 wallet found.").is_visible()
    shot(page, "paywall")
    assert unlabelled_controls(page) == []
    assert page.evaluate("document.documentElement.lang") == "en"
    for selector in ("h1", "p.resource", "h2"):
        assert contrast(page, selector) >= 4.5, selector

    page.get_by_role("button", name="Connect svcpay test wallet").click()
    assert page.locator("#svcpay-account").inner_text() == str(wallet.pubkey())
    pay = page.get_by_role("button", name="Pay 0.50 USDC")
    assert contrast(page, "#svcpay-pay") >= 4.5
    before = balances(served_demo, wallet)
    pay.click()
    page.wait_for_selector("#svcpay-status[data-kind=ok]", timeout=PAID_PATIENCE_MS)
    status = page.locator("#svcpay-status").inner_text()
    assert status.startswith("Paid. Transaction "), status
    assert page.locator("#svcpay-result-status").inner_text().startswith("200")
    served = json.loads(page.locator("#svcpay-result-body").inner_text())
    assert served["data"] == "the data"
    shot(page, "paywall-paid")
    after = balances(served_demo, wallet)
    assert after == (before[0] - PRICE, before[1] + PRICE)  # paid once, exactly the price
    assert page.evaluate("window.svcpayTestWallet.signed") == 1
    watched.clean()
    context.close()


def test_a_refused_signature_pays_nothing_and_the_keyboard_alone_can_pay_after(
    browser: Browser, served_demo: ServedDemo
) -> None:
    wallet = load_keypair(served_demo.wallet)
    context, page, watched = with_wallet(browser, served_demo, wallet)
    page.goto(served_demo.paywall)
    page.get_by_text("1 wallet found.").wait_for()

    # Keyboard only: Tab to the wallet's button (the first control), Enter connects it and
    # moves the focus to the pay button.
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Connect svcpay test wallet"
    page.keyboard.press("Enter")
    page.locator("#svcpay-connected").wait_for()
    assert page.evaluate("document.activeElement.id") == "svcpay-pay"

    before = balances(served_demo, wallet)
    page.evaluate("window.svcpayTestWallet.refuse = true")
    page.keyboard.press("Enter")
    page.wait_for_selector("#svcpay-status[data-kind=error]", timeout=PAID_PATIENCE_MS)
    assert "the user rejected the request" in page.locator("#svcpay-status").inner_text()
    assert page.locator("#svcpay-pay").is_enabled()
    assert balances(served_demo, wallet) == before
    shot(page, "paywall-refused")

    page.evaluate("window.svcpayTestWallet.refuse = false")
    page.locator("#svcpay-pay").focus()
    page.keyboard.press("Enter")
    page.wait_for_selector("#svcpay-status[data-kind=ok]", timeout=PAID_PATIENCE_MS)
    after = balances(served_demo, wallet)
    assert after == (before[0] - PRICE, before[1] + PRICE)
    watched.clean()
    context.close()


def test_without_a_wallet_the_page_says_so_and_without_javascript_it_shows_the_terms(
    browser: Browser, served_demo: ServedDemo
) -> None:
    context = browser.new_context()  # no wallet injected
    page = context.new_page()
    watched = watch(page, served_demo.paywall)
    page.goto(served_demo.paywall)
    page.get_by_text("No Solana wallet found in this browser.").wait_for()
    watched.clean()
    context.close()

    context = browser.new_context(java_script_enabled=False)
    page = context.new_page()
    response = page.goto(served_demo.paywall)
    assert response is not None and response.status == 402
    assert page.get_by_text("0.50 USDC per request").is_visible()
    assert page.get_by_text("svcpay pay ").first.is_visible()
    assert page.locator("#svcpay-wallet").is_hidden()  # nothing to press without a script
    shot(page, "paywall-no-javascript")
    context.close()
