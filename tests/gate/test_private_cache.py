"""Every answer the gate admitted is private to its payer (issue 38): MPP's core draft says a
response carrying `Payment-Receipt` MUST carry `Cache-Control: private`; x402's and svcpay's
paid answers are no less the payer's. The handler's own directives stay, but `public` and
`s-maxage`, which would let a shared cache serve it to others."""

from __future__ import annotations

import pytest

from svcpay.gate.core import private_cache


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ([], b"private"),
        ([(b"Cache-Control", b"public, max-age=60")], b"private, max-age=60"),
        ([(b"cache-control", b"s-maxage=600, max-age=5")], b"private, max-age=5"),
        ([(b"cache-control", b"no-store")], b"no-store"),
        ([(b"cache-control", b"private, max-age=1")], b"private, max-age=1"),
        ([(b"cache-control", b"public"), (b"cache-control", b"no-cache")], b"private, no-cache"),
    ],
)
def test_a_paid_answer_is_never_shared_cacheable(
    given: list[tuple[bytes, bytes]], expected: bytes
) -> None:
    headers = private_cache([(b"content-type", b"application/json"), *given])
    assert headers[0] == (b"content-type", b"application/json")
    assert [v for k, v in headers if k.lower() == b"cache-control"] == [expected]
