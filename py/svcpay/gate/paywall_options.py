"""What a provider sets on the browser paywall (`Paywall`) and which ways to pay a page
offers (`Ways`), with the checks of what the page may show (colours, the logo's and the RPC
node's origins). `paywall` (the gate's answer) and `paywall_page` (the HTML) both read them."""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from svcpay.amounts import USDC_DECIMALS

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
        if self.logo_url is not None and logo_source(self.logo_url) is None:
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
        if self.rpc_url is not None and rpc_origin(self.rpc_url) is None:
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


def logo_source(url: str) -> str | None:
    """The CSP source that allows `url` (`https://host[:port]` or `data:`), None when it is
    no https or data:image URL the page will show."""
    if any(c in url for c in _NOT_IN_URLS):
        return None
    if url.startswith("data:"):
        return "data:" if _DATA_IMAGE.fullmatch(url) else None
    return _origin(url, ("https",))


def rpc_origin(url: str) -> str | None:
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


def on_colour(colour: str) -> str:
    """Black or white, whichever reads better on `colour`."""
    return "#000000" if _luminance(colour) > 0.179 else "#ffffff"


def _luminance(colour: str) -> float:
    hexes = colour[1:]
    if len(hexes) == 3:
        hexes = "".join(c * 2 for c in hexes)
    channels = [int(hexes[i : i + 2], 16) / 255 for i in (0, 2, 4)]
    linear = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]
