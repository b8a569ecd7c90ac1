"""The provider dashboard in headless Chromium (issue 26), checked against the served demo's
data (content, not pixels): login by API key, every page free of console errors and of
controls without labels, a second provider seeing none of the demo provider's rows, a failed
webhook delivery resent, a key created and revoked, a form without its CSRF token refused,
and a script in a key's label or a webhook's URL shown as text, never run."""

from __future__ import annotations

import json
import re

import httpx
from playwright.sync_api import Browser, BrowserContext, Page

from svcpay.keys import load_keypair
from tests.browser.conftest import ServedDemo
from tests.support.browser import Watched, contrast, inject_wallet, shot, unlabelled_controls, watch

PAGES = ("", "/subscriptions", "/events", "/webhooks", "/keys", "/sessions")
HOSTILE = "<script>window.__pwned=1</script>"


def try_login(context: BrowserContext, demo: ServedDemo, key: str) -> tuple[Page, Watched]:
    """The login form filled in with `key` and sent, on a new page of `context`."""
    page = context.new_page()
    watched = watch(page)
    page.goto(f"{demo.dashboard}/login")
    page.get_by_label("API key").fill(key)
    page.get_by_role("button", name="Log in").click()
    return page, watched


def login(context: BrowserContext, demo: ServedDemo, key: str) -> tuple[Page, Watched]:
    page, watched = try_login(context, demo, key)
    page.wait_for_url(re.compile(r".*/dashboard/?$"))
    return page, watched


def visit(page: Page, demo: ServedDemo, path: str) -> None:
    response = page.goto(f"{demo.dashboard}{path}")
    assert response is not None and response.status == 200, path


def new_provider(demo: ServedDemo, name: str) -> str:
    created = json.loads(
        demo.cli("facilitator", "provider", "create", name, "--no-check", "--json")
    )
    return str(created["apiKey"])


def test_the_demo_provider_sees_its_data_on_every_page(
    browser: Browser, served_demo: ServedDemo
) -> None:
    context = browser.new_context()
    page, watched = login(context, served_demo, served_demo.api_key)
    overview = page.locator("main").inner_text()
    assert "Totals" in overview and "Revenue by day" in overview
    assert page.locator("svg.chart").count() == 1
    assert "MRR" in overview
    # The walkthrough's first period of the 10 USDC plan, shown in tokens.
    assert re.search(r"^subscription\t10\.00\t0\.00\t10\.00\t1$", overview, re.MULTILINE), overview
    shot(page, "dashboard-overview")
    seen = {}
    for path in PAGES:
        visit(page, served_demo, path)
        assert unlabelled_controls(page) == [], path
        assert contrast(page, "main p, main th, main td") >= 4.5, path
        seen[path] = page.locator("main").inner_text()
        shot(page, f"dashboard{path.replace('/', '-') or '-overview'}")
    # The demo's walkthrough: a subscription renewed once, a metered one, payments of each
    # mode, webhooks delivered to its receiver, a session.
    bearer = {"Authorization": f"Bearer {served_demo.api_key}"}
    listed = httpx.get(f"{served_demo.facilitator}/v1/events", headers=bearer, timeout=30)
    events = listed.json()["events"]
    sub_ids = {e["data"]["subscription"] for e in events if "subscription" in e.get("data", {})}
    assert sub_ids and all(s in seen["/subscriptions"] for s in sub_ids)
    assert "subscription.renewed" in seen["/events"] and "payment.settled" in seen["/events"]
    assert "delivered" in seen["/webhooks"]
    assert "No sessions" not in seen["/sessions"]

    # Keyboard: the first Tab lands on the skip link, which moves the focus to the content.
    visit(page, served_demo, "/subscriptions")
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Skip to content"
    watched.clean()
    context.close()


def test_another_provider_sees_none_of_the_demo_providers_rows(
    browser: Browser, served_demo: ServedDemo
) -> None:
    mine = browser.new_context()
    page, _ = login(mine, served_demo, served_demo.api_key)
    visit(page, served_demo, "/subscriptions")
    demo_rows = page.locator("main tbody th code").all_inner_texts()
    assert demo_rows
    visit(page, served_demo, "/events")
    demo_events = page.locator("main tbody th code").all_inner_texts()
    mine.close()

    other_key = new_provider(served_demo, "browser-other")
    theirs = browser.new_context()
    page, watched = login(theirs, served_demo, other_key)
    for path in PAGES:
        visit(page, served_demo, path)
        text = page.locator("main").inner_text()
        leaked = [row for row in demo_rows + demo_events if row in text]
        assert not leaked, (path, leaked)
    visit(page, served_demo, "/subscriptions")
    assert "No subscriptions yet." in page.locator("main").inner_text()
    watched.clean()
    theirs.close()


