"""The facilitator's HTTP API under hostile input: schemathesis fuzzes every operation of the
real app (in process, settling against the local validator) from its own OpenAPI document,
with and without a provider's API key, and checks every answer: never a 5xx, a documented
status, a body and content type that conform to the schema, schema-invalid input refused.
Explicit cases pin the error answers for the classic attacks."""

from __future__ import annotations

import base64
import copy
import os
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import jsonschema_rs
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis import Case, CheckFunction
from schemathesis.python.asgi import shutdown_lifespans
from schemathesis.specs.openapi.checks import positive_data_acceptance
from schemathesis.specs.openapi.definitions import OPENAPI_31_VALIDATOR
from solders.hash import Hash
from solders.instruction import CompiledInstruction
from solders.keypair import Keypair
from solders.message import MessageHeader, MessageV0
from solders.transaction import VersionedTransaction
from starlette.applications import Starlette
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from svcpay.facilitator import openapi
from svcpay.facilitator.api import http as api_http
from svcpay.facilitator.store import Event, new_id
from svcpay.localnet.process import Localnet
from svcpay.protocol.headers import NETWORK_MAINNET, SCHEME_EXACT
from svcpay.protocol.proof import PaymentProof
from tests.support.billing import Billing
from tests.support.chain import Chain
from tests.support.facilitator_app import ProviderApp, provider_app, provider_app_sync

EXAMPLES = 50  # generated per operation (plus schemathesis' coverage cases); about 10 s in all
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,  # the same cases on every run
    suppress_health_check=list(HealthCheck),
    database=None,
)
# Their handlers check more than a schema can say (a base58 string that is no 32-byte key, a
# transaction that pays something else, `from` after `to`, a webhook host that is a private
# address), so schema-valid input may still get a 400 there; everywhere else it must be
# accepted.
SEMANTIC = {
    "POST /v1/webhooks",
    "POST /authorize",
    "POST /verify",
    "POST /settle",
    "POST /mpp/charge/settle",
    "POST /mpp/charge/verify",
    "POST /v1/usage",
    "POST /v1/sessions/vouchers",
    "GET /v1/analytics",
    "GET /v1/analytics/chart.png",
}

ADDRESS = "So11111111111111111111111111111111111111112"
PROOF = {
    "version": "1",
    "network": NETWORK_MAINNET,
    "transaction": "5" * 88,
    "payer": ADDRESS,
    "payTo": ADDRESS,
    "token": ADDRESS,
    "amount": "1000",
    "memo": "order-1",
    "issuedAt": 1_700_000_000,
    "expiresAt": 4_000_000_000,
    "facilitator": ADDRESS,
    "signature": "",
}


class AppUnderTest:
    """The ASGI app schemathesis sends to: it forwards to the app a fixture made (the schema,
    and so the app it calls, exists before any fixture runs)."""

    app: Starlette | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        assert self.app is not None, "the fuzzed fixture sets the app"
        await self.app(scope, receive, send)


TARGET = AppUnderTest()
# The document the app serves (test_the_app_serves_its_document holds the two together); a
# copy, as the app's is shared.
schema = schemathesis.openapi.from_dict(copy.deepcopy(openapi.schema()))
schema.app = TARGET
# The app ignores query parameters it does not know (as HTTP APIs do; OpenAPI cannot say so),
# and the tests send the Authorization header themselves (valid, or none).
schema.config.generation.update(allow_extra_parameters=False, with_security_parameters=False)
# A body over the API's size limit is refused (413) before it is read, whatever else is wrong
# with it: generated lists of large unknown-field objects reach it.
schema.config.checks.negative_data_rejection.expected_statuses.append("413")


# Every check schemathesis has runs on every response (its default); these are the ones this
# suite is for. positive_data_acceptance is skipped only where noted above (SEMANTIC).
ESSENTIAL_CHECKS = (
    "not_a_server_error",  # no 5xx, whatever the input
    "status_code_conformance",  # a status the document lists for the operation
    "content_type_conformance",  # the media type it lists for that status
    "response_schema_conformance",  # a body its schema accepts
    "negative_data_rejection",  # input the schema refuses is refused (4xx)
    "positive_data_acceptance",
    "ignored_auth",  # the /v1 routes refuse a missing or wrong key
)


def test_the_fuzzer_runs_the_essential_checks() -> None:
    config = schema.config.checks_config_for()
    assert all(config.get_by_name(name=name).enabled for name in ESSENTIAL_CHECKS)


