"""The browser paywall (issue 26, docs/adr/0032): a request whose `Accept` prefers HTML to
JSON and that carries no payment gets a server-rendered page instead of the JSON 402. The
status stays 402 and every payment header of the JSON answer stays; only the body, its
type and the page's security headers change.

The page shows the resource, each price in the token's units and every way to pay the 402
offers (x402 `exact`, svcpay's proof, MPP `charge`, `session` and `subscription`, subscribing
to a plan), and how an agent pays (`paywall_page` writes it). It needs no JavaScript to be
read. Everything interpolated is escaped with `html.escape`. The gate sends a
Content-Security-Policy with a per-response nonce for the page's `<style>` and `<script>`
elements.

Where the route takes x402 `exact` and `Paywall.rpc_url` is set, the page also carries the
wallet script (`static/paywall.js`, bundled from npm packages by scripts/build-paywall): it
connects a Wallet Standard wallet, builds the payment in the page, has the wallet sign it,
retries the request with it and shows the answer. The terms it reads are the
`PAYMENT-REQUIRED` header's, embedded as a JSON data block; it may connect to the page's own
origin and the RPC node only.

A provider restyles or turns it off with `Paywall`, passed as `paywall=` to `payment_gate`,
`PaymentGate` or `PaymentGateWSGI`.
"""

from __future__ import annotations

import secrets

from svcpay.gate.paywall_options import Paywall, Ways, logo_source, rpc_origin
from svcpay.gate.paywall_page import KNOWN_MINTS, page_html, wallet_bundle, wallet_config
from svcpay.protocol.pricing import PricingEntry, Terms
from svcpay.schemes.decision import RawHeaders, Reply, Request

__all__ = [
    "KNOWN_MINTS",
    "Paywall",
    "Ways",
    "content_security_policy",
    "prefers_html",
    "render",
    "wallet_bundle",
]


def prefers_html(accept: bytes | None) -> bool:
    """Whether an `Accept` header prefers HTML to JSON: `text/html`'s quality (from its most
    specific matching range) is above `application/json`'s, or equal and named while JSON
    only matches a wildcard. A browser's `text/html,...,*/*;q=0.8` does; `application/json`,
    `*/*`, no header, and `text/html, application/json` at equal quality do not."""
    if not accept:
        return False
    ranges: list[tuple[str, float]] = []
    for part in accept.decode("latin-1").split(","):
        fields = [f.strip() for f in part.split(";")]
        media = fields[0].lower()
        if "/" not in media:
            continue
        q = 1.0
        for param in fields[1:]:
            key, _, value = param.partition("=")
            if key.strip().lower() == "q":
                try:
                    q = float(value.strip())
                except ValueError:
                    q = 0.0
                q = min(max(q, 0.0), 1.0)
        ranges.append((media, q))
    html_q, html_exact = _quality(ranges, "text", "html")
    json_q, json_exact = _quality(ranges, "application", "json")
    if html_q <= 0 or not html_exact:
        return False
    return html_q > json_q or (html_q == json_q and not json_exact)


def _quality(ranges: list[tuple[str, float]], kind: str, sub: str) -> tuple[float, bool]:
    """(quality, named exactly) of `kind/sub` under `ranges`: the most specific range wins."""
    best: tuple[int, float] | None = None
    for media, q in ranges:
        specificity = {f"{kind}/{sub}": 2, f"{kind}/*": 1, "*/*": 0}.get(media)
        if specificity is not None and (best is None or specificity > best[0]):
            best = (specificity, q)
    if best is None:
        return 0.0, False
    return best[1], best[0] == 2


def content_security_policy(
    style_nonce: str,
    logo_url: str | None = None,
    script_nonce: str | None = None,
    rpc_url: str | None = None,
) -> str:
    """The page's CSP: nothing by default, its `<style>` by nonce, images from data: URLs
    and the logo's origin, no base, forms only to the gate itself, never framed. With
    `script_nonce`, the wallet script runs (by nonce) and may fetch from the page's origin
    and `rpc_url`'s."""
    images = "data:"
    if logo_url is not None and (origin := logo_source(logo_url)) not in (None, "data:"):
        images += f" {origin}"
    scripts = f"'nonce-{script_nonce}'" if script_nonce else "'none'"
    connect = ""
    if script_nonce:
        rpc = rpc_origin(rpc_url) if rpc_url else None
        connect = f"connect-src 'self'{f' {rpc}' if rpc else ''}; "
    return (
        f"default-src 'none'; style-src 'nonce-{style_nonce}'; img-src {images}; "
        f"script-src {scripts}; {connect}base-uri 'none'; form-action 'self'; "
        "frame-ancestors 'none'"
    )


def render(
    paywall: Paywall, request: Request, pricing: list[PricingEntry], terms: Terms, ways: Ways,
    reply: Reply,
) -> Reply:  # fmt: skip
    """The HTML 402 for `request`: `reply` (the JSON 402 the gate built, whose headers are
    kept) with the page as its body and the page's security headers."""
    nonce = secrets.token_urlsafe(18)
    wallet = wallet_config(paywall, pricing, terms, ways, reply)
    page = page_html(paywall, request, pricing, terms, ways, reply, nonce, wallet).encode()
    policy = content_security_policy(
        nonce, paywall.logo_url, nonce if wallet else None, paywall.rpc_url
    )
    replaced = {b"content-type", b"content-length", b"cache-control", b"vary"}
    kept = [(k, v) for k, v in reply.headers if k.lower() not in replaced]
    headers: RawHeaders = [
        (b"content-type", b"text/html; charset=utf-8"),
        (b"content-length", str(len(page)).encode()),
        *kept,
        (b"content-security-policy", policy.encode()),
        (b"x-content-type-options", b"nosniff"),
        (b"referrer-policy", b"no-referrer"),
        (b"cache-control", b"no-store"),
        (b"vary", b"Accept"),
    ]
    return Reply(reply.status, headers, page)
