"""The paywall's HTML page (`paywall.render` sends it): the resource, each price in the token's
units, every way to pay the 402 offers, how an agent pays, and the wallet's controls and
script where the page carries them. Everything interpolated is escaped with `html.escape`."""

from __future__ import annotations

import base64
import binascii
import html
import json
from collections.abc import Mapping
from decimal import Decimal
from functools import cache
from importlib import resources
from typing import Any

from svcpay.gate.paywall_options import Paywall, Ways, on_colour
from svcpay.protocol.pricing import OneTime, PricingEntry, Session, Subscription, Terms
from svcpay.protocol.stablecoins import STABLECOINS, name_of
from svcpay.schemes.decision import Reply, Request

# Mints a person recognises by name (svcpay.protocol.stablecoins); every other mint is shown
# by its address only.
KNOWN_MINTS = {coin.mint: name for coin in STABLECOINS if (name := name_of(coin.mint))}


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def page_html(
    paywall: Paywall, request: Request, pricing: list[PricingEntry], terms: Terms, ways: Ways,
    reply: Reply, nonce: str, wallet: dict[str, Any] | None = None,
) -> str:  # fmt: skip
    resource = request.resource
    url = request.url
    sections = [
        _one_time(paywall, pricing, terms, ways),
        _sessions(paywall, pricing, terms, ways),
        _subscriptions(paywall, pricing, terms, ways),
    ]
    logo = ""
    if paywall.logo_url is not None:
        logo = f'<img class="logo" src="{_e(paywall.logo_url)}" alt="" width="48" height="48">'
    footer = f"<footer><p>{_e(paywall.footer)}</p></footer>" if paywall.footer else ""
    message = _message(reply)
    mints = sorted({_mint_of(e, terms) for e in pricing})
    tokens = "".join(
        f"<li>{_e(_symbol(m, paywall, terms) or 'Token')}: mint <code>{_e(m)}</code></li>"
        for m in mints
    )
    return f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="robots" content="noindex">
