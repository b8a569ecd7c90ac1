"""Transaction history as Solana's RPC serves it: getSignaturesForAddress (newest first, failed
transactions too, limit/before/until, memos) and getTransaction's json and jsonParsed shapes.

Agave's shapes and errors, so these hold against solana-test-validator as against the drop-in.
What a test wrote is confirmed, not yet finalized: history is read at `confirmed`.
"""

from __future__ import annotations

import base64
import time
from typing import Any

import pytest
from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Confirmed
from solders.hash import Hash
from solders.instruction import Instruction
from solders.keypair import Keypair
from solders.message import MessageV0
from solders.pubkey import Pubkey
from solders.signature import Signature
from solders.system_program import TransferParams, transfer
from solders.transaction import VersionedTransaction
from spl.token.constants import ASSOCIATED_TOKEN_PROGRAM_ID, TOKEN_PROGRAM_ID

from svcpay.localnet.process import Localnet
from tests.support.chain import Chain, RpcError

MEMO = Pubkey.from_string("MemoSq4gqABAXKb96qnH8TysNcWxMyWCqXgDLGmfcHr")
# What a test just wrote is confirmed, not yet finalized (the RPC's default): read at confirmed.
CONFIRMED = {"commitment": "confirmed"}
JSON_V0 = {"encoding": "json", "maxSupportedTransactionVersion": 0, **CONFIRMED}
PARSED_V0 = {"encoding": "jsonParsed", "maxSupportedTransactionVersion": 0, **CONFIRMED}
SIGNATURE_FIELDS = {
    "signature",
    "slot",
    "err",
    "memo",
    "blockTime",
    "confirmationStatus",
    "transactionIndex",
}
NOT_FOUND = -32020  # a `before` or `until` the node's ledger does not hold


