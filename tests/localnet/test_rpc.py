"""Solana JSON-RPC as agave serves it: HTTP and JSON-RPC errors, shapes, preflight, time travel.

These run against whatever local validator the session started and hold on both, agave's
answers being the reference; time travel is the drop-in's alone (marked drop_in_only).
"""

from __future__ import annotations

import asyncio
import base64
import time
from typing import Any

import httpx
import pytest
from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Confirmed
from solders.hash import Hash
from solders.instruction import Instruction
from solders.keypair import Keypair
from solders.message import Message, MessageV0
from solders.pubkey import Pubkey
from solders.signature import Signature
from solders.system_program import TransferParams, transfer
from solders.transaction import VersionedTransaction

from svcpay.localnet.process import Localnet
from svcpay.program.generated.program_id import PROGRAM_ID
from tests.support.billing import DAY, USDC, Billing
from tests.support.chain import Chain, RpcError

CONFIRMED = {"commitment": "confirmed"}
# How agave words the preflight failure of a fee payer the preflight bank does not know
NO_PRIOR_CREDIT = (
    "Transaction simulation failed: "
    "Attempt to debit an account but found no record of a prior credit."
)


def raw(validator: Localnet, body: object) -> Any:
    return httpx.post(validator.url, json=body, timeout=10).json()


def post(validator: Localnet, content: bytes, **headers: str) -> httpx.Response:
    return httpx.post(validator.url, content=content, headers=headers, timeout=10)


def transfer_wire(
    payer: Keypair, blockhash: Hash, lamports: int = 10**7, *, legacy: bool = False
) -> str:
    """A signed transfer to a new address, base64 (a v0 message, or a legacy one)."""
    ix = transfer(
        TransferParams(from_pubkey=payer.pubkey(), to_pubkey=Pubkey.new_unique(), lamports=lamports)
    )
    message = (
        Message.new_with_blockhash([ix], payer.pubkey(), blockhash)
        if legacy
        else MessageV0.try_compile(payer.pubkey(), [ix], [], blockhash)
    )
    tx = VersionedTransaction(message, [payer])
    return base64.b64encode(bytes(tx)).decode()


def blockhash(chain: Chain, *config: dict[str, str]) -> Hash:
    return Hash.from_string(chain.rpc("getLatestBlockhash", *config)["value"]["blockhash"])


