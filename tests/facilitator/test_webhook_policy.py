"""Webhook endpoints may not reach the facilitator's own network: https to public addresses
only, unless the operator allows local ones (development, tests)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from svcpay.facilitator.store import Event, Store, new_id
from svcpay.facilitator.webhooks import Deliverer, check_endpoint_url, refused_destination
from svcpay.webhooks import WebhookSignatureError, sign_webhook, verify_webhook

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://hooks.example.com/x", "https"),
        ("https://user:pw@hooks.example.com/x", "credentials"),
        ("https://127.0.0.1/x", "private"),
        ("https://169.254.169.254/latest", "private"),
        ("https://10.1.2.3/x", "private"),
        ("https://100.64.0.1/x", "private"),
        ("https://0.0.0.0/x", "private"),
        ("ftp://hooks.example.com/x", "absolute http(s)"),
    ],
)
def test_registration_refuses_local_or_insecure_urls(url: str, why: str) -> None:
    assert why in (check_endpoint_url(url, allow_local=False) or "")


def test_public_https_urls_and_local_ones_when_allowed_pass() -> None:
    assert check_endpoint_url("https://hooks.example.com/svcpay?x=1", allow_local=False) is None
    assert check_endpoint_url("http://127.0.0.1:8080/hooks", allow_local=True) is None
    assert "credentials" in (check_endpoint_url("http://u:p@127.0.0.1/", allow_local=True) or "")


async def test_a_name_resolving_to_loopback_is_refused_at_delivery(tmp_path: Path) -> None:
    assert "private" in (await refused_destination("https://localhost:8443/hooks") or "")
    store = Store.open(f"sqlite:///{tmp_path / 'f.db'}")
    try:
        provider = await store.providers.create("acme")
        await store.providers.add_resource(provider, "payTo", "PAYTO")
        endpoint, _ = await store.webhooks.create_endpoint(
            provider, "https://localhost:8443/hooks", ["*"]
        )
        await store.events.add(
            Event(new_id("evt"), "payment.settled", int(time.time()), {"payTo": "PAYTO"})
        )
        deliverer = Deliverer(store)
        assert await deliverer.run_once() == 1
        [row] = await store.webhooks.deliveries(endpoint.id)
        assert row["status"] == "dead" and row["last_error"].startswith("refused:")
        await deliverer.aclose()
    finally:
        await store.close()


def test_a_hostile_signature_header_is_a_verification_error_not_a_crash() -> None:
    body = b'{"id":"evt_1"}'
    for header in ("t=\u00b2\u00b3,v1=00", "t=,v1=", "v1=00", "t=1", "garbage"):
        with pytest.raises(WebhookSignatureError):
            verify_webhook("s", body, header)
    assert verify_webhook("s", body, sign_webhook("s", body))["id"] == "evt_1"


async def test_a_delivery_connects_to_the_address_it_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No second DNS lookup between the check and the connection (DNS rebinding): the request
    goes to the checked address, with the name in Host and for TLS (SNI, certificate)."""
    import asyncio

    import httpx

    async def public_dns(self: object, host: str, port: int, **kwargs: object) -> list[object]:
        return [(2, 1, 6, "", ("93.184.216.34", port))]

    monkeypatch.setattr(asyncio.BaseEventLoop, "getaddrinfo", public_dns)
    seen: list[httpx.Request] = []

    def receiver(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(204)

    store = Store.open(f"sqlite:///{tmp_path / 'f.db'}")
    try:
        provider = await store.providers.create("acme")
        await store.providers.add_resource(provider, "payTo", "PAYTO")
        await store.webhooks.create_endpoint(
            provider, "https://hooks.example.com:8443/in?x=1", ["*"]
        )
        await store.events.add(
            Event(new_id("evt"), "payment.settled", int(time.time()), {"payTo": "PAYTO"})
        )
        http = httpx.AsyncClient(transport=httpx.MockTransport(receiver))
        deliverer = Deliverer(store, http)
        assert await deliverer.run_once() == 1 and deliverer.delivered == 1
        [request] = seen
        assert str(request.url) == "https://93.184.216.34:8443/in?x=1"
        assert request.headers["host"] == "hooks.example.com:8443"
        assert request.extensions["sni_hostname"] == "hooks.example.com"
        await deliverer.aclose()
    finally:
        await store.close()