@pytest.fixture
def fuzzed(validator: Localnet, chain: Chain, tmp_path: Path) -> Iterator[ProviderApp]:
    """A fresh app for each fuzzed operation: schemathesis ends an app's lifespan (which
    closes its RPC client and database) with the test item that started it. Its fee payer
    is funded, as a working facilitator's is (/health answers 503 otherwise)."""
    target = provider_app_sync(validator.url, tmp_path, keypair=chain.funded_keypair())
    TARGET.app = target.app
    yield target
    shutdown_lifespans()  # already done by schemathesis' plugin; harmless, and explicit
    TARGET.app = None


def _validate(case: Case[Any], headers: dict[str, str] | None) -> None:
    excluded: list[CheckFunction] = (
        [positive_data_acceptance] if case.operation.label in SEMANTIC else []
    )
    case.call_and_validate(headers=headers, excluded_checks=excluded)


@schema.parametrize()
@FUZZ
def test_every_operation_with_a_valid_api_key(case: Case[Any], fuzzed: ProviderApp) -> None:
    _validate(case, fuzzed.auth)


@schema.include(path_regex="^/v1/").parametrize()
@settings(FUZZ, max_examples=15)
def test_provider_operations_without_an_api_key(case: Case[Any], fuzzed: ProviderApp) -> None:
    _validate(case, None)


def test_each_fuzzed_operation_is_a_test_of_its_own(request: pytest.FixtureRequest) -> None:
    """Each operation's test has a node id of its own, so pytest-xdist runs every one
    (tests/support/collection.py: under pytest 9.2 they shared one, and 26 ran nowhere)."""
    fuzzed = [
        item
        for item in request.session.items
        if item.path == request.path
        and item.name.startswith(("test_every_operation_", "test_provider_operations_"))
    ]
    assert all(item.nodeid == f"{request.node.parent.nodeid}::{item.name}" for item in fuzzed)
    assert len({item.nodeid for item in fuzzed}) == len(fuzzed)


# -- explicit hostile input -----------------------------------------------------------------


@pytest.fixture
async def target(validator: Localnet, tmp_path: Path) -> AsyncIterator[ProviderApp]:
    app = await provider_app(validator.url, tmp_path)
    yield app
    await app.service.aclose()


@pytest.fixture
async def http(target: ProviderApp) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=target.app)
    async with httpx.AsyncClient(transport=transport, base_url="http://facilitator") as client:
        yield client


def one_time_option(**overrides: object) -> dict[str, object]:
    option: dict[str, object] = {
        "scheme": SCHEME_EXACT,
        "network": NETWORK_MAINNET,
        "token": ADDRESS,
        "amount": "1000",
        "payTo": str(Keypair().pubkey()),
        "memo": "order-1",
    }
    option.update(overrides)
    return option


def assert_error(response: httpx.Response, status: int, name: str, says: str = "") -> None:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert set(body) == {"error", "message"} and body["error"] == name, body
    assert says in body["message"], body


def test_the_document_is_openapi_3_1_and_covers_every_route() -> None:
    doc = openapi.schema()
    assert doc["openapi"] == "3.1.0" and openapi.schema() is doc  # built once
    assert set(doc["paths"]) == {
        "/authorize",
        "/verify",
        "/settle",
        "/mpp/charge/settle",
        "/mpp/charge/verify",
        "/supported",
        "/health",
        "/openapi.json",
        "/v1/usage",
        "/v1/sessions",
        "/v1/sessions/vouchers",
        "/v1/events",
        "/v1/webhooks",
        "/v1/webhooks/{endpoint_id}",
        "/v1/webhooks/{endpoint_id}/deliveries",
        "/v1/analytics",
        "/v1/analytics/chart.png",
    }
    assert openapi.MAX_BODY == api_http.MAX_BODY
    OPENAPI_31_VALIDATOR.validate(doc)
    for schema_ in doc["components"]["schemas"].values():
        jsonschema_rs.meta.validate(
            {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema_}
        )
    for path, item in doc["paths"].items():
        for op in item.values():
            assert ("security" in op) == path.startswith("/v1/"), path


@pytest.mark.anyio
async def test_the_app_serves_its_document(http: httpx.AsyncClient) -> None:
    response = await http.get("/openapi.json")
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.json() == openapi.schema.__wrapped__()  # built anew: none changed it


