"""The browser paywall (issue 26, docs/adr/0032): an unpaid request that prefers HTML gets a
402 page with the JSON answer's payment headers. Only 402s are asked for here, which the
gate builds from its terms alone: the gate runs without a chain (stand-ins for the sources
a paid request would read), so these tests are fast."""

from __future__ import annotations

import base64
import json
import re
from collections.abc import AsyncIterator
from html.parser import HTMLParser
from typing import Any
from wsgiref.types import StartResponse, WSGIEnvironment

import httpx
import pytest
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from spl.token.instructions import get_associated_token_address
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from svcpay.gate import OneTime, Paywall, Session, Subscription, payment_gate, payment_gate_wsgi
from svcpay.gate.paywall import content_security_policy, prefers_html, wallet_bundle
from svcpay.gate.pricing import Terms
from svcpay.protocol.memo import Memos
from svcpay.protocol.mpp import ChallengeIssuer
from svcpay.protocol.replay import MemoryReplayStore
from svcpay.schemes.session.ledger import MemoryVoucherLedger
from svcpay.schemes.session.server import SessionScheme
from tests.gate.test_wsgi import call

pytestmark = pytest.mark.anyio
USDC_MINT = "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v"
PYUSD_MINT = "2b1kV6DkPAnxd5ixfnxCpjxmKwqjjaYmCZfHsFu24GXo"
OWNER = Keypair().pubkey()
FEE_PAYER = Keypair().pubkey()
PLAN = str(Keypair().pubkey())
TERMS = Terms(
    pay_to=str(get_associated_token_address(OWNER, Pubkey.from_string(USDC_MINT))),
    token=USDC_MINT,
    facilitator="http://facilitator.invalid",
    owner=str(OWNER),
    fee_payer=str(FEE_PAYER),
)
BROWSER = "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,*/*;q=0.8"
PAYMENT_HEADERS = ("payment-required", "www-authenticate")
HOSTILE = '"><script>alert(1)</script>'


class NoSubscriptions:
    """The gate's subscriptions and meter: never read for a 402."""

    async def lookup(self, subscription_id: str) -> None:
        raise AssertionError("a 402 reads no subscription")

    def invalidate(self, subscription_id: str) -> None:
        return None

    async def record(self, subscription_id: str, amount: int) -> None:
        raise AssertionError("a 402 records no usage")

    def pending(self, subscription_id: str) -> int:
        return 0


class NoSessions:
    program_id = Keypair().pubkey()

    async def lookup(self, channel: Pubkey, *, fresh: bool = False) -> None:
        raise AssertionError("a 402 reads no session")


class NoSettler:
    async def settle(self, charge: Any) -> Any:
        raise AssertionError("a 402 settles nothing")

    async def verify(self, charge: Any) -> Any:
        raise AssertionError("a 402 verifies nothing")


PRICING = {
    "/v1/data": [
        OneTime(500_000, description="one report"),
        Subscription(PLAN, 10_000_000, 30 * 86_400, metered=250_000),
        Session(1_000),
    ],
    "/v1/only-once": [OneTime(1_250_000)],
    "/v1/session": [Session(2_000)],
}


async def data(request: Request) -> JSONResponse:
    return JSONResponse({"served": request.url.path})


def gate_kwargs(**extra: Any) -> dict[str, Any]:
    return {
        "pricing": extra.pop("pricing", PRICING),
        "terms": TERMS,
        "memos": Memos(b"paywall-memo-secret-0123456789"),
        "trusted_facilitators": set(),
        "replay": MemoryReplayStore(),
        "subscriptions": NoSubscriptions(),
        "meter": NoSubscriptions(),
        "sessions": SessionScheme(
            TERMS,
            ChallengeIssuer(b"paywall-session-secret-0123", "svcpay"),
            NoSessions(),
            MemoryVoucherLedger(),
        ),
        "mpp_facilitator": NoSettler(),
        **extra,
    }