def wait_confirmed(chain: Chain, sig: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        status = chain.rpc("getSignatureStatuses", [sig])["value"][0]
        if status is not None and status["confirmationStatus"] in ("confirmed", "finalized"):
            return
        time.sleep(0.1)
    raise TimeoutError(f"{sig} was not confirmed")


def test_unknown_methods_get_method_not_found(validator: Localnet) -> None:
    reply = raw(validator, {"jsonrpc": "2.0", "id": 7, "method": "getNothing", "params": []})
    assert reply == {
        "jsonrpc": "2.0",
        "error": {"code": -32601, "message": "Method not found"},
        "id": 7,
    }


def test_malformed_requests_get_json_rpc_errors(validator: Localnet) -> None:
    def error(body: object) -> Any:
        reply = raw(validator, body)
        assert isinstance(reply, dict) and "result" not in reply
        return reply

    assert error({"id": 1}) == {
        "jsonrpc": "2.0",
        "error": {"code": -32600, "message": "Invalid request"},
        "id": 1,
    }
    not_json = post(validator, b"{not json", **{"Content-Type": "application/json"})
    assert not_json.status_code == 200
    assert not_json.json() == {
        "jsonrpc": "2.0",
        "error": {"code": -32700, "message": "Parse error"},
        "id": None,
    }
    assert error([1])["error"] == {"code": -32700, "message": "Parse error"}  # not a call
    negative_id = {"jsonrpc": "2.0", "id": -1, "method": "getHealth"}
    assert error(negative_id)["error"] == {"code": -32700, "message": "Parse error"}
    no_version = {"id": 2, "method": "getHealth"}
    assert error(no_version) == {  # and no "jsonrpc" in the answer either
        "error": {"code": -32600, "message": "Unsupported JSON-RPC protocol version"},
        "id": 2,
    }
    call = {"jsonrpc": "2.0", "id": 1, "method": "getBalance"}
    assert error({**call, "params": ["not-a-key"]})["error"] == {
        "code": -32602,
        "message": "Invalid param: Invalid",
    }
    assert error({**call, "params": {"pubkey": "x"}})["error"] == {
        "code": -32602,
        "message": "`params` should be an array",
    }
    assert error({**call, "params": []})["error"] == {
        "code": -32602,
        "message": "`params` should have at least 1 argument(s)",
    }
    assert error({**call, "params": [str(PROGRAM_ID), {}, 3]})["error"] == {
        "code": -32602,
        "message": "Invalid parameters: Expected from 1 to 2 parameters.",
        "data": '"Got: 3"',
    }
    assert error({**call, "params": "x"})["error"]["code"] == -32600


def test_a_page_on_another_origin_may_call_it(validator: Localnet) -> None:
    """CORS as agave's RPC service answers it (any origin, echoed): the paywall's wallet
    script, on the API's origin, reads mints and blockhashes from the validator."""
    preflight = httpx.request(
        "OPTIONS",
        validator.url,
        headers={
            "Origin": "http://127.0.0.1:8000",
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "content-type,solana-client",
        },
        timeout=10,
    )
    assert preflight.status_code == 200
    cors = {k: v for k, v in preflight.headers.items() if k.startswith("access-control-")}
    assert cors == {
        "access-control-allow-methods": "OPTIONS, POST",
        "access-control-allow-origin": "http://127.0.0.1:8000",
        "access-control-max-age": "86400",
        "access-control-allow-headers": "content-type, solana-client",
    }
    assert preflight.headers["vary"].lower() == "origin"
    body = b'{"jsonrpc": "2.0", "id": 1, "method": "getHealth"}'
    reply = post(validator, body, **{"Content-Type": "application/json", "Origin": "http://a"})
    assert reply.headers["access-control-allow-origin"] == "http://a"
    bare = post(validator, body, **{"Content-Type": "application/json"})
    assert not [k for k in bare.headers if k.startswith("access-control-")]


def test_requests_that_are_not_json_rpc_get_http_errors(validator: Localnet) -> None:
    """What agave's HTTP server (jsonrpc-http-server) answers before any JSON-RPC."""
    body = b'{"jsonrpc": "2.0", "id": 1, "method": "getHealth"}'
    for content_type in (None, "text/plain", "application/json-rpc"):
        reply = post(validator, body, **({"Content-Type": content_type} if content_type else {}))
        assert reply.status_code == 415
        assert reply.headers["content-type"] == "text/plain; charset=utf-8"
        assert reply.text == (
            "Supplied content type is not allowed. Content-Type: application/json is required\n"
        )
    for content_type in ("application/json", "Application/JSON; charset=UTF-8"):
        assert post(validator, body, **{"Content-Type": content_type}).json()["result"] == "ok"
    get = httpx.get(validator.url, timeout=10)
    assert get.status_code == 405
    assert get.text == "Used HTTP Method is not allowed. POST or OPTIONS is required\n"
    health = httpx.get(validator.url.rstrip("/") + "/health", timeout=10)
    assert (health.status_code, health.text) == (200, "ok")
    json_body = {"Content-Type": "application/json"}
    notification = post(validator, b'{"jsonrpc": "2.0", "method": "getHealth"}', **json_body)
    assert (notification.status_code, notification.content) == (200, b"")
    assert post(validator, b"[]", **json_body).content == b""  # an empty batch: no answer
    too_large = post(validator, b" " * (50 * 1024 + 1), **json_body)
    assert too_large.status_code == 413
    assert too_large.text == "request body size exceeds allowed maximum"
    not_utf8 = post(validator, b"\xff", **json_body)
    assert (not_utf8.status_code, not_utf8.text) == (
        400,
        "utf-8 encoding error at byte 0 in request body",
    )


def test_batches_answer_each_request(validator: Localnet) -> None:
    replies = raw(
        validator,
        [
            {"jsonrpc": "2.0", "id": 1, "method": "getHealth"},
            {"jsonrpc": "2.0", "id": 2, "method": "getVersion"},
        ],
    )
    assert [r["id"] for r in replies] == [1, 2]
    assert replies[0]["result"] == "ok"


def test_failed_preflight_reports_the_error_logs_and_units(chain: Chain, billing: Billing) -> None:
    plan = billing.plan(amount=10 * USDC)
    sub = billing.subscriber(plan, balance=USDC)
    result = billing.subscribe(plan, sub)
    assert not result.ok
    assert '"InstructionError": [0, {"Custom": 6000}]' in (result.error or "")
    assert result.compute_units > 0
    assert any("InsufficientFunds" in line for line in result.logs)


def test_processed_transactions_are_in_the_history(chain: Chain) -> None:
    receiver = Pubkey.new_unique()
    ix = transfer(
        TransferParams(from_pubkey=chain.payer.pubkey(), to_pubkey=receiver, lamports=10**6)
    )
    result = chain.send_ok([ix], [chain.payer])
    config = {"encoding": "json", "commitment": "confirmed", "maxSupportedTransactionVersion": 0}
    tx = chain.rpc("getTransaction", result.signature, config)
    assert tx["meta"]["err"] is None and tx["meta"]["computeUnitsConsumed"] == result.compute_units
    assert str(receiver) in tx["transaction"]["message"]["accountKeys"]
    index = tx["transaction"]["message"]["accountKeys"].index(str(receiver))
    assert tx["meta"]["postBalances"][index] - tx["meta"]["preBalances"][index] == 10**6
    listed = chain.rpc("getSignaturesForAddress", str(receiver), {"commitment": "confirmed"})
    assert [s["signature"] for s in listed] == [result.signature]
    assert chain.balance(receiver) == 10**6


def test_program_accounts_filter_by_owner_field(chain: Chain, billing: Billing) -> None:
    plan = billing.plan()
    authority = base64.b64encode(bytes(plan.authority.pubkey())).decode()
    memcmp = {"memcmp": {"offset": 8, "bytes": authority, "encoding": "base64"}}
    found = chain.rpc(
        "getProgramAccounts",
        str(PROGRAM_ID),
        {"encoding": "base64", "commitment": "confirmed", "filters": [{"dataSize": 203}, memcmp]},
    )
    assert [a["pubkey"] for a in found] == [str(plan.address)]


def test_token_account_balance(chain: Chain, billing: Billing) -> None:
    plan = billing.plan()
    sub = billing.subscriber(plan, balance=1_500_000)
    confirmed = {"commitment": "confirmed"}
    value = chain.rpc("getTokenAccountBalance", str(sub.token_account), confirmed)["value"]
    assert value == {"amount": "1500000", "decimals": 6, "uiAmount": 1.5, "uiAmountString": "1.5"}


@pytest.mark.drop_in_only("time travel is the drop-in's cheatcode: agave has no such method")
def test_time_travel_moves_the_clock_forward_only(chain: Chain) -> None:
    now = chain.unix_timestamp()
    chain.time_travel(now + 30 * DAY)
    assert chain.unix_timestamp() >= now + 30 * DAY
    with pytest.raises(RpcError) as back:
        chain.time_travel(now)
    assert back.value.code == -32602


def test_solana_py_parses_the_responses(validator: Localnet, chain: Chain) -> None:
    async def run() -> None:
        client = AsyncClient(validator.url, commitment=Confirmed)  # reads what it just wrote
        try:
            kp = Keypair()
            airdrop = (await client.request_airdrop(kp.pubkey(), 10**9)).value
            assert airdrop is not None
            # sent is not confirmed
            await client.confirm_transaction(airdrop, Confirmed, sleep_seconds=0.1)
            assert (await client.get_balance(kp.pubkey())).value == 10**9
            assert (await client.get_latest_blockhash()).value.blockhash is not None
            info = (await client.get_account_info(PROGRAM_ID)).value
            assert info is not None and info.executable
            assert (await client.get_minimum_balance_for_rent_exemption(0)).value > 0
        finally:
            await client.close()

    asyncio.run(run())


def test_data_slices_are_applied_and_checked(validator: Localnet) -> None:
    def info(config: object) -> Any:
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "getAccountInfo",
            "params": [str(PROGRAM_ID), config],
        }
        return raw(validator, body)

    sliced = info({"encoding": "base64", "dataSlice": {"offset": 0, "length": 4}})
    assert len(base64.b64decode(sliced["result"]["value"]["data"][0])) == 4
    assert info({"encoding": "base64", "dataSlice": "x"})["error"]["code"] == -32602
    assert (
        info({"encoding": "base64", "dataSlice": {"offset": -1, "length": 4}})["error"]["code"]
        == -32602
    )


