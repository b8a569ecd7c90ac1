"""The provider dashboard (/dashboard) in process, over httpx's ASGI transport, on SQLite:
login by API key, the session cookie and CSRF, two providers who each see only their own
rows, a webhook resend, a key revoked, hostile input shown as text, and the headers."""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from svcpay.facilitator.store import Event, new_id
from tests.support.facilitator_app import ProviderApp, provider_app

HOSTILE = "<script>alert(1)</script>"
NO_RPC = "http://127.0.0.1:9"  # the dashboard never calls the RPC node


@dataclass
class Provider:
    id: str
    key: str
    plan: str
    endpoint: str
    delivery: int


@pytest.fixture
async def target(tmp_path: Path) -> AsyncIterator[ProviderApp]:
    app = await provider_app(NO_RPC, tmp_path)
    try:
        yield app
    finally:
        await app.service.aclose()


async def seed(target: ProviderApp, provider_id: str, key: str, name: str) -> Provider:
    """A plan with one subscription, a payment, and a webhook endpoint whose delivery of it
    failed for good."""
    store = target.service.store
    plan = f"plan-{name}-{HOSTILE}"
    await store.providers.add_resource(provider_id, "plan", plan)
    endpoint, _ = await store.webhooks.create_endpoint(
        provider_id, f"https://{name}.example/hook?x={HOSTILE}", ["*"]
    )
    now = int(time.time())
    sub = f"sub-{name}"
    await store.events.add_many(
        [
            Event(
                id=new_id("evt"), type="subscription.created", created_at=now - 60,
                data={"plan": plan, "subscription": sub, "subscriber": f"payer-{name}",
                      "periodEnd": now + 86400, "note": HOSTILE},
                plan=plan, subscription=sub, mode="subscription", amount=1234,
            ),
            Event(
                id=new_id("evt"), type="payment.settled", created_at=now - 30,
                data={"payTo": plan, "memo": f"order-{name}"}, provider_id=provider_id,
                mode="one-time", amount=500,
            ),
        ]
    )  # fmt: skip
    rows = await store.webhooks.deliveries(endpoint.id)
    await store.webhooks.delivery_failed(rows[0]["id"], status=500, error="boom", retry_at=None)
    return Provider(provider_id, key, plan, endpoint.id, rows[0]["id"])


@pytest.fixture
async def two(target: ProviderApp) -> tuple[Provider, Provider]:
    store = target.service.store
    other = await store.providers.create("other")
    _, other_key = await store.api_keys.create(other, "other")
    return (
        await seed(target, target.provider_id, target.api_key, "alpha"),
        await seed(target, other, other_key, "beta"),
    )


@pytest.fixture
async def http(target: ProviderApp) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=target.app)
    async with httpx.AsyncClient(transport=transport, base_url="http://facilitator") as client:
        yield client


def csrf_of(page: httpx.Response) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert found, page.text
    return found.group(1)


async def login(http: httpx.AsyncClient, key: str) -> httpx.Response:
    page = await http.get("/dashboard/login")
    return await http.post("/dashboard/login", data={"csrf": csrf_of(page), "api_key": key})


@asynccontextmanager
async def client_for(target: ProviderApp, key: str) -> AsyncIterator[httpx.AsyncClient]:
    """A client logged in with `key`."""
    transport = httpx.ASGITransport(app=target.app)
    async with httpx.AsyncClient(transport=transport, base_url="http://facilitator") as client:
        answer = await login(client, key)
        assert answer.status_code == 303, answer.text
        yield client


@pytest.mark.anyio
async def test_login_with_a_good_key_sets_a_strict_session_cookie(
    http: httpx.AsyncClient, target: ProviderApp
) -> None:
    answer = await login(http, target.api_key)
    assert answer.status_code == 303
    assert answer.headers["location"] == "/dashboard/"
    cookie = answer.headers["set-cookie"]
    assert cookie.startswith("svcpay_dashboard=")
    for attribute in ("HttpOnly", "SameSite=strict", "Path=/dashboard", "Max-Age="):
        assert attribute.lower() in cookie.lower()
    assert "secure" not in cookie.lower()  # plain http here; https gets Secure
    assert target.api_key not in cookie
    page = await http.get("/dashboard/")
    assert page.status_code == 200
    assert "Overview" in page.text and target.provider_id in page.text


@pytest.mark.anyio
async def test_the_cookie_is_secure_over_https(target: ProviderApp) -> None:
    transport = httpx.ASGITransport(app=target.app)
    async with httpx.AsyncClient(transport=transport, base_url="https://facilitator") as client:
        answer = await login(client, target.api_key)
    assert "secure" in answer.headers["set-cookie"].lower()


@pytest.mark.anyio
@pytest.mark.parametrize("key", ["", "nope", "svc_0123456789abcdef_wrong"])
async def test_a_bad_key_is_refused(http: httpx.AsyncClient, key: str) -> None:
    answer = await login(http, key)
    assert answer.status_code == 401
    assert "unknown or revoked" in answer.text
    assert (await http.get("/dashboard/")).status_code == 303