def conforms(value: object, schema_: dict[str, Any]) -> None:
    """`value` is valid under `schema_`, whose refs point into the OpenAPI document."""
    root = {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema_}
    root["components"] = openapi.schema()["components"]
    jsonschema_rs.Draft202012Validator(root, validate_formats=True).validate(value)


def response_schema(path: str, method: str, status: int) -> dict[str, Any]:
    response = openapi.schema()["paths"][path][method]["responses"][str(status)]
    content: dict[str, Any] = response["content"]["application/json"]["schema"]
    return content


@pytest.mark.anyio
async def test_answers_with_data_match_the_document(
    http: httpx.AsyncClient, target: ProviderApp
) -> None:
    """What the fuzzer cannot reach with an empty database: endpoints, events, deliveries,
    analytics with volume, and a signed proof."""
    auth, store = target.auth, target.service.store
    created = await http.post(
        "/v1/webhooks",
        json={"url": "https://hooks.example.com/svcpay", "eventTypes": ["payment.settled"]},
        headers=auth,
    )
    assert created.status_code == 201
    conforms(created.json(), response_schema("/v1/webhooks", "post", 201))
    endpoint_id = created.json()["id"]
    await store.providers.add_resource(target.provider_id, "payTo", ADDRESS)
    event = Event(
        id=new_id("evt"),
        type="payment.settled",
        created_at=int(time.time()),
        data={"payTo": ADDRESS, "amount": "1000"},
        mode="one-time",
        amount=1000,
    )
    assert await store.events.add(event)
    delivery = (await store.webhooks.claim(limit=1, lease_secs=60))[0]
    await store.webhooks.delivery_failed(delivery.id, status=500, error="HTTP 500", retry_at=None)

    for path, url in [
        ("/v1/webhooks", "/v1/webhooks"),
        ("/v1/events", "/v1/events?limit=5"),
        ("/v1/webhooks/{endpoint_id}/deliveries", f"/v1/webhooks/{endpoint_id}/deliveries"),
        ("/v1/analytics", "/v1/analytics"),
    ]:
        response = await http.get(url, headers=auth)
        assert response.status_code == 200, response.text
        conforms(response.json(), response_schema(path, "get", 200))
    assert (await http.get("/v1/events", headers=auth)).json()["events"][0]["id"] == event.id
    report = (await http.get("/v1/analytics", headers=auth)).json()
    assert report["totals"]["volume"] == "1000"
    chart = await http.get("/v1/analytics/chart.png", headers=auth)
    assert chart.headers["content-type"] == "image/png" and chart.content[:4] == b"\x89PNG"

    assert (await http.delete(f"/v1/webhooks/{endpoint_id}", headers=auth)).status_code == 204
    again = await http.delete(f"/v1/webhooks/{endpoint_id}", headers=auth)
    assert_error(again, 404, "NotFound")

    signer = Keypair()
    proof = PaymentProof.model_validate({**PROOF, "facilitator": str(signer.pubkey())})
    conforms(proof.signed_by(signer).to_json_dict(), response_schema("/authorize", "post", 200))


@pytest.mark.anyio
async def test_routes_match_the_document(target: ProviderApp) -> None:
    served = {
        route.path: (route.methods or set()) - {"HEAD"}
        for route in target.app.routes
        if isinstance(route, Route)
    }
    documented = {
        path: {method.upper() for method in item}
        for path, item in openapi.schema()["paths"].items()
    }
    assert served == documented


@pytest.mark.anyio
@pytest.mark.parametrize("path", ["/authorize", "/verify", "/settle", "/v1/usage", "/v1/webhooks"])
async def test_a_huge_body_is_refused_unread(
    http: httpx.AsyncClient, target: ProviderApp, path: str
) -> None:
    huge = b'{"pad": "' + b"x" * (api_http.MAX_BODY + 1) + b'"}'
    declared = await http.post(path, content=huge, headers=target.auth)
    assert_error(declared, 413, "RequestTooLarge")

    async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: counted while read
        for i in range(0, len(huge), 4096):
            yield huge[i : i + 4096]

    streamed = await http.post(path, content=chunks(), headers=target.auth)
    assert_error(streamed, 413, "RequestTooLarge")


