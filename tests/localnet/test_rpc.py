"""The drop-in validator speaks Solana JSON-RPC: shapes, error codes, history, time travel.

These run against whatever local validator the session started; the time-travel tests need
the drop-in (solana-test-validator cannot travel in time).
"""

from __future__ import annotations

import base64

import httpx
import pytest
from solana.rpc.api import Client
from solana.rpc.commitment import Confirmed
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from solders.system_program import TransferParams, transfer

from svcpay.localnet.process import Localnet
from svcpay.program.generated.program_id import PROGRAM_ID
from tests.support.billing import DAY, USDC, Billing
from tests.support.chain import Chain, RpcError


def raw(validator: Localnet, body: object) -> object:
    return httpx.post(validator.url, json=body, timeout=10).json()


def test_unknown_methods_get_method_not_found(validator: Localnet) -> None:
    reply = raw(validator, {"jsonrpc": "2.0", "id": 7, "method": "getNothing", "params": []})
    assert reply == {
        "jsonrpc": "2.0",
        "error": {"code": -32601, "message": "Method not found"},
        "id": 7,
    }


def test_malformed_requests_get_json_rpc_errors(validator: Localnet) -> None:
    assert raw(validator, {"id": 1})["error"]["code"] == -32600  # type: ignore[index]
    reply = httpx.post(validator.url, content=b"{not json", timeout=10).json()
    assert reply["error"]["code"] == -32700
    bad_key = {"jsonrpc": "2.0", "id": 1, "method": "getBalance", "params": ["not-a-key"]}
    assert raw(validator, bad_key)["error"]["code"] == -32602  # type: ignore[index]


def test_batches_answer_each_request(validator: Localnet) -> None:
    replies = raw(
        validator,
        [
            {"jsonrpc": "2.0", "id": 1, "method": "getHealth"},
            {"jsonrpc": "2.0", "id": 2, "method": "getVersion"},
        ],
    )
    assert [r["id"] for r in replies] == [1, 2]  # type: ignore[union-attr,index]
    assert replies[0]["result"] == "ok"  # type: ignore[index]


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


def test_time_travel_moves_the_clock_forward_only(chain: Chain) -> None:
    if not chain.can_time_travel:
        pytest.skip("solana-test-validator cannot travel in time")
    now = chain.unix_timestamp()
    chain.time_travel(now + 30 * DAY)
    assert chain.unix_timestamp() >= now + 30 * DAY
    with pytest.raises(RpcError) as back:
        chain.time_travel(now)
    assert back.value.code == -32602


def test_solana_py_parses_the_responses(validator: Localnet, chain: Chain) -> None:
    client = Client(validator.url, commitment=Confirmed)  # reads what it just wrote
    kp = Keypair()
    assert client.request_airdrop(kp.pubkey(), 10**9).value is not None
    assert client.get_balance(kp.pubkey()).value == 10**9
    assert client.get_latest_blockhash().value.blockhash is not None
    info = client.get_account_info(PROGRAM_ID).value
    assert info is not None and info.executable
    assert client.get_minimum_balance_for_rent_exemption(0).value > 0


def test_data_slices_are_applied_and_checked(validator: Localnet) -> None:
    def info(config: object) -> dict:  # type: ignore[type-arg]
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "getAccountInfo",
            "params": [str(PROGRAM_ID), config],
        }
        return raw(validator, body)  # type: ignore[return-value]

    sliced = info({"encoding": "base64", "dataSlice": {"offset": 0, "length": 4}})
    assert len(base64.b64decode(sliced["result"]["value"]["data"][0])) == 4
    assert info({"encoding": "base64", "dataSlice": "x"})["error"]["code"] == -32602
    assert (
        info({"encoding": "base64", "dataSlice": {"offset": -1, "length": 4}})["error"]["code"]
        == -32602
    )


def test_a_recent_blockhash_stays_valid_and_an_unknown_one_is_refused(chain: Chain) -> None:
    from solders.hash import Hash
    from solders.message import MessageV0
    from solders.transaction import VersionedTransaction

    payer = chain.payer
    blockhash = Hash.from_string(chain.rpc("getLatestBlockhash")["value"]["blockhash"])

    def send_with(bh: Hash, lamports: int) -> str:
        ix = transfer(
            TransferParams(
                from_pubkey=payer.pubkey(), to_pubkey=Pubkey.new_unique(), lamports=lamports
            )
        )
        tx = VersionedTransaction(MessageV0.try_compile(payer.pubkey(), [ix], [], bh), [payer])
        return str(
            chain.rpc(
                "sendTransaction", base64.b64encode(bytes(tx)).decode(), {"encoding": "base64"}
            )
        )

    send_with(blockhash, 10**7)
    send_with(blockhash, 2 * 10**7)  # same blockhash, later block: still fine
    assert chain.rpc("isBlockhashValid", str(blockhash))["value"] is True
    with pytest.raises(RpcError) as unknown:
        send_with(Hash.new_unique(), 10**7)
    assert unknown.value.code == -32002 and unknown.value.data["err"] == "BlockhashNotFound"


def test_the_same_transaction_twice_is_a_duplicate(chain: Chain) -> None:
    from solders.hash import Hash
    from solders.message import MessageV0
    from solders.transaction import VersionedTransaction

    payer = chain.payer
    bh = Hash.from_string(chain.rpc("getLatestBlockhash")["value"]["blockhash"])
    ix = transfer(
        TransferParams(from_pubkey=payer.pubkey(), to_pubkey=Pubkey.new_unique(), lamports=10**7)
    )
    wire = base64.b64encode(
        bytes(VersionedTransaction(MessageV0.try_compile(payer.pubkey(), [ix], [], bh), [payer]))
    ).decode()
    chain.rpc("sendTransaction", wire, {"encoding": "base64"})
    with pytest.raises(RpcError) as again:
        chain.rpc("sendTransaction", wire, {"encoding": "base64"})
    assert again.value.data["err"] == "AlreadyProcessed"