def test_a_recent_blockhash_stays_valid_and_an_unknown_one_is_refused(chain: Chain) -> None:
    recent = blockhash(chain, CONFIRMED)
    config = {"encoding": "base64", "preflightCommitment": "confirmed"}  # as svcpay sends
    chain.rpc("sendTransaction", transfer_wire(chain.payer, recent, 10**7), config)
    # same blockhash, later block: still fine
    chain.rpc("sendTransaction", transfer_wire(chain.payer, recent, 2 * 10**7), config)
    assert chain.rpc("isBlockhashValid", str(recent), CONFIRMED)["value"] is True
    with pytest.raises(RpcError) as unknown:
        chain.rpc("sendTransaction", transfer_wire(chain.payer, Hash.new_unique()), config)
    assert unknown.value.code == -32002 and unknown.value.data["err"] == "BlockhashNotFound"
    assert unknown.value.message == "Transaction simulation failed: Blockhash not found"


def test_the_same_transaction_twice_is_a_duplicate(chain: Chain) -> None:
    wire = transfer_wire(chain.payer, blockhash(chain, CONFIRMED))
    config = {"encoding": "base64", "preflightCommitment": "confirmed"}
    wait_confirmed(chain, chain.rpc("sendTransaction", wire, config))
    with pytest.raises(RpcError) as again:  # the confirmed bank has seen it
        chain.rpc("sendTransaction", wire, config)
    assert again.value.data["err"] == "AlreadyProcessed"
    assert again.value.message == (
        "Transaction simulation failed: This transaction has already been processed"
    )


