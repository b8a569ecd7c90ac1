"""MPP's wire format against the draft's own examples (tempoxyz/mpp-specs,
specs/core/draft-httpauth-payment-00.md): the `request` auth-param is JCS then base64url
without padding, the example credential and receipt parse, the challenge id is HMAC-SHA256
over the seven slots joined by "|", and problems carry the draft's types."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest
import rfc8785
from hypothesis import given
from hypothesis import strategies as st

from svcpay.protocol import mpp

# The draft's example request: {"amount":"1000","currency":"USD","recipient":"acct_123"}
SPEC_REQUEST = "eyJhbW91bnQiOiIxMDAwIiwiY3VycmVuY3kiOiJVU0QiLCJyZWNpcGllbnQiOiJhY2N0XzEyMyJ9"
SPEC_CHALLENGE = (
    'Payment id="x7Tg2pLqR9mKvNwY3hBcZa",\r\n    realm="api.example.com",\r\n'
    '    method="example",\r\n    intent="charge",\r\n    expires="2025-01-15T12:05:00Z",\r\n'
    f'    request="{SPEC_REQUEST}"'
)
SPEC_CREDENTIAL = (
    "Payment eyJjaGFsbGVuZ2UiOnsiaWQiOiJ4N1RnMnBMcVI5bUt2TndZM2hCY1phIiwicmVhbG0iOiJhcGkuZXh"
    "hbXBsZS5jb20iLCJtZXRob2QiOiJleGFtcGxlIiwiaW50ZW50IjoiY2hhcmdlIiwicmVxdWVzdCI6ImV5SmhiVz"
    "kxYm5RaU9pSXhNREF3SWl3aVkzVnljbVZ1WTNraU9pSlZVMFFpTENKeVpXTnBjR2xsYm5RaU9pSmhZMk4wWHpF"
    "eU15SjkiLCJleHBpcmVzIjoiMjAyNS0wMS0xNVQxMjowNTowMFoifSwicGF5bG9hZCI6eyJwcm9vZiI6IjB4YW"
    "JjMTIzLi4uIn19"
)
SPEC_RECEIPT = (
    "eyJzdGF0dXMiOiJzdWNjZXNzIiwibWV0aG9kIjoiaW52b2ljZSIsInRpbWVzdGFtcCI6IjIwMjUtMDEtMTVUMT"
    "I6MDA6MDBaIiwicmVmZXJlbmNlIjoiaW52XzEyMzQ1In0"
)


def test_the_request_is_jcs_then_base64url_without_padding() -> None:
    # keys in any order and with spaces canonicalise to the draft's bytes
    assert mpp.encode_json({"recipient": "acct_123", "currency": "USD", "amount": "1000"}) == (
        SPEC_REQUEST
    )
    assert "=" not in SPEC_REQUEST and mpp.decode_json(SPEC_REQUEST)["amount"] == "1000"
    # JCS: numbers in their shortest form, non-ASCII kept as UTF-8, no escapes of "/"
    assert mpp.unb64url(mpp.encode_json({"b": 1.0, "a": "é/"})) == '{"a":"é/","b":1}'.encode()


def test_the_drafts_challenge_credential_and_receipt_parse() -> None:
    [challenge] = mpp.parse_challenges([SPEC_CHALLENGE])
    assert (challenge.id, challenge.realm, challenge.method, challenge.intent) == (
        "x7Tg2pLqR9mKvNwY3hBcZa",
        "api.example.com",
        "example",
        "charge",
    )
    assert challenge.request == SPEC_REQUEST and challenge.expires == "2025-01-15T12:05:00Z"
    credential = mpp.parse_credential(SPEC_CREDENTIAL)
    assert credential.challenge.echo() == challenge.echo()
    assert credential.payload == {"proof": "0xabc123..."}
    receipt = mpp.Receipt.parse(SPEC_RECEIPT)
    assert (receipt.status, receipt.method, receipt.reference) == (
        "success",
        "invoice",
        "inv_12345",
    )
    assert mpp.rfc3339(receipt.timestamp) == "2025-01-15T12:00:00Z"


def test_the_challenge_id_is_an_hmac_over_seven_slots() -> None:
    secret = b"k" * 32
    issued = mpp.ChallengeIssuer(secret, "api.example.com").issue_encoded(
        "example", "charge", SPEC_REQUEST, expires=1736942700
    )
    slots = f"api.example.com|example|charge|{SPEC_REQUEST}|2025-01-15T12:05:00Z||"
    expected = base64.urlsafe_b64encode(
        hmac.new(secret, slots.encode(), hashlib.sha256).digest()
    ).rstrip(b"=")
    assert issued.id == expected.decode() and issued.expires == "2025-01-15T12:05:00Z"
    issuer = mpp.ChallengeIssuer(secret, "api.example.com")
    assert issuer.recognises(issued)
    # any slot changed, or another secret, and it is not recognised
    for changed in ({"realm": "x"}, {"intent": "session"}, {"expires": ""}, {"digest": "d"}):
        altered = mpp.Challenge(**{**issued.__dict__, **changed})
        assert not issuer.recognises(altered), changed
    assert not mpp.ChallengeIssuer(b"o" * 32, "api.example.com").recognises(issued)


@pytest.mark.parametrize("kind", mpp.PROBLEMS)
def test_problems_carry_the_drafts_types(kind: str) -> None:
    body = mpp.problem(kind, "why")
    assert body["type"] == f"https://paymentauth.org/problems/{kind}"
    assert body["status"] == (400 if kind == "method-unsupported" else 402)
    assert body["detail"] == "why" and body["title"]


plain = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53) + 1, 2**53 - 1)
    | st.text(st.characters(max_codepoint=127)),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.text(st.characters(max_codepoint=127), max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)


@given(plain)
def test_the_fast_canonical_form_is_jcs(value: object) -> None:
    """encode_json skips rfc8785 (pure Python) for ASCII text, integers, booleans, lists and
    objects, where sorted compact JSON is JCS: the bytes must be the same."""
    assert mpp.encode_json(value) == mpp.b64url(rfc8785.dumps(value))


@given(st.floats(allow_nan=False, allow_infinity=False) | st.text(min_size=1))
def test_anything_else_goes_through_rfc8785(value: object) -> None:
    assert mpp.encode_json({"v": value}) == mpp.b64url(rfc8785.dumps({"v": value}))