@pytest.mark.anyio
@pytest.mark.parametrize(
    "path", ["/", "/subscriptions", "/events", "/webhooks", "/keys", "/sessions"]
)
async def test_pages_need_a_session(http: httpx.AsyncClient, path: str) -> None:
    answer = await http.get(f"/dashboard{path}")
    assert answer.status_code == 303
    assert answer.headers["location"] == "/dashboard/login"


@pytest.mark.anyio
async def test_a_forged_or_tampered_cookie_is_no_session(
    http: httpx.AsyncClient, target: ProviderApp
) -> None:
    await login(http, target.api_key)
    good = http.cookies["svcpay_dashboard"]
    payload, _, mac = good.partition(".")
    http.cookies.clear()
    http.cookies.set("svcpay_dashboard", f"{payload}x.{mac}", path="/dashboard")
    assert (await http.get("/dashboard/")).status_code == 303


@pytest.mark.anyio
async def test_each_provider_sees_only_its_own_rows(
    target: ProviderApp, two: tuple[Provider, Provider]
) -> None:
    for me, them in (two, two[::-1]):
        async with client_for(target, me.key) as client:
            for path in ("/", "/subscriptions", "/events", "/webhooks", "/keys"):
                page = await client.get(f"/dashboard{path}")
                assert page.status_code == 200, path
                assert them.id not in page.text, path
                assert them.endpoint not in page.text, path
                assert them.key.split("_")[1] not in page.text, path  # its key id
                name = "beta" if me.id == two[0].id else "alpha"
                assert f"plan-{name}" not in page.text, path
                assert f"sub-{name}" not in page.text, path
            assert "1234" in (await client.get("/dashboard/subscriptions")).text
            assert me.endpoint in (await client.get("/dashboard/webhooks")).text
            events = (await client.get("/dashboard/events")).text
            assert "payment.settled" in events and "subscription.created" in events
            # resending the other provider's delivery does nothing
            page = await client.get("/dashboard/webhooks")
            answer = await client.post(
                f"/dashboard/webhooks/deliveries/{them.delivery}/resend",
                data={"csrf": csrf_of(page)},
            )
            assert "No failed delivery of yours" in answer.text
            rows = await target.service.store.webhooks.deliveries(them.endpoint)
            assert rows[0]["status"] == "dead"


@pytest.mark.anyio
async def test_the_overview_shows_the_report_and_an_svg_chart(
    target: ProviderApp, two: tuple[Provider, Provider]
) -> None:
    async with client_for(target, two[0].key) as client:
        page = (await client.get("/dashboard/")).text
    assert "<svg" in page and 'class="bar"' in page
    assert "<dd>0.001734</dd>" in page  # volume: 1234 + 500 base units, in tokens
    assert "Recurring revenue" in page and "<dd>0.001234</dd>" in page
    assert "<script" not in page


@pytest.mark.anyio
async def test_subscriptions_show_status_and_next_renewal(
    target: ProviderApp, two: tuple[Provider, Provider]
) -> None:
    async with client_for(target, two[0].key) as client:
        page = (await client.get("/dashboard/subscriptions")).text
    assert "sub-alpha" in page and "payer-alpha" in page
    assert "active" in page
    assert " UTC" in page  # the next renewal, from periodEnd


@pytest.mark.anyio
async def test_a_resend_requeues_a_dead_delivery(
    target: ProviderApp, two: tuple[Provider, Provider]
) -> None:
    mine = two[0]
    store = target.service.store
    async with client_for(target, mine.key) as client:
        page = await client.get("/dashboard/webhooks")
        assert "dead" in page.text and "Resend" in page.text
        answer = await client.post(
            f"/dashboard/webhooks/deliveries/{mine.delivery}/resend",
            data={"csrf": csrf_of(page)},
        )
        assert answer.status_code == 303
    row = (await store.webhooks.deliveries(mine.endpoint))[0]
    assert row["status"] == "pending" and row["attempts"] == 0
    assert row["next_attempt_at"] <= time.time()
    claimed = await store.webhooks.claim(limit=10, lease_secs=30)
    assert mine.delivery in [d.id for d in claimed]


@pytest.mark.anyio
async def test_keys_are_created_once_shown_and_revoked_for_the_api(
    target: ProviderApp,
) -> None:
    async with client_for(target, target.api_key) as client:
        page = await client.get("/dashboard/keys")
        created = await client.post(
            "/dashboard/keys", data={"csrf": csrf_of(page), "label": f"ci {HOSTILE}"}
        )
        assert created.status_code == 200
        new_key = re.search(r'<code class="key">(svc_[^<]+)</code>', created.text)
        assert new_key
        key = new_key.group(1)
        auth = {"Authorization": f"Bearer {key}"}
        assert (await client.get("/v1/events", headers=auth)).status_code == 200
        assert key not in (await client.get("/dashboard/keys")).text  # shown once
        key_id = key.split("_")[1]
        revoked = await client.post(
            f"/dashboard/keys/{key_id}/revoke", data={"csrf": csrf_of(page)}
        )
        assert revoked.status_code == 303
        assert (await client.get("/v1/events", headers=auth)).status_code == 401
        assert (await client.get("/v1/events", headers=target.auth)).status_code == 200