def test_preflight_and_simulation_read_finalized_unless_told(chain: Chain) -> None:
    """Preflight and simulateTransaction run against the bank of their commitment,
    `finalized` unless the request names one: right after an airdrop (confirmed, not yet
    finalized) the fee payer does not exist there."""
    payer = chain.funded_keypair(10**9)
    # a blockhash the finalized bank knows (a confirmed one is not there yet either)
    wire = transfer_wire(payer, blockhash(chain))
    with pytest.raises(RpcError) as refused:
        chain.rpc("sendTransaction", wire, {"encoding": "base64"})
    assert refused.value.code == -32002
    assert refused.value.message == NO_PRIOR_CREDIT
    assert refused.value.data["err"] == "AccountNotFound"
    simulated = chain.rpc("simulateTransaction", wire, {"encoding": "base64"})["value"]
    assert simulated["err"] == "AccountNotFound"

    simulated = chain.rpc("simulateTransaction", wire, {"encoding": "base64", **CONFIRMED})
    assert simulated["value"]["err"] is None and simulated["value"]["unitsConsumed"] > 0
    sig = chain.rpc(
        "sendTransaction", wire, {"encoding": "base64", "preflightCommitment": "confirmed"}
    )
    wait_confirmed(chain, sig)


def test_simulation_may_put_in_a_recent_blockhash(chain: Chain) -> None:
    """`replaceRecentBlockhash` simulates under the node's own blockhash and says which
    (how a compute-unit estimate needs no getLatestBlockhash); with `sigVerify` it is
    refused, as agave 4.2 refuses it."""
    payer = chain.funded_keypair(10**9)
    for legacy in (True, False):  # legacy and v0 messages alike
        wire = transfer_wire(payer, Hash.default(), legacy=legacy)
        stale = chain.rpc("simulateTransaction", wire, {"encoding": "base64", **CONFIRMED})
        assert stale["value"]["err"] == "BlockhashNotFound"
        config = {"encoding": "base64", "replaceRecentBlockhash": True, **CONFIRMED}
        value = chain.rpc("simulateTransaction", wire, config)["value"]
        assert value["err"] is None and value["unitsConsumed"] > 0, value
        replaced = value["replacementBlockhash"]
        assert chain.rpc("isBlockhashValid", replaced["blockhash"], CONFIRMED)["value"] is True
        assert replaced["lastValidBlockHeight"] > chain.rpc("getBlockHeight", CONFIRMED)
    with pytest.raises(RpcError) as refused:
        chain.rpc("simulateTransaction", wire, {**config, "sigVerify": True})
    assert refused.value.code == -32602
    assert refused.value.message == "sigVerify may not be used with replaceRecentBlockhash"