@pytest.mark.anyio
@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"not json",
        b"\xff\xfe\x00garbage",
        b"[1, 2]",
        b'"a string"',
        b"null",
        b"[" * 60_000,  # nesting deeper than the parser's recursion limit
        b'{"a": ' * 10_000,
        b"1" * 10_000,  # beyond int()'s digit limit
    ],
)
async def test_a_body_that_is_no_json_object_is_a_400(
    http: httpx.AsyncClient, target: ProviderApp, raw: bytes
) -> None:
    for path in ("/authorize", "/verify", "/v1/usage", "/v1/webhooks"):
        response = await http.post(path, content=raw, headers=target.auth)
        assert_error(response, 400, "InvalidRequest", "JSON object")


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"signedPayment": 5, "paymentRequirements": one_time_option()}, "signedPayment"),
        ({"signedPayment": "AAAA"}, "paymentRequirements"),
        ({"signedPayment": "AAAA", "paymentRequirements": []}, "paymentRequirements"),
        ({"signedPayment": "%%%", "paymentRequirements": one_time_option()}, "base64"),
        ({"signedPayment": "AAAA==", "paymentRequirements": one_time_option()}, "base64"),
        ({"signed_payment": "AAAA", "paymentRequirements": one_time_option()}, "signedPayment"),
        ({"signedPayment": "Ä", "paymentRequirements": one_time_option()}, "base64"),
        (
            {"signedPayment": "AAAA", "paymentRequirements": one_time_option(amount=5)},
            "amount",
        ),
        (
            {"signedPayment": "AAAA", "paymentRequirements": one_time_option(amount="²")},
            "amount",
        ),
        (
            {"signedPayment": "AAAA", "paymentRequirements": one_time_option(payTo="0OIl" * 10)},
            "payTo",
        ),
        ({"signedPayment": "AAAA", "paymentRequirements": one_time_option(memo="")}, "memo"),
        (
            {"signedPayment": "AAAA", "paymentRequirements": one_time_option(amount=str(2**63))},
            "amount above",
        ),
        (
            {
                "signedPayment": "AAAA",
                "paymentRequirements": one_time_option(svc={"interval": "5"}),
            },
            "svc.interval",
        ),
        (
            {"signedPayment": "AAAA", "paymentRequirements": one_time_option(network="x")},
            "one-time",
        ),
    ],
)
async def test_authorize_refuses_malformed_requests_with_the_reason(
    http: httpx.AsyncClient, body: dict[str, object], says: str
) -> None:
    assert_error(await http.post("/authorize", json=body), 400, "InvalidRequest", says)


@pytest.mark.anyio
async def test_authorize_with_a_random_blob_says_it_is_no_transaction(
    http: httpx.AsyncClient,
) -> None:
    blob = base64.b64encode(os.urandom(300)).decode()
    response = await http.post(
        "/authorize", json={"signedPayment": blob, "paymentRequirements": one_time_option()}
    )
    assert_error(response, 400, "InvalidTransaction", "not a transaction")


@pytest.mark.anyio
async def test_authorize_refuses_a_transaction_whose_indices_point_nowhere(
    http: httpx.AsyncClient, target: ProviderApp
) -> None:
    """A well-formed transaction paid by the facilitator whose instruction names accounts
    the message does not have (or that lacks its signatures) is refused, not a crash."""
    me = target.service.keypair.pubkey()
    for program, accounts, signatures in [(9, b"", 2), (1, bytes([0, 7]), 2), (1, b"", 0)]:
        message = MessageV0(
            MessageHeader(2, 0, 1),
            [me, Keypair().pubkey(), Keypair().pubkey()],
            Hash.default(),
            [CompiledInstruction(program, b"\x0c" + bytes(9), accounts)],
            [],
        )
        tx = VersionedTransaction.populate(message, [Keypair().sign_message(b"x")] * signatures)
        response = await http.post(
            "/authorize",
            json={
                "signedPayment": base64.b64encode(bytes(tx)).decode(),
                "paymentRequirements": one_time_option(),
            },
        )
        assert_error(response, 400, "InvalidTransaction")


@pytest.mark.anyio
@pytest.mark.parametrize(
    "proof",
    [
        None,
        "x",
        [],
        {},
        {"transaction": "x"},
        {"issuedAt": -1},
        {"amount": "1e9"},
        {"issuedAt": "5"},  # no coercion: what the schema says is what is accepted
        {"expiresAt": False},
        {"memo": 5},
    ],
)
async def test_verify_refuses_what_is_no_proof(http: httpx.AsyncClient, proof: object) -> None:
    if isinstance(proof, dict) and len(proof) == 1 and "transaction" not in proof:
        proof = {**PROOF, **proof}  # one defect in an otherwise well-formed proof
    assert_error(await http.post("/verify", json={"proof": proof}), 400, "InvalidRequest")