<link rel="icon" href="data:,">
<title>{_e(paywall.title)}: {_e(resource)}</title>
<style nonce="{nonce}">{_style(paywall)}</style>
</head>
<body>
<main>
<header>{logo}<h1>{_e(paywall.title)}</h1></header>
<p class="resource">Payment is required for <code>{_e(resource)}</code>.</p>
{f'<p class="message">{_e(message)}</p>' if message else ""}
{_wallet_section(paywall, pricing, terms, ways, wallet) if wallet else ""}
{"".join(s for s in sections if s)}
<section aria-labelledby="agents">
<h2 id="agents">Paying from a program or an agent</h2>
<p>The <code>svcpay</code> command line client reads this answer's terms and pays them
within the limit you give:</p>
<pre><code>svcpay pay {_e(url)} --max-amount AMOUNT -k KEYPAIR</code></pre>
{_wire(reply)}
</section>
<section aria-labelledby="tokens">
<h2 id="tokens">Token</h2>
<ul>{tokens}</ul>
<p>Network: <code>{_e(terms.network)}</code>. Prices are shown with {paywall.decimals}
decimals.</p>
</section>
</main>
{footer}
{_wallet_script(wallet, nonce) if wallet else ""}
</body>
</html>
"""


def _one_time(paywall: Paywall, pricing: list[PricingEntry], terms: Terms, ways: Ways) -> str:
    items = []
    for entry in pricing:
        if not isinstance(entry, OneTime):
            continue
        how = []
        if ways.x402:
            how.append(
                "<li><strong>x402 <code>exact</code></strong>: a signed Solana transfer in the "
                "<code>PAYMENT-SIGNATURE</code> header (this answer's "
                "<code>PAYMENT-REQUIRED</code> header holds the terms)</li>"
            )
        if ways.svcpay:
            how.append(
                "<li><strong>svcpay one-time payment</strong>: pay through the facilitator "
                "with the memo of this answer's terms, then send the proof in "
                "<code>X-PAYMENT</code></li>"
            )
        if ways.mpp_charge:
            how.append(
                "<li><strong>MPP <code>charge</code></strong>: answer the "
                "<code>WWW-Authenticate: Payment</code> challenge with an "
                "<code>Authorization: Payment</code> credential</li>"
            )
        description = f"<p>{_e(entry.description)}</p>" if entry.description else ""
        items.append(
            '<article class="offer">'
            f"<h3>{_e(_price(entry.amount, terms.token, paywall, terms))} per request</h3>"
            f"{description}<ul>{''.join(how)}</ul></article>"
        )
    if not items:
        return ""
    return (
        '<section aria-labelledby="once"><h2 id="once">Pay once for this request</h2>'
        f"{''.join(items)}</section>"
    )


def _sessions(paywall: Paywall, pricing: list[PricingEntry], terms: Terms, ways: Ways) -> str:
    items = []
    for entry in pricing:
        if not isinstance(entry, Session) or not ways.mpp_session:
            continue
        price = _price(entry.amount, terms.token, paywall, terms)
        deposit = _price(entry.suggested_deposit, terms.token, paywall, terms)
        description = f"<p>{_e(entry.description)}</p>" if entry.description else ""
        items.append(
            '<article class="offer">'
            f"<h3>{_e(price)} per {_e(entry.unit)}</h3>{description}"
            "<ul><li><strong>MPP <code>session</code></strong>: open a session with a "
            f"deposit (suggested: {_e(deposit)}) and pay each request with a signed voucher "
            "in <code>Authorization: Payment</code>; what is left is yours when the session "
            "closes (<code>svcpay pay URL --session</code>)</li></ul></article>"
        )
    if not items:
        return ""
    return (
        '<section aria-labelledby="session"><h2 id="session">Pay as you go</h2>'
        f"{''.join(items)}</section>"
    )


def _subscriptions(paywall: Paywall, pricing: list[PricingEntry], terms: Terms, ways: Ways) -> str:
    items = []
    for entry in pricing:
        if not isinstance(entry, Subscription) or not ways.subscription:
            continue
        token = _mint_of(entry, terms)
        price = _price(entry.amount, token, paywall, terms)
        metered = ""
        if entry.metered:
            use = _price(entry.metered, token, paywall, terms)
            metered = (
                f"<p>Metered: each request also uses {_e(use)} of the subscription's "
                "allowance (set when you subscribe with <code>--allowance-cap</code>).</p>"
            )
        how = [
            "<li><strong>Subscribe</strong>: <code>svcpay subscribe "
            f"{_e(entry.plan)} -k KEYPAIR</code> (the first period is charged at once), then "
            "send the subscription id in <code>X-Svc-Sub</code></li>"
        ]
        if ways.mpp_subscription:
            how.append(
                "<li><strong>MPP <code>subscription</code></strong>: name your subscription "
                "in an <code>Authorization: Payment</code> credential</li>"
            )
        named = f"{entry.description}: " if entry.description else ""
        items.append(
            '<article class="offer">'
            f"<h3>{_e(named)}{_e(price)} {_e(_every(entry.interval))}</h3>"
            f"<p>Plan <code>{_e(entry.plan)}</code></p>{metered}<ul>{''.join(how)}</ul>"
            "</article>"
        )
    if not items:
        return ""
    return (
        '<section aria-labelledby="subscribe"><h2 id="subscribe">Subscribe</h2>'
        f"{''.join(items)}</section>"
    )


def wallet_config(
    paywall: Paywall, pricing: list[PricingEntry], terms: Terms, ways: Ways, reply: Reply
) -> dict[str, Any] | None:
    """What the wallet script reads (the RPC URL, the x402 terms of `reply`, the plans it
    can subscribe to), or None when the page carries no script: no RPC URL, the wallet
    turned off, or neither x402 terms nor a plan."""
    if not (paywall.wallet and paywall.rpc_url):
        return None
    required: Any = None
    header = next((v for k, v in reply.headers if k.lower() == b"payment-required"), None)
    if ways.x402 and header is not None:
        try:
            required = json.loads(base64.b64decode(header, validate=True))
        except (binascii.Error, ValueError):
            required = None
    plans = [{"plan": e.plan, "metered": e.metered or 0} for e in _plans(pricing, ways)]
    if not isinstance(required, dict) and not plans:
        return None
    config: dict[str, Any] = {"rpc": paywall.rpc_url, "chain": _chain(terms.network)}
    if isinstance(required, dict):
        config["required"] = required
    if plans:
        config["plans"] = plans
    return config


def _plans(pricing: list[PricingEntry], ways: Ways) -> list[Subscription]:
    """The plans the page can subscribe a wallet to."""
    return [e for e in pricing if isinstance(e, Subscription)] if ways.subscription else []


def _chain(network: str) -> str:
    """The Wallet Standard chain of svcpay's network name (a local cluster otherwise)."""
    name = network.removeprefix("solana-")
    return f"solana:{name}" if name in ("mainnet", "devnet", "testnet") else "solana:localnet"