def test_signatures_are_checked_only_when_asked(chain: Chain) -> None:
    """A transaction with the fee payer's signature still to come (how an x402 client hands
    its payment to a facilitator) simulates without `sigVerify`; with it, it fails with
    `SignatureFailure` before it runs, and a preflight refuses it with -32002, as agave 4.2
    does (measured on solana-test-validator 4.2.2)."""
    sponsor, owner = chain.funded_keypair(10**9), chain.funded_keypair(10**9)
    ix = transfer(
        TransferParams(from_pubkey=owner.pubkey(), to_pubkey=Pubkey.new_unique(), lamports=10**7)
    )
    msg = MessageV0.try_compile(sponsor.pubkey(), [ix], [], blockhash(chain, CONFIRMED))
    owner_signature = owner.sign_message(bytes([0x80]) + bytes(msg))
    partial = VersionedTransaction.populate(msg, [Signature.default(), owner_signature])
    wire = base64.b64encode(bytes(partial)).decode()
    for verify in ({}, {"sigVerify": False}):
        config = {"encoding": "base64", **CONFIRMED, **verify}
        simulated = chain.rpc("simulateTransaction", wire, config)["value"]
        assert simulated["err"] is None and simulated["unitsConsumed"] > 0, verify

    asked = {"encoding": "base64", "sigVerify": True, **CONFIRMED}
    simulated = chain.rpc("simulateTransaction", wire, asked)["value"]
    assert (simulated["err"], simulated["logs"], simulated["unitsConsumed"]) == (
        "SignatureFailure",
        [],
        0,
    ), simulated
    preflight = {"encoding": "base64", "preflightCommitment": "confirmed"}
    with pytest.raises(RpcError) as refused:
        chain.rpc("sendTransaction", wire, preflight)
    assert (refused.value.code, refused.value.message) == (
        -32002,
        "Transaction simulation failed: Transaction did not pass signature verification",
    )
    assert (refused.value.data["err"], refused.value.data["logs"]) == ("SignatureFailure", [])

    signed = VersionedTransaction(msg, [sponsor, owner])
    full = base64.b64encode(bytes(signed)).decode()
    assert chain.rpc("simulateTransaction", full, asked)["value"]["err"] is None


def test_a_transaction_larger_than_a_packet_is_refused(chain: Chain) -> None:
    memo = Pubkey.from_string("MemoSq4gqABAXKb1JyMUNp1rPMfWmK9BCZDwgVgkU2n")
    blockhash = Hash.from_string(
        chain.rpc("getLatestBlockhash", {"commitment": "confirmed"})["value"]["blockhash"]
    )

    def wire(size: int) -> bytes:
        probe = Message.new_with_blockhash(
            [Instruction(memo, b"", [])], chain.payer.pubkey(), blockhash
        )
        overhead = len(bytes(VersionedTransaction(probe, [chain.payer]))) + 1  # length prefix
        ix = Instruction(memo, b"x" * (size - overhead), [])
        msg = Message.new_with_blockhash([ix], chain.payer.pubkey(), blockhash)
        tx = bytes(VersionedTransaction(msg, [chain.payer]))
        assert len(tx) == size
        return tx

    config = {"encoding": "base64", "skipPreflight": True}
    with pytest.raises(RpcError) as refused:
        chain.rpc("sendTransaction", base64.b64encode(wire(1233)).decode(), config)
    assert refused.value.code == -32602 and "too large: 1233 bytes" in refused.value.message
    assert chain.rpc("sendTransaction", base64.b64encode(wire(1232)).decode(), config)