def test_a_failed_delivery_is_resent_from_the_dashboard(
    browser: Browser, served_demo: ServedDemo
) -> None:
    # An endpoint that refuses connections (the discard port), and a script in its URL.
    bearer = {"Authorization": f"Bearer {served_demo.api_key}"}
    dead = f"http://127.0.0.1:9/hook?{HOSTILE}"
    added = httpx.post(
        f"{served_demo.facilitator}/v1/webhooks",
        headers=bearer,
        json={"url": dead, "eventTypes": ["payment.settled"]},
        timeout=30,
    )
    assert added.status_code in (200, 201), added.text

    # A payment from the paywall makes a payment.settled event for it.
    context = browser.new_context()
    inject_wallet(context, load_keypair(served_demo.wallet))
    pay = context.new_page()
    paying = watch(pay, served_demo.paywall)
    pay.goto(served_demo.paywall)
    pay.get_by_role("button", name="Connect svcpay test wallet").click()
    pay.get_by_role("button", name="Pay 0.50 USDC").click()
    pay.wait_for_selector("#svcpay-status[data-kind=ok]", timeout=90_000)
    paying.clean()
    pay.close()

    page, watched = login(context, served_demo, served_demo.api_key)
    resend = page.get_by_role("button", name=re.compile(r"^Resend delivery \d+$"))
    for _ in range(60):  # the delivery fails on its first attempt within a few seconds
        visit(page, served_demo, "/webhooks")
        if resend.count():
            break
        page.wait_for_timeout(500)
    assert resend.count() >= 1, page.locator("main").inner_text()
    assert page.get_by_text(dead).count() >= 1  # the URL's script shown as text
    assert page.evaluate("window.__pwned") is None
    shot(page, "dashboard-webhook-failed")
    first = resend.first
    label = first.get_attribute("aria-label") or ""
    delivery = label.rsplit(" ", 1)[1]
    first.click()
    page.wait_for_load_state()
    row = page.locator("tr", has=page.get_by_role("rowheader", name=delivery, exact=True))
    assert "pending" in row.inner_text()
    shot(page, "dashboard-webhook-resent")
    watched.clean()
    context.close()


def test_a_key_is_created_and_revoked_and_forms_need_their_csrf_token(
    browser: Browser, served_demo: ServedDemo
) -> None:
    context = browser.new_context()
    page, watched = login(context, served_demo, served_demo.api_key)
    visit(page, served_demo, "/keys")
    page.get_by_label("Label").fill(HOSTILE)
    page.get_by_role("button", name="Create key").click()
    new_key = page.locator("code.key").inner_text()
    assert new_key.startswith("svc_")
    assert page.get_by_text(HOSTILE).count() == 1  # the label, as text
    assert page.evaluate("window.__pwned") is None
    shot(page, "dashboard-key-created")

    # The new key logs in; revoked, it does not.
    other = browser.new_context()
    second, _ = login(other, served_demo, new_key)
    other.close()
    row = page.locator("tr", has=page.get_by_text(HOSTILE))
    key_id = row.locator("th code").inner_text()
    page.get_by_role("button", name=f"Revoke key {key_id}").click()
    page.wait_for_load_state()
    assert page.get_by_role("button", name=f"Revoke key {key_id}").count() == 0
    refused = browser.new_context()
    page2, _ = try_login(refused, served_demo, new_key)
    assert page2.get_by_role("alert").is_visible()
    assert page2.url.endswith("/login")
    refused.close()

    # A form posted without its CSRF token (the session cookie alone) is refused.
    answer = context.request.post(f"{served_demo.dashboard}/keys", form={"label": "forged"})
    assert answer.status == 403
    visit(page, served_demo, "/keys")
    assert "forged" not in page.locator("main").inner_text()
    watched.clean()
    context.close()
