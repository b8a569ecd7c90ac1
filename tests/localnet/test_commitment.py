"""The drop-in honours commitment as a cluster does: what a transaction writes is visible at
`confirmed` (and `processed`) as soon as it lands, and at `finalized`, the RPC's default, only
FINALITY_SLOTS (32) slots later. Code that reads at the default right after a confirmed write
fails here as it would on a real cluster.

Simulation and preflight run against the bank of their commitment, `finalized` by default too.

Time travel stands in for the ~13 s of waiting: jumping 32 slots ahead finalizes everything.
solana-test-validator cannot travel in time, so these run on the drop-in only.
"""

from __future__ import annotations

import base64
import contextlib
from typing import Any

import pytest
from solders.hash import Hash
from solders.keypair import Keypair
from solders.message import MessageV0
from solders.pubkey import Pubkey
from solders.system_program import TransferParams, transfer
from solders.transaction import VersionedTransaction

from svcpay.localnet.process import Localnet
from svcpay.program.generated.program_id import PROGRAM_ID
from tests.support.billing import Billing
from tests.support.chain import Chain, RpcError

pytestmark = pytest.mark.drop_in_only("finalizes by time travel, which only the drop-in has")

FINALITY_SLOTS = 32
CONFIRMED = {"commitment": "confirmed"}
FINALIZED = {"commitment": "finalized"}
JSON_V0 = {"encoding": "json", "maxSupportedTransactionVersion": 0}


@pytest.fixture
def drop_in(validator: Localnet, chain: Chain) -> Chain:
    """The chain, on the drop-in (the marker deselects these tests anywhere else)."""
    assert validator.kind == "svcpay-drop-in", validator.describe()
    return chain


def slot(chain: Chain, commitment: str = "confirmed") -> int:
    return int(chain.rpc("getSlot", {"commitment": commitment}))


def finalize_all(chain: Chain) -> None:
    """Moves the tip FINALITY_SLOTS past every landed transaction."""
    chain.rpc("surfnet_timeTravel", {"absoluteSlot": slot(chain) + FINALITY_SLOTS})


def balance(chain: Chain, address: Pubkey, *config: dict[str, Any]) -> int:
    return int(chain.rpc("getBalance", str(address), *config)["value"])


def signatures(chain: Chain, address: Pubkey, *config: dict[str, Any]) -> list[str]:
    return [s["signature"] for s in chain.rpc("getSignaturesForAddress", str(address), *config)]


def status(chain: Chain, signature: str) -> dict[str, Any]:
    value: dict[str, Any] = chain.rpc("getSignatureStatuses", [signature])["value"][0]
    return value


def test_a_transfer_is_confirmed_at_once_and_finalized_32_slots_later(drop_in: Chain) -> None:
    chain = drop_in
    receiver = Pubkey.new_unique()
    ix = transfer(
        TransferParams(from_pubkey=chain.payer.pubkey(), to_pubkey=receiver, lamports=10**6)
    )
    sig = chain.send_ok([ix], [chain.payer]).signature
    assert sig is not None

    assert balance(chain, receiver, CONFIRMED) == 10**6
    assert balance(chain, receiver, {"commitment": "processed"}) == 10**6
    assert balance(chain, receiver, FINALIZED) == 0
    assert balance(chain, receiver) == 0  # the default is finalized
    landed = status(chain, sig)
    assert landed["confirmationStatus"] == "confirmed"
    assert 0 <= landed["confirmations"] <= slot(chain) - landed["slot"] < FINALITY_SLOTS
    assert chain.rpc("getTransaction", sig, JSON_V0) is None
    assert chain.rpc("getTransaction", sig, {**JSON_V0, **CONFIRMED})["slot"] == landed["slot"]
    assert signatures(chain, receiver) == []
    (listed,) = chain.rpc("getSignaturesForAddress", str(receiver), CONFIRMED)
    assert listed["signature"] == sig and listed["confirmationStatus"] == "confirmed"

    finalize_all(chain)
    assert balance(chain, receiver) == balance(chain, receiver, CONFIRMED) == 10**6
    final = status(chain, sig)
    assert final["confirmationStatus"] == "finalized" and final["confirmations"] is None
    assert final["slot"] == landed["slot"]
    tx = chain.rpc("getTransaction", sig, JSON_V0)
    assert tx is not None and tx["slot"] == landed["slot"]
    assert signatures(chain, receiver) == [sig]
    (listed,) = chain.rpc("getSignaturesForAddress", str(receiver))
    assert listed["confirmationStatus"] == "finalized"


