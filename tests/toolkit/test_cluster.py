"""The right cluster or nothing (issue 37, docs/adr/0038): a network named on the wire, in any
of its names, is compared with the genesis hash of the RPC node. A client refuses a 402 for
another cluster (svcpay's terms, x402's and MPP's) with one line naming both, before paying;
the facilitator refuses to start on a node of another cluster than SVCPAY_NETWORK, and takes
the node's when it is unset. A local validator is `solana-localnet` unless
SVCPAY_LOCALNET_AS presents it as a public network (the suite sets mainnet: tests/conftest.py)."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest
from solana.rpc.async_api import AsyncClient
from solders.keypair import Keypair
from solders.pubkey import Pubkey

from svcpay.client import PaymentAuth
from svcpay.localnet.process import Localnet
from svcpay.protocol.errors import WrongNetwork
from svcpay.rpc import cluster as cluster_module
from svcpay.rpc.cluster import LOCALNET, MAINNET, STAND_IN_ENV, Cluster, WrongCluster, canonical
from tests.cli.conftest import keyfile
from tests.support.chain import Chain

DEVNET_GENESIS = "EtWTRABZaYq6iMfeYKouRu166VU2xqa1wcaWoxPkrZBG"
MAINNET_GENESIS = "5eykt4UsFv8P8NJdTREpY1vzqKqZKvdpKuc147dw2N9d"
LOCAL_GENESIS = "9pYDFHcvm7gMQzvVzCm6yGVUbFTgv8n3uEEUnLxVL2xt"
MINT = str(Pubkey.new_unique())


def test_a_public_cluster_is_itself_under_every_name() -> None:
    devnet = Cluster.of(DEVNET_GENESIS, env={STAND_IN_ENV: "solana-mainnet"})  # ignored there
    for name in ("solana-devnet", "solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1", "devnet"):
        assert devnet.serves(name), name
    for name in ("solana-mainnet", "solana", "mainnet", "solana:localnet", "localnet", "eth"):
        assert not devnet.serves(name), name
    with pytest.raises(WrongCluster, match="solana-mainnet, but the RPC node is solana-devnet"):
        devnet.require("solana-mainnet", "the terms")
    assert Cluster.of(MAINNET_GENESIS, env={}).network == MAINNET


def test_a_local_validator_is_localnet_unless_presented_as_a_public_one() -> None:
    alone = Cluster.of(LOCAL_GENESIS, env={})
    assert (alone.name, alone.network, alone.local) == (LOCALNET, LOCALNET, True)
    assert alone.serves("solana:localnet") and alone.serves("localnet")
    assert not alone.serves("solana-devnet") and not alone.serves("solana-mainnet")
    assert STAND_IN_ENV in alone.hint("solana-devnet")
    as_mainnet = Cluster.of(LOCAL_GENESIS, env={STAND_IN_ENV: "mainnet-beta"})
    assert as_mainnet.network == MAINNET and as_mainnet.serves(
        "solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp"
    )
    assert as_mainnet.serves(LOCALNET) and not as_mainnet.serves("solana-devnet")
    with pytest.raises(WrongCluster, match=STAND_IN_ENV):
        Cluster.of(LOCAL_GENESIS, env={STAND_IN_ENV: "solana-localnet"})
    assert canonical("solana-devnet") == "solana-devnet" and canonical("bitcoin") is None


# -- clients ---------------------------------------------------------------------------------
def svcpay_402(network: str) -> httpx.Response:
    body = {
        "version": "1",
        "accepts": [
            {"scheme": "exact", "network": network, "token": MINT, "amount": "1000",
             "payTo": str(Pubkey.new_unique()), "memo": "m",
             "svc": {"facilitator": "http://facilitator.invalid"}},
        ],
    }  # fmt: skip
    return httpx.Response(402, json=body)


def x402_402(network: str) -> httpx.Response:
    required = {
        "x402Version": 2,
        "resource": {"url": "http://shop.invalid/paid"},
        "accepts": [
            {"scheme": "exact", "network": network, "asset": MINT, "amount": "1000",
             "payTo": str(Pubkey.new_unique()), "maxTimeoutSeconds": 60,
             "extra": {"feePayer": str(Pubkey.new_unique())}},
        ],
    }  # fmt: skip
    header = base64.b64encode(json.dumps(required).encode()).decode()
    return httpx.Response(402, headers={"PAYMENT-REQUIRED": header}, json={})


def mpp_402(network: str) -> httpx.Response:
    request = {
        "amount": "1000", "currency": MINT, "recipient": str(Pubkey.new_unique()),
        "methodDetails": {"network": network, "decimals": 6, "feePayer": False},
    }  # fmt: skip
    encoded = base64.urlsafe_b64encode(json.dumps(request).encode()).decode().rstrip("=")
    challenge = (
        f'Payment id="c1", realm="shop", method="solana", intent="charge", '
        f'request="{encoded}", expires="2999-01-01T00:00:00Z"'
    )
    return httpx.Response(402, headers={"WWW-Authenticate": challenge})


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("reply", "protocol"),
    [(svcpay_402, "svcpay"), (x402_402, "x402"), (mpp_402, "mpp")],
    ids=["svcpay", "x402", "mpp"],
)
@pytest.mark.parametrize(
    ("stand_in", "asked"),
    [("solana-mainnet", "solana-devnet"), (None, "solana-mainnet")],
    ids=["devnet-on-local-as-mainnet", "mainnet-on-plain-local"],
)
async def test_a_client_refuses_a_402_for_another_cluster_before_paying(
    validator: Localnet,
    monkeypatch: pytest.MonkeyPatch,
    reply: object,
    protocol: str,
    stand_in: str | None,
    asked: str,
) -> None:
    if stand_in is None:
        monkeypatch.delenv(STAND_IN_ENV, raising=False)
    else:
        monkeypatch.setenv(STAND_IN_ENV, stand_in)
    network = {"svcpay": asked, "x402": _caip2(asked), "mpp": asked.removeprefix("solana-")}
    calls: list[str] = []

    def shop(request: httpx.Request) -> httpx.Response:
        calls.append(request.headers.get("authorization") or request.headers.get("x-payment") or "")
        return reply(network[protocol])  # type: ignore[operator,no-any-return]

    async with AsyncClient(validator.url) as rpc:
        auth = PaymentAuth(Keypair(), rpc=rpc, max_per_request=10**6, protocols=(protocol,))
        async with httpx.AsyncClient(transport=httpx.MockTransport(shop), auth=auth) as http:
            with pytest.raises(WrongNetwork) as refused:
                await http.get("http://shop.invalid/paid")
    message = str(refused.value)
    assert "\n" not in message and "a local validator" in message, message
    assert network[protocol] in message or asked in message, message
    assert calls == [""]  # one unpaid request, nothing signed or sent


def _caip2(name: str) -> str:
    return {"solana-devnet": "solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1",
            "solana-mainnet": "solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp"}[name]  # fmt: skip


# -- the facilitator -------------------------------------------------------------------------
def serve(validator: Localnet, chain: Chain, tmp_path: Path, **env: str) -> subprocess.Popen[str]:
    key = keyfile(tmp_path, chain.funded_keypair())
    full = {
        **{k: v for k, v in os.environ.items() if k not in ("SVCPAY_NETWORK", STAND_IN_ENV)},
        "SVCPAY_RPC_URL": validator.url,
        "SVCPAY_FACILITATOR_KEYPAIR": key,
        "SVCPAY_DATABASE_URL": f"sqlite:///{tmp_path / 'f.db'}",
        "SVCPAY_CRANK_INTERVAL_SECS": "0",
        **env,
    }
    argv = [sys.executable, "-m", "svcpay.cli", "facilitator", "serve", "--port", "0"]
    pipe = subprocess.PIPE
    return subprocess.Popen(argv, env=full, stdout=pipe, stderr=pipe, text=True)


def test_the_facilitator_refuses_to_start_on_another_cluster(
    validator: Localnet, chain: Chain, tmp_path: Path
) -> None:
    proc = serve(validator, chain, tmp_path, SVCPAY_NETWORK="solana-devnet")
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and out == "", err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert "solana-devnet" in err and "a local validator" in err and STAND_IN_ENV in err, err


DEVNET_CAIP2 = "solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1"


@pytest.mark.parametrize(("env", "x402_network"), [
    ({}, "solana:localnet"),
    ({STAND_IN_ENV: "solana-devnet"}, DEVNET_CAIP2),
    ({STAND_IN_ENV: "solana-devnet", "SVCPAY_NETWORK": "devnet"}, DEVNET_CAIP2),
])  # fmt: skip
def test_the_facilitator_takes_the_nodes_cluster_when_none_is_set(
    validator: Localnet, chain: Chain, tmp_path: Path, env: dict[str, str], x402_network: str
) -> None:
    proc = serve(validator, chain, tmp_path, **env)
    try:
        assert proc.stdout is not None
        ready = proc.stdout.readline()
        assert ready.startswith("svcpay facilitator ready"), proc.stderr
        url = ready.split()[3]
        kinds = httpx.get(f"{url}/supported").json()["kinds"]
        assert {k["network"] for k in kinds if k["x402Version"] == 2} == {x402_network}
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(20)
    assert proc.returncode == 0


# -- what a paying client remembers ----------------------------------------------------------
def counting(rpc: AsyncClient, calls: Counter[str]) -> AsyncClient:
    """`rpc`, counting the calls a paying client makes before it signs."""
    for name in ("get_genesis_hash", "get_account_info", "get_recent_prioritization_fees"):
        method = getattr(rpc, name)

        async def counted(*args: Any, _method: Any = method, _name: str = name, **kw: Any) -> Any:
            calls[_name] += 1
            return await _method(*args, **kw)

        setattr(rpc, name, counted)
    return rpc


def x402_shop(mint: str, network: str, paid: list[str]) -> httpx.MockTransport:
    """A shop asking for an x402 payment in `mint` on `network`, to one payee with one fee
    payer, serving each one."""
    pay_to, fee_payer = str(Pubkey.new_unique()), str(Pubkey.new_unique())

    def shop(request: httpx.Request) -> httpx.Response:
        if payment := request.headers.get("payment-signature"):
            paid.append(payment)
            return httpx.Response(200, json={"ok": True})
        reply = x402_402(network)
        required = json.loads(base64.b64decode(reply.headers["payment-required"]))
        required["accepts"][0] |= {"asset": mint, "payTo": pay_to}
        required["accepts"][0]["extra"]["feePayer"] = fee_payer
        header = base64.b64encode(json.dumps(required).encode()).decode()
        return httpx.Response(402, headers={"PAYMENT-REQUIRED": header}, json={})

    return httpx.MockTransport(shop)


@pytest.mark.anyio
async def test_clients_made_per_payment_read_the_cluster_and_the_mint_once(
    validator: Localnet, chain: Chain
) -> None:
    """One-shot payers, each with its own PaymentAuth and RPC client on one endpoint (as an
    agent making a client per task does): the genesis hash, the mint and the fee estimate
    are read once for all of them, not once a payment (issue 37's RPC calls a payment)."""
    paid: list[str] = []
    shop = x402_shop(str(chain.create_mint()), "solana-mainnet", paid)
    calls: Counter[str] = Counter()
    for _ in range(3):
        async with counting(AsyncClient(validator.url), calls) as rpc:
            auth = PaymentAuth(Keypair(), rpc=rpc, max_per_request=10**6, protocols=("x402",))
            async with httpx.AsyncClient(transport=shop, auth=auth) as http:
                assert (await http.get("http://shop.invalid/paid")).status_code == 200
    assert len(set(paid)) == 3  # three payments, each signed
    assert calls["get_account_info"] == 1, calls  # the mint: new to this test, read once
    assert calls["get_genesis_hash"] <= 1, calls  # once per process (maybe by another test)
    assert calls["get_recent_prioritization_fees"] == 1, calls  # new payee: asked, once


@pytest.mark.anyio
async def test_a_remembered_cluster_is_asked_again_before_a_refusal(
    validator: Localnet, chain: Chain, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A genesis hash remembered for the endpoint that names another cluster (the URL now
    reaches another node) is read again before the client refuses: it pays."""
    monkeypatch.setitem(cluster_module._GENESIS, validator.url, DEVNET_GENESIS)
    paid: list[str] = []
    shop = x402_shop(str(chain.create_mint()), "solana-mainnet", paid)
    async with AsyncClient(validator.url) as rpc:
        auth = PaymentAuth(Keypair(), rpc=rpc, max_per_request=10**6, protocols=("x402",))
        async with httpx.AsyncClient(transport=shop, auth=auth) as http:
            assert (await http.get("http://shop.invalid/paid")).status_code == 200
    assert len(paid) == 1
    assert cluster_module._GENESIS[validator.url] != DEVNET_GENESIS  # read again