def confirmed(chain: Chain, sig: str) -> str:
    """Waits until `sig` is confirmed (a status can say `processed` first, which history
    read at `confirmed` does not list yet)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        status = chain.rpc("getSignatureStatuses", [sig])["value"][0]
        if status is not None and status["confirmationStatus"] in ("confirmed", "finalized"):
            return sig
        time.sleep(0.1)
    raise TimeoutError(f"{sig} was not confirmed")


def land(chain: Chain, ixs: list[Instruction], signers: list[Keypair]) -> str:
    """Sends without preflight (so a failing transaction lands, paying its fee) and waits
    until it is confirmed."""
    blockhash = Hash.from_string(chain.rpc("getLatestBlockhash")["value"]["blockhash"])
    tx = VersionedTransaction(
        MessageV0.try_compile(signers[0].pubkey(), ixs, [], blockhash), signers
    )
    wire = base64.b64encode(bytes(tx)).decode()
    sig = str(chain.rpc("sendTransaction", wire, {"encoding": "base64", "skipPreflight": True}))
    return confirmed(chain, sig)


def pay(chain: Chain, to: Pubkey, lamports: int, payer: Keypair | None = None) -> Instruction:
    payer = payer or chain.payer
    return transfer(TransferParams(from_pubkey=payer.pubkey(), to_pubkey=to, lamports=lamports))


@pytest.fixture
def history(chain: Chain) -> tuple[Pubkey, list[str]]:
    """An address with four landed transactions, newest first; the second newest failed."""
    address = Pubkey.new_unique()
    sigs = [
        chain.send_ok([pay(chain, address, 10**6 + i)], [chain.payer]).signature for i in (0, 1)
    ]
    poor = chain.funded_keypair(10**7)
    sigs.append(land(chain, [pay(chain, address, 10**9, payer=poor)], [poor]))  # fails
    sigs.append(chain.send_ok([pay(chain, address, 10**6 + 3)], [chain.payer]).signature)
    return address, [str(s) for s in reversed(sigs)]


def listed_full(chain: Chain, address: Pubkey, **config: Any) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = chain.rpc(
        "getSignaturesForAddress", str(address), {**CONFIRMED, **config}
    )
    return found


def listed(chain: Chain, address: Pubkey, **config: Any) -> list[str]:
    return [s["signature"] for s in listed_full(chain, address, **config)]


def test_signatures_come_newest_first_failed_ones_included(
    chain: Chain, history: tuple[Pubkey, list[str]]
) -> None:
    address, sigs = history
    found = chain.rpc("getSignaturesForAddress", str(address), CONFIRMED)
    assert [s["signature"] for s in found] == sigs
    assert all(set(s) == SIGNATURE_FIELDS for s in found)
    assert [s["err"] for s in found] == [
        None,
        {"InstructionError": [0, {"Custom": 1}]},  # the system program: insufficient lamports
        None,
        None,
    ]
    slots = [s["slot"] for s in found]
    assert slots == sorted(slots, reverse=True)
    assert all(isinstance(s["blockTime"], int) and s["memo"] is None for s in found)
    assert all(s["confirmationStatus"] in ("confirmed", "finalized") for s in found)
    assert all(isinstance(s["transactionIndex"], int) and s["transactionIndex"] >= 0 for s in found)


def test_limit_before_and_until_page_through_the_history(
    chain: Chain, history: tuple[Pubkey, list[str]]
) -> None:
    address, sigs = history
    assert listed(chain, address, limit=2) == sigs[:2]
    assert listed(chain, address, before=sigs[1]) == sigs[2:]
    assert listed(chain, address, until=sigs[2]) == sigs[:2]
    assert listed(chain, address, before=sigs[0], until=sigs[3]) == sigs[1:3]
    assert listed(chain, address, before=sigs[0], until=sigs[3], limit=1) == sigs[1:2]
    # any transaction the ledger holds bounds the list by its place there
    other = chain.send_ok([pay(chain, Pubkey.new_unique(), 10**6)], [chain.payer]).signature
    assert other is not None
    assert listed(chain, address, before=other) == sigs
    assert listed(chain, address, until=other) == []
    assert listed(chain, Pubkey.new_unique()) == []


def test_a_bound_the_ledger_does_not_hold_is_an_error(
    chain: Chain, history: tuple[Pubkey, list[str]]
) -> None:
    """Agave without long-term storage refuses a `before` or `until` it cannot find."""
    address, sigs = history
    unknown = str(Signature.new_unique())
    for bound in ("before", "until"):
        with pytest.raises(RpcError) as refused:
            listed(chain, address, **{bound: unknown})
        assert refused.value.code == NOT_FOUND
        assert refused.value.message == f"Transaction {unknown} not found"
        assert refused.value.data is None
    with pytest.raises(RpcError) as first:  # `before` is looked up first
        listed(chain, address, before=unknown, until=str(Signature.new_unique()))
    assert first.value.message == f"Transaction {unknown} not found"
    with pytest.raises(RpcError) as until:
        listed(chain, address, before=sigs[0], until=unknown)
    assert until.value.message == f"Transaction {unknown} not found"


def test_bad_parameters_are_refused_as_the_rpc_does(chain: Chain) -> None:
    address = str(chain.payer.pubkey())

    def code(*params: Any) -> tuple[int, str]:
        with pytest.raises(RpcError) as e:
            chain.rpc("getSignaturesForAddress", *params)
        return e.value.code, e.value.message

    assert code(address, {"limit": 0}) == (-32602, "Invalid limit; max 1000")
    assert code(address, {"limit": 1001}) == (-32602, "Invalid limit; max 1000")
    assert code(address, {"commitment": "processed"}) == (
        -32602,
        "Method does not support commitment below `confirmed`",
    )
    assert code("not-an-address")[0] == -32602
    assert code(address, {"before": "not-a-signature"})[0] == -32602
    with pytest.raises(RpcError) as future:
        chain.rpc("getSignaturesForAddress", address, {"minContextSlot": 2**62})
    assert future.value.code == -32016
    assert isinstance(future.value.data["contextSlot"], int)


def test_memos_are_listed_with_their_length(chain: Chain) -> None:
    address = Pubkey.new_unique()
    memo = Instruction(MEMO, b"pay for GPU time", [])
    chain.send_ok([pay(chain, address, 10**6), memo], [chain.payer])
    (found,) = chain.rpc("getSignaturesForAddress", str(address), CONFIRMED)
    assert found["memo"] == "[16] pay for GPU time"


def test_a_transaction_that_cannot_pay_never_lands(chain: Chain) -> None:
    broke = Keypair()  # no lamports: the fee cannot be charged
    blockhash = Hash.from_string(chain.rpc("getLatestBlockhash")["value"]["blockhash"])
    ix = pay(chain, Pubkey.new_unique(), 1, payer=broke)
    tx = VersionedTransaction(MessageV0.try_compile(broke.pubkey(), [ix], [], blockhash), [broke])
    wire = base64.b64encode(bytes(tx)).decode()
    try:
        sig = chain.rpc("sendTransaction", wire, {"encoding": "base64", "skipPreflight": True})
    except RpcError:
        return  # refused outright is fine too
    time.sleep(1)
    assert chain.rpc("getSignatureStatuses", [sig])["value"] == [None]
    assert chain.rpc("getSignaturesForAddress", str(broke.pubkey()), CONFIRMED) == []


def test_get_transaction_json_carries_logs_error_and_version(
    chain: Chain, history: tuple[Pubkey, list[str]]
) -> None:
    _, sigs = history
    ok = chain.rpc("getTransaction", sigs[0], JSON_V0)
    assert ok["version"] == 0 and isinstance(ok["blockTime"], int) and ok["slot"] > 0
    (summary,) = listed_full(chain, history[0], limit=1)
    assert ok["transactionIndex"] == summary["transactionIndex"]
    meta = ok["meta"]
    assert meta["err"] is None and meta["status"] == {"Ok": None}
    assert meta["logMessages"] == [
        "Program 11111111111111111111111111111111 invoke [1]",
        "Program 11111111111111111111111111111111 success",
    ]
    assert meta["loadedAddresses"] == {"writable": [], "readonly": []}
    message = ok["transaction"]["message"]
    assert message["addressTableLookups"] == []
    assert message["instructions"][0]["stackHeight"] == 1
    assert set(message["header"]) == {
        "numRequiredSignatures",
        "numReadonlySignedAccounts",
        "numReadonlyUnsignedAccounts",
    }

    failed = chain.rpc("getTransaction", sigs[1], JSON_V0)["meta"]
    assert failed["err"] == {"InstructionError": [0, {"Custom": 1}]}
    assert failed["status"] == {"Err": failed["err"]}
    assert any("insufficient lamports" in line for line in failed["logMessages"])
    assert failed["fee"] > 0

    with pytest.raises(RpcError) as old_client:
        chain.rpc("getTransaction", sigs[0], {"encoding": "json", **CONFIRMED})
    assert old_client.value.code == -32015
    assert chain.rpc("getTransaction", str(Signature.new_unique()), JSON_V0) is None
    with pytest.raises(RpcError) as processed:
        chain.rpc("getTransaction", sigs[0], {**JSON_V0, "commitment": "processed"})
    assert processed.value.code == -32602
    b64 = chain.rpc("getTransaction", sigs[0], {**JSON_V0, "encoding": "base64"})
    assert b64["transaction"][1] == "base64"
    assert (
        str(VersionedTransaction.from_bytes(base64.b64decode(b64["transaction"][0])).signatures[0])
        == sigs[0]
    )


def test_get_transaction_json_parsed_parses_known_programs(chain: Chain) -> None:
    address = Pubkey.new_unique()
    sig = chain.send_ok([pay(chain, address, 10**6)], [chain.payer]).signature
    tx = chain.rpc("getTransaction", sig, PARSED_V0)
    message = tx["transaction"]["message"]
    payer = str(chain.payer.pubkey())
    assert message["accountKeys"] == [
        {"pubkey": payer, "writable": True, "signer": True, "source": "transaction"},
        {"pubkey": str(address), "writable": True, "signer": False, "source": "transaction"},
        {
            "pubkey": "11111111111111111111111111111111",
            "writable": False,
            "signer": False,
            "source": "transaction",
        },
    ]
    assert message["instructions"] == [
        {
            "program": "system",
            "programId": "11111111111111111111111111111111",
            "parsed": {
                "info": {"source": payer, "destination": str(address), "lamports": 10**6},
                "type": "transfer",
            },
            "stackHeight": 1,
        }
    ]
    assert "loadedAddresses" not in tx["meta"]
    assert tx["meta"]["logMessages"] and tx["meta"]["err"] is None


def test_token_transactions_show_inner_instructions_and_token_balances(chain: Chain) -> None:
    mint = chain.create_mint(decimals=6)
    owner = Keypair().pubkey()
    ata = chain.token_account(owner, mint, 1_500_000)
    (latest,) = chain.rpc("getSignaturesForAddress", str(ata), {"limit": 1, **CONFIRMED})
    tx = chain.rpc("getTransaction", latest["signature"], PARSED_V0)
    create, mint_to = tx["transaction"]["message"]["instructions"]
    assert create["program"] == "spl-associated-token-account"
    assert create["programId"] == str(ASSOCIATED_TOKEN_PROGRAM_ID)
    assert create["parsed"]["type"] == "create"
    assert create["parsed"]["info"]["account"] == str(ata)
    assert create["parsed"]["info"]["wallet"] == str(owner)
    assert mint_to["parsed"] == {
        "info": {
            "mint": str(mint),
            "account": str(ata),
            "amount": "1500000",
            "mintAuthority": str(chain.payer.pubkey()),
        },
        "type": "mintTo",
    }
    meta = tx["meta"]
    (inner,) = meta["innerInstructions"]
    assert inner["index"] == 0
    assert all(ix["stackHeight"] == 2 for ix in inner["instructions"])
    kinds = [ix["parsed"]["type"] for ix in inner["instructions"] if "parsed" in ix]
    assert "initializeAccount3" in kinds
    index = [k["pubkey"] for k in tx["transaction"]["message"]["accountKeys"]].index(str(ata))
    assert meta["preTokenBalances"] == []  # the account did not exist yet
    assert meta["postTokenBalances"] == [
        {
            "accountIndex": index,
            "mint": str(mint),
            "uiTokenAmount": {
                "uiAmount": 1.5,
                "decimals": 6,
                "amount": "1500000",
                "uiAmountString": "1.5",
            },
            "owner": str(owner),
            "programId": str(TOKEN_PROGRAM_ID),
        }
    ]
    raw = chain.rpc("getTransaction", latest["signature"], JSON_V0)["meta"]["innerInstructions"]
    assert set(raw[0]["instructions"][0]) == {"programIdIndex", "accounts", "data", "stackHeight"}


def test_airdrops_are_transactions_in_the_history(chain: Chain) -> None:
    kp = Keypair()
    sig = confirmed(chain, chain.rpc("requestAirdrop", str(kp.pubkey()), 10**9))
    assert sig in listed(chain, kp.pubkey())
    # without maxSupportedTransactionVersion: a legacy client, no version field
    tx = chain.rpc("getTransaction", sig, {"encoding": "jsonParsed", **CONFIRMED})
    assert "version" not in tx
    (ix,) = tx["transaction"]["message"]["instructions"]
    assert ix["parsed"]["type"] == "transfer"
    assert ix["parsed"]["info"]["destination"] == str(kp.pubkey())
    assert chain.rpc("getTransaction", sig, JSON_V0)["version"] == "legacy"


@pytest.mark.anyio
async def test_solana_py_reads_the_history(
    validator: Localnet, chain: Chain, history: tuple[Pubkey, list[str]]
) -> None:
    address, sigs = history
    async with AsyncClient(validator.url, commitment=Confirmed) as rpc:
        page = (await rpc.get_signatures_for_address(address, limit=3)).value
        assert [str(s.signature) for s in page] == sigs[:3]
        assert page[1].err is not None and page[0].err is None
        before = (await rpc.get_signatures_for_address(address, before=page[-1].signature)).value
        assert [str(s.signature) for s in before] == sigs[3:]
        for encoding in ("json", "jsonParsed"):
            got = await rpc.get_transaction(
                Signature.from_string(sigs[1]), encoding, max_supported_transaction_version=0
            )
            assert got.value is not None
            meta = got.value.transaction.meta
            assert meta is not None and meta.err is not None
            assert meta.log_messages and "insufficient lamports" in " ".join(meta.log_messages)