def test_airdrops_finalize_like_any_transaction(drop_in: Chain) -> None:
    kp = drop_in.funded_keypair(10**9)
    assert balance(drop_in, kp.pubkey(), CONFIRMED) == 10**9
    assert balance(drop_in, kp.pubkey()) == 0
    info = drop_in.rpc("getAccountInfo", str(kp.pubkey()), {"encoding": "base64"})
    assert info["value"] is None
    finalize_all(drop_in)
    assert balance(drop_in, kp.pubkey()) == 10**9


def test_finalized_reads_show_an_account_as_it_was_before_a_change(drop_in: Chain) -> None:
    chain = drop_in
    mint = chain.create_mint(decimals=6)
    ata = chain.token_account(Keypair().pubkey(), mint, 1_000_000)
    finalize_all(chain)
    chain.mint_to(mint, ata, 500_000)

    def amount(*config: dict[str, Any]) -> str:
        return str(chain.rpc("getTokenAccountBalance", str(ata), *config)["value"]["amount"])

    assert amount(CONFIRMED) == "1500000"
    assert amount() == amount(FINALIZED) == "1000000"
    infos = chain.rpc("getMultipleAccounts", [str(ata), str(mint)], {"encoding": "base64"})
    data = base64.b64decode(infos["value"][0]["data"][0])
    assert int.from_bytes(data[64:72], "little") == 1_000_000
    supply = base64.b64decode(infos["value"][1]["data"][0])[36:44]
    assert int.from_bytes(supply, "little") == 1_000_000  # the mint as it was, too
    finalize_all(chain)
    assert amount() == "1500000"


def test_finalized_program_accounts_hide_a_just_created_account(
    drop_in: Chain, billing: Billing
) -> None:
    chain = drop_in
    plan = billing.plan()
    authority = base64.b64encode(bytes(plan.authority.pubkey())).decode()
    filters = [{"memcmp": {"offset": 8, "bytes": authority, "encoding": "base64"}}]

    def found(*commitment: dict[str, Any]) -> list[str]:
        config: dict[str, Any] = {"encoding": "base64", "filters": filters}
        for c in commitment:
            config.update(c)
        return [a["pubkey"] for a in chain.rpc("getProgramAccounts", str(PROGRAM_ID), config)]

    assert found(CONFIRMED) == [str(plan.address)]
    assert found() == found(FINALIZED) == []
    info = chain.rpc("getAccountInfo", str(plan.address), {"encoding": "base64"})
    assert info["value"] is None
    finalize_all(chain)
    assert found() == [str(plan.address)]
    info = chain.rpc("getAccountInfo", str(plan.address), {"encoding": "base64"})
    assert info["value"]["owner"] == str(PROGRAM_ID)


