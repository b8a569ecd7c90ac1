"""Headless Chromium for the browser tests (tests/browser): Debian's /usr/bin/chromium,
driven by Playwright (no browser download: scripts/chromium-ensure installs the package).

`Watched` pages collect console errors, uncaught exceptions and dialogs, so a test can
assert that a page load left none; `shot` saves a screenshot under .svcpay/screenshots on
every run, so a failure can be looked at. `inject_wallet` puts tests/browser/wallet.js, a
Wallet Standard wallet that signs with a local keypair, into every page of a context."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import (
    Browser,
    BrowserContext,
    ConsoleMessage,
    Dialog,
    Page,
    Playwright,
    sync_playwright,
)
from playwright.sync_api import Error as PlaywrightError
from solders.keypair import Keypair
from solders.message import to_bytes_versioned
from solders.transaction import VersionedTransaction

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / ".svcpay" / "screenshots"
CHROMIUM = Path(os.environ.get("SVCPAY_CHROMIUM", "/usr/bin/chromium"))
WALLET_JS = ROOT / "tests" / "browser" / "wallet.js"
# As the machine's notes say: without the background-networking flags, Chromium's own
# connections are refused by a closed network, many at a time.
FLAGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage",
]  # fmt: skip


# Package-scoped: Playwright's sync API keeps an event loop running in the test's thread
# until it stops, and tests after tests/browser (the demo's, which call asyncio.run) need
# it stopped.
@pytest.fixture(scope="package")
def playwright() -> Iterator[Playwright]:
    with sync_playwright() as p:
        yield p


@pytest.fixture(scope="package")
def browser(playwright: Playwright) -> Iterator[Browser]:
    if not CHROMIUM.exists():
        pytest.fail(f"no Chromium at {CHROMIUM}: run scripts/chromium-ensure (apt's chromium)")
    found = playwright.chromium.launch(executable_path=str(CHROMIUM), args=FLAGS)
    yield found
    found.close()


@dataclass
class Watched:
    """A page and what went wrong on it: console errors, uncaught exceptions, dialogs."""

    page: Page
    errors: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)

    def clean(self) -> None:
        assert not self.errors, f"console errors on {self.page.url}: {self.errors}"
        assert not self.dialogs, f"dialogs opened on {self.page.url}: {self.dialogs}"


# What Chromium logs for any document or fetch answered 4xx: the paywall's own 402 (the page
# itself) is expected, and is not an error of the page.
PAYWALL_402 = "Failed to load resource: the server responded with a status of 402"


def watch(page: Page, paywall: str | None = None) -> Watched:
    """`page`, watched. `paywall`: the URL whose 402 (the page itself) is expected."""
    watched = Watched(page)

    def console(message: ConsoleMessage) -> None:
        if message.type != "error":
            return
        where = message.location.get("url", "").split("?")[0]
        if paywall and message.text.startswith(PAYWALL_402) and where == paywall.split("?")[0]:
            return
        watched.errors.append(f"{message.text} ({message.location.get('url')})")

    def dialog(d: Dialog) -> None:
        watched.dialogs.append(d.message)
        d.dismiss()

    page.on("console", console)
    page.on("pageerror", lambda e: watched.errors.append(f"uncaught: {e}"))
    page.on("dialog", dialog)
    return watched


def shot(page: Page, name: str) -> Path:
    """Saves a full-page screenshot as .svcpay/screenshots/NAME.png."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{re.sub(r'[^A-Za-z0-9_.-]+', '-', name)}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


def inject_wallet(context: BrowserContext, keypair: Keypair) -> None:
    """Every page of `context` gets the test wallet, holding `keypair`."""
    config = {"address": str(keypair.pubkey()), "publicKey": list(bytes(keypair.pubkey()))}

    def sign(transaction: list[int]) -> list[int]:
        tx = VersionedTransaction.from_bytes(bytes(transaction))
        message = tx.message
        keys = list(message.account_keys)[: message.header.num_required_signatures]
        if keypair.pubkey() not in keys:
            raise ValueError("the transaction needs no signature of this wallet")
        signature = keypair.sign_message(to_bytes_versioned(message))
        signatures = list(tx.signatures)
        signatures[keys.index(keypair.pubkey())] = signature
        return list(bytes(VersionedTransaction.populate(message, signatures)))

    context.expose_function("svcpayTestSign", sign)
    script = f"window.svcpayTestWalletConfig = {json.dumps(config)};\n{WALLET_JS.read_text()}"
    context.add_init_script(script=script)


def contrast(page: Page, selector: str) -> float:
    """The WCAG contrast ratio of the first `selector`'s text colour against the background
    it is drawn on (the nearest ancestor's that is not transparent)."""
    ratio: Any = page.eval_on_selector(
        selector,
        """(el) => {
          const rgb = (c) => c.match(/[\\d.]+/g).slice(0, 4).map(Number);
          const lum = ([r, g, b]) => {
            const f = (v) => {
              v /= 255;
              return v <= 0.04045 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4;
            };
            return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b);
          };
          let bg = null;
          for (let n = el; n; n = n.parentElement) {
            const c = rgb(getComputedStyle(n).backgroundColor);
            if (c.length < 4 || c[3] > 0) { bg = c; break; }
          }
          bg = bg || [255, 255, 255];
          const fg = rgb(getComputedStyle(el).color);
          const [a, b] = [lum(fg), lum(bg)].sort((x, y) => y - x);
          return (a + 0.05) / (b + 0.05);
        }""",
    )
    return float(ratio)


def unlabelled_controls(page: Page) -> list[str]:
    """Form controls (not hidden inputs) without an accessible name: no <label for>, no
    wrapping label, no aria-label(ledby), and buttons without text."""
    found: Any = page.evaluate(
        """() => [...document.querySelectorAll(
            'input:not([type=hidden]), select, textarea, button')]
          .filter((el) => {
            if (el.getAttribute('aria-label') || el.getAttribute('aria-labelledby')) return false;
            if (el.tagName === 'BUTTON') return !el.textContent.trim();
            if (el.id && document.querySelector(`label[for="${el.id}"]`)) return false;
            return !el.closest('label');
          })
          .map((el) => el.outerHTML.slice(0, 120))"""
    )
    return list(found)


__all__ = [
    "PlaywrightError",
    "Watched",
    "browser",
    "contrast",
    "inject_wallet",
    "playwright",
    "shot",
    "unlabelled_controls",
    "watch",
]