def asgi_client(**extra: Any) -> httpx.AsyncClient:
    app = Starlette(routes=[Route("/v1/{rest:path}", data)])
    gate = payment_gate(app, **gate_kwargs(**extra))
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=gate), base_url="http://api")


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with asgi_client() as client:
        yield client


class Page(HTMLParser):
    """What the checks need of a page: its elements, text, labels and form controls."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.open: list[str] = []
        self.text: list[str] = []
        self.title = ""
        self.scripts = 0
        self.feed(text)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        if tag not in ("meta", "img", "br", "input", "link", "hr"):
            self.open.append(tag)

    def handle_endtag(self, tag: str) -> None:
        assert self.open and self.open[-1] == tag, f"</{tag}> closes {self.open[-1:]}"
        self.open.pop()

    def handle_data(self, data: str) -> None:
        if self.open and self.open[-1] == "title":
            self.title += data
        if self.open and self.open[-1] == "script":
            self.scripts += 1
        self.text.append(data)

    def all(self, tag: str) -> list[dict[str, str | None]]:
        return [attrs for t, attrs in self.tags if t == tag]

    @property
    def words(self) -> str:
        return " ".join(" ".join(self.text).split())


def page_of(response: httpx.Response) -> Page:
    assert response.headers["content-type"] == "text/html; charset=utf-8"
    return Page(response.text)


# -- which clients get the page -------------------------------------------------------------


@pytest.mark.parametrize(
    ("accept", "html"),
    [
        (BROWSER, True),
        ("text/html", True),
        ("text/html;q=0.9, application/json;q=0.5", True),
        ("application/json", False),
        ("*/*", False),
        ("", False),
        ("application/json, text/html;q=0.9", False),
        ("text/html, application/json", False),  # equal and both named: an API client
        ("text/html;q=0, */*", False),
        ("text/*", False),
        ("text/html;q=abc", False),
    ],
)
def test_html_is_chosen_only_when_preferred_over_json(accept: str, html: bool) -> None:
    assert prefers_html(accept.encode()) is html


async def test_a_browser_gets_an_html_402_with_the_json_answers_payment_headers(
    http: httpx.AsyncClient,
) -> None:
    as_json = await http.get("/v1/data", headers={"accept": "application/json"})
    as_html = await http.get("/v1/data", headers={"accept": BROWSER})
    assert as_json.status_code == as_html.status_code == 402
    assert as_json.headers["content-type"] == "application/json"
    assert as_json.json()["accepts"]
    page_of(as_html)
    for name in PAYMENT_HEADERS:
        assert as_html.headers.get_list(name), name
        # Same schemes and parameters; memos and challenge ids are fresh on every 402.
        assert len(as_html.headers.get_list(name)) == len(as_json.headers.get_list(name))
    assert as_html.headers["www-authenticate"].startswith("Payment ")
    json_only = {"content-type", "content-length"}
    assert set(as_json.headers) - json_only <= set(as_html.headers)


@pytest.mark.parametrize("accept", ["application/json", "*/*", None])
async def test_api_clients_get_json_as_before(http: httpx.AsyncClient, accept: str | None) -> None:
    headers = {"accept": accept} if accept else {}
    response = await http.get("/v1/data", headers=headers)
    assert response.status_code == 402
    assert response.headers["content-type"] == "application/json"
    assert "content-security-policy" not in response.headers
    assert response.json()["message"] == "this resource requires payment"


async def test_the_page_lists_every_way_to_pay(http: httpx.AsyncClient) -> None:
    page = page_of(await http.get("/v1/data", headers={"accept": BROWSER}))
    words = page.words
    assert "GET /v1/data" in words
    assert "0.50 USDC per request" in words and "one report" in words
    for way in ("x402 exact", "svcpay one-time payment", "MPP charge"):
        assert way in words, way
    assert "0.001 USDC per request" in words and "MPP session" in words
    assert "10.00 USDC every 30 days" in words
    assert f"Plan {PLAN}" in words and f"svcpay subscribe {PLAN}" in words
    assert "each request also uses 0.25 USDC of the subscription's allowance" in words
    assert "MPP subscription" in words
    assert "svcpay pay http://api/v1/data" in words
    assert f"USDC: mint {USDC_MINT}" in words


async def test_a_route_shows_only_what_it_offers(http: httpx.AsyncClient) -> None:
    once = page_of(await http.get("/v1/only-once", headers={"accept": BROWSER})).words
    assert "1.25 USDC per request" in once
    assert "Subscribe" not in once and "session" not in once
    session = await http.get("/v1/session", headers={"accept": BROWSER})
    assert session.status_code == 402 and session.headers["www-authenticate"]
    words = page_of(session).words
    assert "0.002 USDC per request" in words and "MPP session" in words
    assert "x402" not in words and "Pay once" not in words


async def test_schemes_left_out_are_not_offered() -> None:
    only_once = {"/v1/only-once": PRICING["/v1/only-once"]}
    async with asgi_client(pricing=only_once, schemes=["svcpay", "subscription"]) as http:
        words = page_of(await http.get("/v1/only-once", headers={"accept": BROWSER})).words
    assert "svcpay one-time payment" in words
    assert "x402" not in words and "MPP" not in words


async def test_a_plan_in_another_token_is_priced_in_it() -> None:
    other = Subscription(PLAN, 5_000_000, 7 * 86_400, token=PYUSD_MINT)
    async with asgi_client(pricing={"/v1/data": [other]}) as http:
        words = page_of(await http.get("/v1/data", headers={"accept": BROWSER})).words
    assert "5.00 PYUSD every week" in words
    assert f"PYUSD: mint {PYUSD_MINT}" in words


async def test_an_unknown_mint_is_named_by_address_or_by_the_providers_symbol() -> None:
    mint = str(Keypair().pubkey())
    owner_ata = get_associated_token_address(OWNER, Pubkey.from_string(mint))
    terms = Terms(pay_to=str(owner_ata), token=mint)
    kwargs = {"pricing": {"/v1/data": [OneTime(1_500)]}, "terms": terms}
    async with asgi_client(**kwargs, paywall=Paywall(decimals=3)) as http:
        words = page_of(await http.get("/v1/data", headers={"accept": BROWSER})).words
    assert f"1.50 tokens of mint {mint[:4]}…{mint[-4:]} per request" in words
    assert f"Token: mint {mint}" in words
    async with asgi_client(**kwargs, paywall=Paywall(token_symbol="<b>PTS</b>")) as http:
        response = await http.get("/v1/data", headers={"accept": BROWSER})
    assert "0.0015 <b>PTS</b> per request" in page_of(response).words
    assert "<b>" not in response.text


# -- hostile strings and headers --------------------------------------------------------------


async def test_hostile_strings_are_shown_as_text() -> None:
    # A plan is named by its address (Subscription refuses anything else), so what a
    # provider writes is the description, the title, the footer and the token's symbol.
    pricing = {
        "/v1": [OneTime(1, description=HOSTILE), Subscription(PLAN, 1, 3600, description=HOSTILE)]
    }
    paywall = Paywall(title=HOSTILE, footer=HOSTILE, token_symbol=HOSTILE)
    async with asgi_client(
        pricing=pricing, schemes=["svcpay", "subscription"], paywall=paywall
    ) as http:
        response = await http.get(f"/v1/{HOSTILE}", headers={"accept": BROWSER})
    assert response.status_code == 402
    page = page_of(response)
    assert "<script" not in response.text.lower()
    assert page.all("script") == [] and page.scripts == 0
    assert HOSTILE in page.title
    # title, heading, path (resource line, agent command), descriptions, symbol, footer
    assert page.words.count(HOSTILE) >= 8


async def test_the_page_is_sent_with_a_content_security_policy(http: httpx.AsyncClient) -> None:
    response = await http.get("/v1/data", headers={"accept": BROWSER})
    headers = response.headers
    csp = headers["content-security-policy"]
    nonce = re.search(r"style-src 'nonce-([A-Za-z0-9_-]{20,})'", csp)
    assert nonce is not None
    assert csp == content_security_policy(nonce[1])
    for directive in (
        "default-src 'none'",
        "img-src data:",
        "script-src 'none'",
        "base-uri 'none'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    ):
        assert directive in csp
    (style,) = page_of(response).all("style")
    assert style["nonce"] == nonce[1]
    assert headers["x-content-type-options"] == "nosniff"
    assert headers["referrer-policy"] == "no-referrer"
    assert headers["cache-control"] == "no-store"
    assert headers["vary"] == "Accept"
    again = await http.get("/v1/data", headers={"accept": BROWSER})
    assert again.headers["content-security-policy"] != csp  # a nonce per response


def test_the_wallet_scripts_hook_allows_a_script_by_nonce_only() -> None:
    csp = content_security_policy("s", script_nonce="w")
    assert "script-src 'nonce-w'" in csp and "unsafe" not in csp


RPC = "http://127.0.0.1:8899"


async def test_with_an_rpc_url_the_page_carries_the_wallet_script() -> None:
    async with asgi_client(paywall=Paywall(rpc_url=RPC)) as http:
        response = await http.get("/v1/data?x=1", headers={"accept": BROWSER})
    assert response.status_code == 402
    csp = response.headers["content-security-policy"]
    nonce = re.search(r"script-src 'nonce-([A-Za-z0-9_-]{20,})'", csp)
    assert nonce is not None and f"connect-src 'self' {RPC};" in csp
    page = page_of(response)
    data, script = page.all("script")
    assert data == {"type": "application/json", "id": "svcpay-paywall"}
    assert script == {"nonce": nonce[1]}
    config = json.loads(response.text.split('id="svcpay-paywall">')[1].split("</script>")[0])
    required = json.loads(base64.b64decode(response.headers["payment-required"]))
    assert config["rpc"] == RPC and config["required"] == required
    assert config["chain"] == "solana:mainnet"
    assert config["plans"] == [{"plan": str(PLAN), "metered": 250_000}]
    assert wallet_bundle() in response.text
    (section,) = [a for a in page.all("section") if a.get("id") == "svcpay-wallet"]
    assert "hidden" in section  # shown by the script: without it there is nothing to press
    assert "Pay 0.50 USDC" in page.words
    assert "Subscribe: 10.00 USDC every 30 days" in page.words
    (cap,) = [a for a in page.all("input") if a.get("id") == "svcpay-cap-0"]
    assert cap["value"] == "10"
    assert [a for a in page.all("label") if a.get("for") == "svcpay-cap-0"]


async def test_strings_in_the_wallet_scripts_data_cannot_close_its_element() -> None:
    pricing = {"/v1": [OneTime(500_000, description="</script><script>alert(1)</script>")]}
    async with asgi_client(pricing=pricing, paywall=Paywall(rpc_url=RPC)) as http:
        response = await http.get("/v1/</script>", headers={"accept": BROWSER})
    page = page_of(response)  # every element closed where it was opened
    assert len(page.all("script")) == 2
    data = response.text.split('id="svcpay-paywall">')[1].split("</script>")[0]
    assert "<" not in data and ">" not in data
    assert json.loads(data)["required"]["resource"]["url"].endswith("/v1/</script>")


@pytest.mark.parametrize(
    "options",
    [
        {},  # no RPC URL: the browser could not build the payment
        {"rpc_url": RPC, "wallet": False},
    ],
)
async def test_without_an_rpc_url_or_with_the_wallet_off_no_script_runs(
    options: dict[str, Any],
) -> None:
    async with asgi_client(paywall=Paywall(**options)) as http:
        response = await http.get("/v1/data", headers={"accept": BROWSER})
    assert "script-src 'none'" in response.headers["content-security-policy"]
    assert page_of(response).all("script") == []


async def test_a_described_plan_is_named_on_the_page() -> None:
    pricing = {"/v1": [Subscription(PLAN, 10_000_000, 86_400, description="Pro")]}
    paywall = Paywall(rpc_url=RPC)
    async with asgi_client(pricing=pricing, schemes=["subscription"], paywall=paywall) as http:
        response = await http.get("/v1/data", headers={"accept": BROWSER})
    words = page_of(response).words
    assert "Pro: 10.00 USDC every day" in words
    assert "Subscribe to Pro: 10.00 USDC every day" in words


async def test_a_route_sold_by_subscription_only_gets_the_subscribe_button() -> None:
    pricing = {"/v1": [Subscription(PLAN, 10_000_000, 86_400)]}
    paywall = Paywall(rpc_url=RPC)
    async with asgi_client(pricing=pricing, schemes=["subscription"], paywall=paywall) as http:
        response = await http.get("/v1/data", headers={"accept": BROWSER})
    page = page_of(response)
    config = json.loads(response.text.split('id="svcpay-paywall">')[1].split("</script>")[0])
    assert config == {
        "rpc": RPC,
        "chain": "solana:mainnet",
        "plans": [{"plan": str(PLAN), "metered": 0}],
    }
    assert "Subscribe: 10.00 USDC every day" in page.words
    assert not [a for a in page.all("button") if a.get("id") == "svcpay-pay"]
    assert not page.all("input")  # no allowance to set


async def test_a_route_without_x402_or_a_plan_gets_no_wallet_script() -> None:
    pricing = {"/v1": [OneTime(500_000)]}
    async with asgi_client(
        pricing=pricing, schemes=["svcpay"], paywall=Paywall(rpc_url=RPC)
    ) as http:
        response = await http.get("/v1/data", headers={"accept": BROWSER})
    assert page_of(response).all("script") == []


async def test_the_page_reads_as_a_document(http: httpx.AsyncClient) -> None:
    page = page_of(await http.get("/v1/data", headers={"accept": BROWSER}))
    assert page.open == []  # every element closed where it was opened
    (root,) = page.all("html")
    assert root["lang"] == "en"
    assert page.title.strip() == "Payment required: GET /v1/data"
    assert len(page.all("h1")) == 1
    assert any(m.get("charset") == "utf-8" for m in page.all("meta"))
    labelled = {label.get("for") for label in page.all("label")}
    for control in page.all("input") + page.all("select") + page.all("textarea"):
        assert control.get("id") in labelled or control.get("aria-label"), control
    for img in page.all("img"):
        assert "alt" in img


# -- the provider's options -----------------------------------------------------------------


async def test_a_paywall_turned_off_gives_browsers_json() -> None:
    async with asgi_client(paywall=Paywall(enabled=False)) as http:
        response = await http.get("/v1/data", headers={"accept": BROWSER})
    assert response.status_code == 402
    assert response.headers["content-type"] == "application/json"
    assert response.json()["accepts"]


async def test_a_restyled_page_shows_the_providers_title_logo_and_colours() -> None:
    paywall = Paywall(
        title="Acme Data",
        logo_url="https://cdn.acme.example/logo.png",
        accent="#C0FFEE",
        background="#123",
        footer="Questions: support@acme.example",
    )
    async with asgi_client(paywall=paywall) as http:
        response = await http.get("/v1/data", headers={"accept": BROWSER})
    page = page_of(response)
    assert page.title.startswith("Acme Data")
    assert "Acme Data" in page.words and "Questions: support@acme.example" in page.words
    (img,) = page.all("img")
    assert img["src"] == "https://cdn.acme.example/logo.png" and img["alt"] == ""
    assert "img-src data: https://cdn.acme.example;" in response.headers["content-security-policy"]
    assert "--accent:#C0FFEE" in response.text and "--bg:#123" in response.text
    assert "--fg:#ffffff" in response.text  # light text on a dark background


def test_a_data_logo_needs_no_other_origin() -> None:
    logo = "data:image/png;base64,iVBORw0KGgo="
    assert "img-src data:;" in content_security_policy("n", Paywall(logo_url=logo).logo_url)


@pytest.mark.parametrize(
    ("rpc_url", "source"),
    [
        ("http://127.0.0.1:8899", "http://127.0.0.1:8899"),
        ("http://[::1]:8899/", "http://[::1]:8899"),
        ("https://rpc.example/path?api-key=k", "https://rpc.example"),
    ],
)
def test_the_page_may_reach_the_rpc_nodes_origin_only(rpc_url: str, source: str) -> None:
    csp = content_security_policy("n", None, "s", Paywall(rpc_url=rpc_url).rpc_url)
    assert f"connect-src 'self' {source};" in csp


@pytest.mark.parametrize(
    ("options", "complaint"),
    [
        ({"accent": "red"}, "Paywall.accent must be a CSS hex colour"),
        ({"accent": "#12345"}, "Paywall.accent"),
        ({"background": "#fff;}body{x:y"}, "Paywall.background"),
        ({"background": "#ggg"}, "Paywall.background"),
        ({"logo_url": "http://acme.example/logo.png"}, "Paywall.logo_url must be an https://"),
        ({"logo_url": "javascript:alert(1)"}, "Paywall.logo_url"),
        ({"logo_url": "https://a.example/x.png' onerror='x"}, "Paywall.logo_url"),
        ({"logo_url": "https://user:pw@a.example/x.png"}, "Paywall.logo_url"),
        ({"logo_url": "https://a.example;script-src */x.png"}, "Paywall.logo_url"),
        ({"logo_url": "data:text/html,<script>x</script>"}, "Paywall.logo_url"),
        ({"decimals": 256}, "Paywall.decimals"),
        ({"title": " "}, "Paywall.title"),
        ({"rpc_url": "javascript:alert(1)"}, "Paywall.rpc_url must be an http:// or https://"),
        ({"rpc_url": "ftp://rpc.example"}, "Paywall.rpc_url"),
        ({"rpc_url": "https://u:p@rpc.example"}, "Paywall.rpc_url"),
        ({"rpc_url": "https://rpc.example; script-src *"}, "Paywall.rpc_url"),
        ({"rpc_url": "https://"}, "Paywall.rpc_url"),
        ({"rpc_url": "https://rpc.example;script-src"}, "Paywall.rpc_url"),
        ({"logo_url": "https://a.example,x/logo.png"}, "Paywall.logo_url"),
    ],
)
def test_bad_options_are_refused_when_the_paywall_is_made(
    options: dict[str, Any], complaint: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(complaint)):
        Paywall(**options)


# -- the WSGI shell -------------------------------------------------------------------------


def wsgi_app(environ: WSGIEnvironment, start_response: StartResponse) -> list[bytes]:
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"served"]


def test_the_wsgi_shell_serves_the_page_and_takes_the_options() -> None:
    kwargs = gate_kwargs(pricing={"/v1/only-once": [OneTime(1_250_000)]})
    with payment_gate_wsgi(wsgi_app, **kwargs, paywall=Paywall(title="Acme")) as gate:
        page = call(gate, "/v1/only-once", headers={"Accept": BROWSER})
        as_json = call(gate, "/v1/only-once", headers={"Accept": "application/json"})
    assert page.code == as_json.code == 402
    headers = {k.lower(): v for k, v in page.headers}
    assert headers["content-type"] == "text/html; charset=utf-8"
    assert headers["content-security-policy"].startswith("default-src 'none'")
    assert "payment-required" in headers
    words = Page(page.body.decode()).words
    assert "Acme" in words and "1.25 USDC per request" in words
    assert ("content-type", "application/json") in as_json.headers
    with payment_gate_wsgi(wsgi_app, **kwargs, paywall=Paywall(enabled=False)) as gate:
        off = call(gate, "/v1/only-once", headers={"Accept": BROWSER})
    assert ("content-type", "application/json") in off.headers
