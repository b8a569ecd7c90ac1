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

import re
import secrets
from dataclasses import dataclass
from urllib.parse import urlsplit

from svcpay.amounts import USDC_DECIMALS
from svcpay.gate.paywall_page import KNOWN_MINTS, on_colour, page_html, wallet_bundle, wallet_config
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

_HEX_COLOUR = re.compile(r"#(?:[0-9a-fA-F]{3}|[0-9a-fA-F]{6})")
_NOT_IN_URLS = " \t\r\n\"'<>\\`"  # quoting or spacing: refused in any URL the page shows
_ORIGIN = re.compile(r"https?://[A-Za-z0-9.\[\]:-]+(?::[0-9]{1,5})?")
_DATA_IMAGE = re.compile(r"data:image/(?:png|jpeg|gif|webp|svg\+xml)[;,][A-Za-z0-9+/=;,%._-]*")


@dataclass(frozen=True)
class Paywall:
    """How the gate answers a browser (docs/adr/0032). On by default; `enabled=False` gives
    browsers the JSON 402 as every other client.

    `title` heads the page; `logo_url` (https, or a `data:image/...` URL) is shown beside it
    and allowed by the page's CSP; `accent` and `background` are CSS hex colours (`#rgb` or
    `#rrggbb`), the text colour is black or white, whichever reads better on `background`;
    `footer` is a line of text at the bottom. `rpc_url` is the cluster's JSON-RPC as the
    payer's browser reaches it: with it (and `wallet`, on by default) a route that takes
    x402 `exact` gets the wallet script, which pays from the page. `decimals` is what prices
    are shown with (the gate's mints are priced in base units; 6, as USDC and as the gate's
    MPP challenges announce, unless the provider says otherwise). `token_symbol` names
    `Terms.token` when it is no mint in KNOWN_MINTS (its address is shown either way). Bad
    values raise ValueError here, when the gate is built."""

    enabled: bool = True
    title: str = "Payment required"
    logo_url: str | None = None
    accent: str = "#1d4ed8"
    background: str = "#ffffff"
    footer: str = ""
    decimals: int = USDC_DECIMALS
    token_symbol: str | None = None
    rpc_url: str | None = None
    wallet: bool = True

    def __post_init__(self) -> None:
        for name in ("accent", "background"):
            value = getattr(self, name)
            if not isinstance(value, str) or not _HEX_COLOUR.fullmatch(value):
                raise ValueError(
                    f"Paywall.{name} must be a CSS hex colour (#rgb or #rrggbb), not {value!r}"
                )
        if self.logo_url is not None and _logo_source(self.logo_url) is None:
            raise ValueError(
                "Paywall.logo_url must be an https:// URL (host and path, no credentials, "
                f"no spaces or quotes) or a data:image/ URL, not {self.logo_url!r}"
            )
        if not 0 <= self.decimals <= 255:
            raise ValueError(
                f"Paywall.decimals must be a mint's decimals (0-255), not {self.decimals}"
            )
        if not self.title.strip():
            raise ValueError("Paywall.title must not be empty")
        if self.rpc_url is not None and _rpc_origin(self.rpc_url) is None:
            raise ValueError(
                "Paywall.rpc_url must be an http:// or https:// URL of the cluster's JSON-RPC "
                f"(no credentials, no spaces or quotes), not {self.rpc_url!r}"
            )

    @property
    def text_colour(self) -> str:
        """Black or white, whichever contrasts more with `background` (WCAG luminance)."""
        return on_colour(self.background)


@dataclass(frozen=True)
class Ways:
    """Which ways to pay the gate has turned on (its registered schemes and MPP intents)."""

    svcpay: bool = False
    x402: bool = False
    mpp_charge: bool = False
    mpp_subscription: bool = False
    mpp_session: bool = False
    subscription: bool = False


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
    if logo_url is not None and (origin := _logo_source(logo_url)) not in (None, "data:"):
        images += f" {origin}"
    scripts = f"'nonce-{script_nonce}'" if script_nonce else "'none'"
    connect = ""
    if script_nonce:
        rpc = _rpc_origin(rpc_url) if rpc_url else None
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


# -- helpers ------------------------------------------------------------------------------


def _logo_source(url: str) -> str | None:
    """The CSP source that allows `url` (`https://host[:port]` or `data:`), None when it is
    no https or data:image URL the page will show."""
    if any(c in url for c in _NOT_IN_URLS):
        return None
    if url.startswith("data:"):
        return "data:" if _DATA_IMAGE.fullmatch(url) else None
    return _origin(url, ("https",))


def _rpc_origin(url: str) -> str | None:
    """The CSP source that lets the page reach `url` (`http[s]://host[:port]`)."""
    return _origin(url, ("http", "https"))


def _origin(url: str, schemes: tuple[str, ...]) -> str | None:
    """`scheme://host[:port]` of `url`, None unless it is a plain URL in one of `schemes`
    (no credentials; the origin holds nothing a CSP source list would read as a separator)."""
    if any(c in url for c in _NOT_IN_URLS):
        return None
    parts = urlsplit(url)
    if parts.scheme not in schemes or parts.username is not None or parts.password is not None:
        return None
    origin = f"{parts.scheme}://{parts.netloc}"
    return origin if parts.netloc and _ORIGIN.fullmatch(origin) else None