def _wallet_section(
    paywall: Paywall, pricing: list[PricingEntry], terms: Terms, ways: Ways, wallet: dict[str, Any]
) -> str:
    """The wallet's controls: hidden until the script shows them (without JavaScript there
    is nothing to press)."""
    controls = []
    if "required" in wallet:
        price = next((e.amount for e in pricing if isinstance(e, OneTime)), None)
        label = f"Pay {_price(price, terms.token, paywall, terms)}" if price else "Pay"
        controls.append(
            f'<button id="svcpay-pay" type="button" class="pay">{_e(label)}</button>'
            '<p class="note">Your wallet signs one transfer of this price; the facilitator '
            "pays the network fee and settles it.</p>"
        )
    for i, entry in enumerate(_plans(pricing, ways)):
        token = _mint_of(entry, terms)
        every = f"{_price(entry.amount, token, paywall, terms)} {_every(entry.interval)}"
        to = f" to {entry.description}" if entry.description else ""
        cap = ""
        if entry.metered:
            suggested = Decimal(entry.amount).scaleb(-paywall.decimals).normalize()
            cap = (
                f'<label for="svcpay-cap-{i}">Metered allowance per period (in tokens)</label> '
                f'<input id="svcpay-cap-{i}" type="text" inputmode="decimal" '
                f'value="{_e(f"{suggested:f}")}" size="10"> '
            )
        controls.append(
            f'<div class="subscribe">{cap}<button id="svcpay-subscribe-{i}" type="button" '
            f'class="pay">Subscribe{_e(to)}: {_e(every)}</button></div>'
        )
    if any(_plans(pricing, ways)):
        controls.append(
            '<p class="note">Subscribing charges the first period now from your wallet '
            "(which pays the network fee and the subscription account's rent); the provider "
            "renews it each period until you cancel.</p>"
        )
    return f"""<section id="svcpay-wallet" aria-labelledby="wallet" hidden>
<h2 id="wallet">Pay with a wallet</h2>
<p id="svcpay-status" role="status" aria-live="polite">Looking for a Solana wallet…</p>
<ul id="svcpay-wallets" class="wallets"></ul>
<div id="svcpay-connected" hidden>
<p>Connected account: <code id="svcpay-account"></code></p>
{"".join(controls)}
</div>
<div id="svcpay-result" hidden>
<h3>The response</h3>
<p><strong id="svcpay-result-status"></strong></p>
<pre><code id="svcpay-result-body"></code></pre>
</div>
</section>"""


def _wallet_script(config: dict[str, Any], nonce: str) -> str:
    # A JSON data block is never run; "<", ">" and "&" are escaped so that no string in it
    # can close the element.
    data = (
        json.dumps(config, separators=(",", ":"))
        .replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
    )
    return (
        f'<script type="application/json" id="svcpay-paywall">{data}</script>\n'
        f'<script nonce="{nonce}">{wallet_bundle()}</script>'
    )


@cache
def wallet_bundle() -> str:
    """The wallet script (scripts/build-paywall's output, shipped in the package)."""
    text = (resources.files("svcpay.gate") / "static" / "paywall.js").read_text("utf-8")
    if "</script" in text.lower() or "<!--" in text:  # it is inlined in a <script> element
        raise RuntimeError("svcpay/gate/static/paywall.js cannot be inlined: rebuild it")
    return text