def test_slots_and_blockhashes_lag_at_finalized(drop_in: Chain) -> None:
    chain = drop_in
    finalize_all(chain)  # well past genesis, so finalized is 32 slots behind, not slot 0
    before = slot(chain)
    final = slot(chain, "finalized")
    assert slot(chain, "processed") >= before
    after = slot(chain)
    assert before - FINALITY_SLOTS <= final <= after - FINALITY_SLOTS
    height = chain.rpc("getBlockHeight", FINALIZED)
    assert before - FINALITY_SLOTS <= height <= slot(chain) - FINALITY_SLOTS
    epoch = chain.rpc("getEpochInfo")  # default: finalized
    assert epoch["absoluteSlot"] <= slot(chain) - FINALITY_SLOTS
    assert epoch["transactionCount"] <= chain.rpc("getEpochInfo", CONFIRMED)["transactionCount"]

    tip = chain.rpc("getLatestBlockhash", CONFIRMED)
    old = chain.rpc("getLatestBlockhash")
    assert old["context"]["slot"] <= tip["context"]["slot"] - FINALITY_SLOTS
    assert old["value"]["blockhash"] != tip["value"]["blockhash"]
    assert old["value"]["lastValidBlockHeight"] < tip["value"]["lastValidBlockHeight"]
    # both still usable; the finalized bank does not know the newer one yet
    assert chain.rpc("isBlockhashValid", old["value"]["blockhash"], CONFIRMED)["value"] is True
    assert chain.rpc("isBlockhashValid", old["value"]["blockhash"])["value"] is True
    assert chain.rpc("isBlockhashValid", tip["value"]["blockhash"])["value"] is False

    confirmed = chain.rpc("getBalance", str(chain.payer.pubkey()), CONFIRMED)["context"]["slot"]
    finalized = chain.rpc("getBalance", str(chain.payer.pubkey()))["context"]["slot"]
    assert finalized <= confirmed - FINALITY_SLOTS


def test_a_blockhash_is_spent_by_height_however_few_blocks_came_since(drop_in: Chain) -> None:
    """A jump of more than 150 slots (time travel; a cluster's 60 s) spends every blockhash
    from before it, as lastValidBlockHeight says: clients decide expiry by height, so a node
    that still took such a transaction would land a payment they had signed again."""
    chain = drop_in
    old = chain.rpc("getLatestBlockhash", CONFIRMED)["value"]
    payer = chain.funded_keypair(10**9)
    ix = transfer(
        TransferParams(from_pubkey=payer.pubkey(), to_pubkey=Pubkey.new_unique(), lamports=10**6)
    )
    message = MessageV0.try_compile(payer.pubkey(), [ix], [], Hash.from_string(old["blockhash"]))
    wire = base64.b64encode(bytes(VersionedTransaction(message, [payer]))).decode()
    config = {"encoding": "base64", "preflightCommitment": "confirmed"}

    chain.rpc("surfnet_timeTravel", {"absoluteSlot": old["lastValidBlockHeight"]})
    assert chain.rpc("getBlockHeight", CONFIRMED) <= old["lastValidBlockHeight"]
    assert chain.rpc("isBlockhashValid", old["blockhash"], CONFIRMED)["value"] is True
    chain.rpc("surfnet_timeTravel", {"absoluteSlot": old["lastValidBlockHeight"] + 1})
    assert chain.rpc("getBlockHeight", CONFIRMED) > old["lastValidBlockHeight"]
    assert chain.rpc("isBlockhashValid", old["blockhash"], CONFIRMED)["value"] is False
    with pytest.raises(RpcError) as spent:
        chain.rpc("sendTransaction", wire, config)
    assert spent.value.data["err"] == "BlockhashNotFound"
    with contextlib.suppress(RpcError):  # a cluster's RPC may take it; no leader lands it
        chain.rpc("sendTransaction", wire, {**config, "skipPreflight": True})
    assert balance(chain, payer.pubkey(), CONFIRMED) == 10**9

    finalize_all(chain)  # another jump: a finalized read still gets a live blockhash
    final = chain.rpc("getLatestBlockhash")["value"]
    assert final["lastValidBlockHeight"] >= chain.rpc("getBlockHeight", CONFIRMED)
    assert chain.rpc("isBlockhashValid", final["blockhash"])["value"] is True