@pytest.mark.anyio
async def test_revoking_the_sessions_own_key_ends_the_session(target: ProviderApp) -> None:
    async with client_for(target, target.api_key) as client:
        page = await client.get("/dashboard/keys")
        key_id = target.api_key.split("_")[1]
        await client.post(f"/dashboard/keys/{key_id}/revoke", data={"csrf": csrf_of(page)})
        assert (await client.get("/dashboard/keys")).status_code == 303


@pytest.mark.anyio
@pytest.mark.parametrize("token", [None, "wrong"])
async def test_a_post_without_the_csrf_token_is_forbidden(
    target: ProviderApp, two: tuple[Provider, Provider], token: str | None
) -> None:
    mine = two[0]
    form = {} if token is None else {"csrf": token}
    async with client_for(target, mine.key) as client:
        for path in (
            f"/dashboard/webhooks/deliveries/{mine.delivery}/resend",
            "/dashboard/keys",
            f"/dashboard/keys/{mine.key.split('_')[1]}/revoke",
            "/dashboard/logout",
        ):
            answer = await client.post(path, data={**form, "label": "x"})
            assert answer.status_code == 403, path
            assert "text/html" in answer.headers["content-type"]
            assert "CSRF token" in answer.text
        keys = await target.service.store.api_keys.of_provider(mine.id)
        assert len(keys) == 1 and keys[0]["revoked_at"] is None
        assert (await target.service.store.webhooks.deliveries(mine.endpoint))[0][
            "status"
        ] == "dead"
    # the login form has a token too
    transport = httpx.ASGITransport(app=target.app)
    async with httpx.AsyncClient(transport=transport, base_url="http://facilitator") as fresh:
        await fresh.get("/dashboard/login")
        answer = await fresh.post("/dashboard/login", data={**form, "api_key": mine.key})
        assert answer.status_code == 403


@pytest.mark.anyio
async def test_hostile_input_is_shown_as_text(
    target: ProviderApp, two: tuple[Provider, Provider]
) -> None:
    async with client_for(target, two[0].key) as client:
        for path in ("/", "/subscriptions", "/events", "/webhooks"):
            page = (await client.get(f"/dashboard{path}")).text
            assert "<script" not in page, path
        assert (
            "&lt;script&gt;alert(1)&lt;/script&gt;"
            in (await client.get("/dashboard/webhooks")).text
        )
        assert "&lt;script&gt;" in (await client.get("/dashboard/events")).text
        assert "&lt;script&gt;" in (await client.get("/dashboard/subscriptions")).text


@pytest.mark.anyio
@pytest.mark.parametrize("path", ["/login", "/", "/static/dashboard.css", "/nope"])
async def test_every_answer_carries_the_security_headers(target: ProviderApp, path: str) -> None:
    async with client_for(target, target.api_key) as client:
        answer = await client.get(f"/dashboard{path}")
    csp = answer.headers["content-security-policy"]
    for directive in (
        "default-src 'none'", "style-src 'self'", "img-src 'self' data:",
        "form-action 'self'", "frame-ancestors 'none'", "base-uri 'none'",
    ):  # fmt: skip
        assert directive in csp
    assert answer.headers["x-content-type-options"] == "nosniff"
    assert answer.headers["cache-control"] == "no-store"
    if path == "/nope":
        assert answer.status_code == 404 and "text/html" in answer.headers["content-type"]


@pytest.mark.anyio
async def test_pages_are_labelled_for_assistive_technology(target: ProviderApp) -> None:
    async with client_for(target, target.api_key) as client:
        for path in ("/login", "/keys", "/"):
            page = (await client.get(f"/dashboard{path}")).text
            if path == "/login":  # logged in: it sends us on
                continue
            assert '<html lang="en">' in page and "<h1>" in page
            assert 'href="#main"' in page and 'id="main"' in page
            for field in re.findall(r'<input id="([^"]+)"', page):
                assert f'<label for="{field}">' in page
    transport = httpx.ASGITransport(app=target.app)
    async with httpx.AsyncClient(transport=transport, base_url="http://facilitator") as fresh:
        page = (await fresh.get("/dashboard/login")).text
        assert '<label for="api_key">' in page and '<html lang="en">' in page


@pytest.mark.anyio
async def test_logout_ends_the_session(target: ProviderApp) -> None:
    async with client_for(target, target.api_key) as client:
        page = await client.get("/dashboard/")
        out = await client.post("/dashboard/logout", data={"csrf": csrf_of(page)})
        assert out.status_code == 303 and out.headers["location"] == "/dashboard/login"
        assert "svcpay_dashboard" not in client.cookies
        assert (await client.get("/dashboard/")).status_code == 303