def _style(paywall: Paywall) -> str:
    # Only validated hex colours are interpolated here (Paywall.__post_init__).
    return (
        f":root{{--accent:{paywall.accent};--bg:{paywall.background};"
        f"--fg:{paywall.text_colour};--on-accent:{on_colour(paywall.accent)}}}"
        "body{margin:0;background:var(--bg);color:var(--fg);"
        "font:16px/1.5 system-ui,-apple-system,'Segoe UI',sans-serif}"
        "main{max-width:44rem;margin:0 auto;padding:2rem 1rem;"
        "border-top:.4rem solid var(--accent)}"
        "header{display:flex;align-items:center;gap:1rem}"
        "h1{margin:.5rem 0}h2{margin-top:2rem;border-bottom:2px solid var(--accent)}"
        ".offer{border:1px solid var(--accent);border-radius:.5rem;padding:0 1rem;"
        "margin:1rem 0}"
        "code{font-family:ui-monospace,monospace;overflow-wrap:anywhere}"
        "pre{overflow-x:auto;padding:.75rem;border:1px solid var(--accent);"
        "border-radius:.5rem}"
        "footer{max-width:44rem;margin:0 auto;padding:1rem;font-size:.9rem}"
        "button{font:inherit;cursor:pointer;border-radius:.5rem;padding:.5rem 1rem;"
        "border:2px solid var(--accent);background:var(--bg);color:var(--fg)}"
        "button.pay{background:var(--accent);color:var(--on-accent);font-weight:600}"
        "button:focus-visible{outline:3px solid var(--fg);outline-offset:2px}"
        "button:disabled{opacity:.6;cursor:progress}"
        ".wallets{list-style:none;padding:0;display:flex;flex-wrap:wrap;gap:.5rem}"
        ".wallets img{vertical-align:middle;margin-right:.5rem}"
        ".subscribe{margin:.75rem 0}.subscribe input{font:inherit;padding:.4rem}"
        "#svcpay-status{overflow-wrap:anywhere}#svcpay-status[data-kind=error]{font-weight:600}"
        ".note{font-size:.9rem}"
    )


def _mint_of(entry: PricingEntry, terms: Terms) -> str:
    if isinstance(entry, Subscription) and entry.token:
        return entry.token
    return terms.token


def _symbol(mint: str, paywall: Paywall, terms: Terms) -> str | None:
    if mint in KNOWN_MINTS:
        return KNOWN_MINTS[mint]
    return paywall.token_symbol if mint == terms.token else None


def _price(units: int, mint: str, paywall: Paywall, terms: Terms) -> str:
    """`500000` -> `0.50 USDC`; a mint without a name: `0.50 tokens of <mint's start>…`."""
    text = f"{Decimal(units).scaleb(-paywall.decimals):f}"
    whole, _, frac = text.partition(".")
    frac = frac.rstrip("0")
    if paywall.decimals >= 2:
        frac = frac.ljust(2, "0")
    amount = f"{whole}.{frac}" if frac else whole
    symbol = _symbol(mint, paywall, terms)
    return f"{amount} {symbol}" if symbol else f"{amount} tokens of mint {mint[:4]}…{mint[-4:]}"


_UNITS = (("week", 604_800), ("day", 86_400), ("hour", 3600), ("minute", 60), ("second", 1))


def _every(secs: int) -> str:
    """2592000 -> `every 30 days`, 604800 -> `every week`, 5400 -> `every 1 hour 30 minutes`."""
    if secs <= 0:
        return "per period"
    for unit, size in _UNITS:
        if secs % size == 0:
            n = secs // size
            if unit == "week" and n > 1 and secs % 86_400 == 0:
                return f"every {secs // 86_400} days"
            return f"every {unit}" if n == 1 else f"every {n} {unit}s"
    parts = []
    for unit, size in _UNITS[1:]:
        n, secs = divmod(secs, size)
        if n:
            parts.append(f"{n} {unit}{'s' if n > 1 else ''}")
    return "every " + " ".join(parts)


def _wire(reply: Reply) -> str:
    """What other clients read of this answer: its payment headers, and the JSON body."""
    names = {k.lower() for k, _ in reply.headers}
    read = []
    if b"payment-required" in names:
        read.append("an x402 client reads its <code>PAYMENT-REQUIRED</code> header")
    if b"www-authenticate" in names:
        read.append("an MPP client its <code>WWW-Authenticate: Payment</code> challenges")
    said = f"This answer is HTTP 402: {', '.join(read)}. " if read else "This answer is HTTP 402. "
    return (
        f"<p>{said}Ask for <code>application/json</code> to get the terms as JSON, as every "
        "client that does not prefer HTML does.</p>"
    )


def _message(reply: Reply) -> str | None:
    try:
        body: Any = json.loads(reply.body)
    except ValueError:
        return None
    if isinstance(body, Mapping):
        text = body.get("message") or body.get("detail")
        return str(text) if text else None
    return None