def test_commitment_is_parsed_as_the_rpc_parses_it(drop_in: Chain) -> None:
    chain = drop_in
    address = str(chain.payer.pubkey())

    def refused(method: str, *params: Any) -> tuple[int, str]:
        with pytest.raises(RpcError) as e:
            chain.rpc(method, *params)
        return e.value.code, e.value.message

    for level in ("recent", "max", "root", "single", "singleGossip", "Finalized", ""):
        code, message = refused("getBalance", address, {"commitment": level})
        assert code == -32602
        assert message == (
            f"Invalid params: unknown variant `{level}`, "
            "expected one of `processed`, `confirmed`, `finalized`."
        )
    assert refused("getAccountInfo", address, {"commitment": 1})[0] == -32602
    assert refused("getLatestBlockhash", {"commitment": "max"})[0] == -32602
    assert balance(chain, chain.payer.pubkey(), {"commitment": None}) == balance(
        chain, chain.payer.pubkey()
    )
    # history is kept at confirmed and above only
    sig = str(
        chain.rpc("getSignaturesForAddress", address, {"limit": 1, **CONFIRMED})[0]["signature"]
    )
    assert refused("getTransaction", sig, {**JSON_V0, "commitment": "processed"}) == (
        -32602,
        "Method does not support commitment below `confirmed`",
    )

    # minContextSlot is checked against the slot of the level read
    tip = slot(chain)
    code, _ = refused("getBalance", address, {"minContextSlot": tip})
    assert code == -32016
    with pytest.raises(RpcError) as behind:
        chain.rpc("getAccountInfo", address, {"minContextSlot": tip})
    assert behind.value.data["contextSlot"] <= tip - FINALITY_SLOTS
    assert chain.rpc("getBalance", address, {"minContextSlot": tip, **CONFIRMED})["value"] > 0


def test_simulation_runs_against_the_bank_of_its_commitment(drop_in: Chain) -> None:
    """simulateTransaction and preflight read `finalized` by default: a fee payer funded
    since is not there, a transaction landed since is not a duplicate there yet."""
    chain = drop_in
    payer = chain.funded_keypair(10**9)
    finalized_blockhash = Hash.from_string(chain.rpc("getLatestBlockhash")["value"]["blockhash"])
    ix = transfer(
        TransferParams(from_pubkey=payer.pubkey(), to_pubkey=Pubkey.new_unique(), lamports=10**6)
    )
    tx = VersionedTransaction(
        MessageV0.try_compile(payer.pubkey(), [ix], [], finalized_blockhash), [payer]
    )
    wire = base64.b64encode(bytes(tx)).decode()

    def simulated(config: dict[str, Any] | None = None) -> Any:
        config = {"encoding": "base64", **(config or {})}
        return chain.rpc("simulateTransaction", wire, config)["value"]

    assert simulated()["err"] == "AccountNotFound"
    assert simulated(FINALIZED)["err"] == "AccountNotFound"
    assert simulated(CONFIRMED)["err"] is None
    with pytest.raises(RpcError) as refused:
        chain.rpc("sendTransaction", wire, {"encoding": "base64"})
    assert refused.value.data["err"] == "AccountNotFound"
    assert balance(chain, payer.pubkey(), CONFIRMED) == 10**9  # simulation left it as it was

    finalize_all(chain)
    assert simulated()["err"] is None
    sig = chain.rpc("sendTransaction", wire, {"encoding": "base64"})  # preflight passes now
    assert status(chain, sig)["confirmationStatus"] == "confirmed"
    assert simulated(CONFIRMED)["err"] == "AlreadyProcessed"
    assert simulated()["err"] is None  # the finalized bank has not seen it yet
    finalize_all(chain)
    assert simulated()["err"] == "AlreadyProcessed"


def test_history_bounds_not_yet_finalized_are_unknown_at_finalized(drop_in: Chain) -> None:
    chain = drop_in
    receiver = Pubkey.new_unique()
    ix = transfer(
        TransferParams(from_pubkey=chain.payer.pubkey(), to_pubkey=receiver, lamports=10**6)
    )
    sig = chain.send_ok([ix], [chain.payer]).signature
    for bound in ("before", "until"):
        with pytest.raises(RpcError) as unknown:
            chain.rpc("getSignaturesForAddress", str(receiver), {bound: sig})
        assert unknown.value.code == -32020
        assert chain.rpc("getSignaturesForAddress", str(receiver), {bound: sig, **CONFIRMED}) == []
    finalize_all(chain)
    assert chain.rpc("getSignaturesForAddress", str(receiver), {"before": sig}) == []