@pytest.mark.anyio
async def test_verify_answers_a_well_formed_foreign_proof_with_the_reason(
    http: httpx.AsyncClient,
) -> None:
    response = await http.post("/verify", json={"proof": PROOF})
    assert response.status_code == 200
    assert response.json() == {
        "valid": False,
        "reason": "the proof was not signed by this facilitator",
    }


@pytest.mark.anyio
@pytest.mark.parametrize(
    "authorization",
    [
        None,
        "",
        "Bearer",
        "Bearer ",
        "Basic dXNlcjpwYXNz",
        "Bearer svc_0123456789abcdef_notthekey",
        "Bearer svc_",
        "Bearer " + "svc_" + "a" * 500,
        "Bearer not-a-key",
    ],
)
async def test_a_missing_or_bogus_api_key_is_a_401(
    http: httpx.AsyncClient, authorization: str | None
) -> None:
    headers = {} if authorization is None else {"Authorization": authorization}
    for method, path in [
        ("POST", "/v1/usage"),
        ("GET", "/v1/events"),
        ("GET", "/v1/webhooks"),
        ("POST", "/v1/webhooks"),
        ("DELETE", "/v1/webhooks/we_1"),
        ("GET", "/v1/webhooks/we_1/deliveries"),
        ("GET", "/v1/analytics"),
        ("GET", "/v1/analytics/chart.png"),
    ]:
        response = await http.request(method, path, headers=headers, json={})
        assert_error(response, 401, "Unauthorized")


@pytest.mark.anyio
async def test_a_revoked_api_key_is_a_401(http: httpx.AsyncClient, target: ProviderApp) -> None:
    key_id = target.api_key.removeprefix("svc_").split("_", 1)[0]
    assert (await http.get("/v1/webhooks", headers=target.auth)).status_code == 200
    assert await target.service.store.api_keys.revoke(key_id)
    assert_error(await http.get("/v1/webhooks", headers=target.auth), 401, "Unauthorized")


@pytest.mark.anyio
async def test_an_unknown_webhook_endpoint_is_a_404(
    http: httpx.AsyncClient, target: ProviderApp
) -> None:
    for endpoint_id in ["we_unknown", "x" * 300, "\x00", "%", "a/b", "' OR 1=1 --", "é"]:
        quoted = "/v1/webhooks/" + quote(endpoint_id, safe="")
        assert_error(await http.delete(quoted, headers=target.auth), 404, "NotFound")
        deliveries = await http.get(f"{quoted}/deliveries", headers=target.auth)
        assert_error(deliveries, 404, "NotFound")


@pytest.mark.anyio
async def test_another_providers_webhook_endpoint_is_a_404(
    http: httpx.AsyncClient, target: ProviderApp
) -> None:
    other = await target.service.store.providers.create("other")
    endpoint, _ = await target.service.store.webhooks.create_endpoint(
        other, "https://example.com", ["*"]
    )
    url = f"/v1/webhooks/{endpoint.id}"
    assert_error(await http.get(f"{url}/deliveries", headers=target.auth), 404, "NotFound")
    assert_error(await http.delete(url, headers=target.auth), 404, "NotFound")


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"subscription": 5, "amount": "1", "idempotencyKey": "k"}, "subscription"),
        ({"subscription": "x" * 32, "amount": "1", "idempotencyKey": "k"}, "not an address"),
        ({"subscription": ADDRESS, "amount": True, "idempotencyKey": "k"}, "amount"),
        ({"subscription": ADDRESS, "amount": "²", "idempotencyKey": "k"}, "amount"),
        ({"subscription": ADDRESS, "amount": "٣", "idempotencyKey": "k"}, "amount"),
        ({"subscription": ADDRESS, "amount": 1.5, "idempotencyKey": "k"}, "amount"),
        ({"subscription": ADDRESS, "amount": "-1", "idempotencyKey": "k"}, "amount"),
        ({"subscription": ADDRESS, "amount": 0, "idempotencyKey": "k"}, "from 1 to"),
        ({"subscription": ADDRESS, "amount": 2**63, "idempotencyKey": "k"}, "from 1 to"),
        ({"subscription": ADDRESS, "amount": str(2**64 - 1), "idempotencyKey": "k"}, "from 1"),
        ({"subscription": ADDRESS, "amount": "1"}, "idempotencyKey"),
        ({"subscription": ADDRESS, "amount": "1", "idempotency_key": "k"}, "idempotencyKey"),
        ({"subscription": ADDRESS, "amount": "1", "idempotencyKey": ""}, "idempotencyKey"),
        ({"subscription": ADDRESS, "amount": "1", "idempotencyKey": "k" * 201}, "idempotency"),
    ],
)
async def test_usage_refuses_wrong_types_with_the_reason(
    http: httpx.AsyncClient, target: ProviderApp, body: dict[str, object], says: str
) -> None:
    response = await http.post("/v1/usage", json=body, headers=target.auth)
    assert_error(response, 400, "InvalidRequest", says)


@pytest.mark.anyio
async def test_usage_for_an_account_that_is_no_subscription_is_a_404(
    http: httpx.AsyncClient, target: ProviderApp, billing: Billing
) -> None:
    plan = billing.plan()  # a program account, but a plan
    for n, address in enumerate([str(plan.address), ADDRESS, "11111111111111111111111111111111"]):
        body = {"subscription": address, "amount": "1", "idempotencyKey": f"k{n}"}
        response = await http.post("/v1/usage", json=body, headers=target.auth)
        assert_error(response, 404, "NotFound")


@pytest.mark.anyio
@pytest.mark.parametrize(
    "body",
    [
        {},
        {"url": 5},
        {"url": "ftp://example.com"},
        {"url": "example.com/hook"},
        {"url": "http://"},
        {"url": "http://[::1"},
        {"url": "https://example.com/" + "a" * 2000},
        {"url": "https://example.com", "eventTypes": []},
        {"url": "https://example.com", "eventTypes": "*"},
        {"url": "https://example.com", "eventTypes": ["payment.refunded"]},
        {"url": "https://example.com", "eventTypes": None},
    ],
)
async def test_webhook_endpoints_refuse_bad_urls_and_event_types(
    http: httpx.AsyncClient, target: ProviderApp, body: dict[str, object]
) -> None:
    response = await http.post("/v1/webhooks", json=body, headers=target.auth)
    assert_error(response, 400, "InvalidRequest")


@pytest.mark.anyio
@pytest.mark.parametrize(
    "query",
    ["after=-1", "after=x", f"after={2**62 + 1}", "limit=0", "limit=1001", "limit=²", "after=٣"],
)
async def test_event_paging_refuses_out_of_range_parameters(
    http: httpx.AsyncClient, target: ProviderApp, query: str
) -> None:
    response = await http.get(f"/v1/events?{query}", headers=target.auth)
    assert_error(response, 400, "InvalidRequest", query.split("=")[0])


@pytest.mark.anyio
@pytest.mark.parametrize(
    "query",
    [
        "from=yesterday",
        "from=2024-02-30",
        "from=2024-01-01&to=2023-01-01",
        "to=99999999999999",
        "from=%D9%A3",  # an Arabic-Indic 3: digits are ASCII
        "from=1&to=99999999",  # more than 366 days
    ],
)
async def test_analytics_refuses_bad_ranges(
    http: httpx.AsyncClient, target: ProviderApp, query: str
) -> None:
    for path in ("/v1/analytics", "/v1/analytics/chart.png"):
        response = await http.get(f"{path}?{query}", headers=target.auth)
        assert_error(response, 400, "InvalidRequest")


@pytest.mark.anyio
async def test_unknown_routes_and_methods_answer_in_the_error_shape(
    http: httpx.AsyncClient,
) -> None:
    assert_error(await http.get("/nope"), 404, "NotFound")
    assert_error(await http.get("/v1/webhooks/a/b/c"), 404, "NotFound")
    wrong = await http.get("/authorize")
    assert_error(wrong, 405, "MethodNotAllowed")
    assert wrong.headers["allow"] == "POST"


@pytest.mark.anyio
async def test_a_non_ascii_content_length_is_no_crash(
    http: httpx.AsyncClient, target: ProviderApp
) -> None:
    auth = target.auth["Authorization"].encode()
    # latin-1 "²", which str.isdigit() calls a digit (and int() refuses)
    headers = [(b"Authorization", auth), (b"Content-Length", b"\xb2")]
    response = await http.post("/v1/webhooks", content=b"{}", headers=headers)
    assert_error(response, 400, "InvalidRequest")
