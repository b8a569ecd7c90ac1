"""`svcpay example serve` as a newcomer runs it: a subprocess, its flags, its environment. A
Token-2022 mint with a transfer fee is served (issue 38), and the variables it has no flag
for (SVCPAY_FACILITATOR_API_KEY, ...) are read from the environment."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from pathlib import Path

import httpx
import pytest
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from starlette.types import ASGIApp

from svcpay.cli import build_parser, example
from svcpay.cli._common import UsageError
from svcpay.keys import save_keypair
from svcpay.localnet.process import Localnet
from svcpay.protocol.programs import TOKEN_2022_PROGRAM
from svcpay.protocol.stablecoins import mint_of
from tests.cli.conftest import Cli, keyfile, serve
from tests.support.billing import DAY, TOKEN_2022, USDC, Billing
from tests.support.chain import Chain
from tests.support.facilitator import in_process_facilitator, proxy
from tests.support.processes import Processes
from tests.support.token2022 import t22_mint

FEE_BPS, MAX_FEE = 100, USDC // 2  # 1%, at most 0.50 a transfer


@contextmanager
def example_serve(argv: list[str], env: dict[str, str]) -> Iterator[tuple[str, list[str]]]:
    """`svcpay example serve ARGV --port 0` in a subprocess: yields its URL once it printed
    its ready line, and a list that holds its stderr once it was stopped (SIGINT)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "svcpay", "example", "serve", *argv, "--port", "0"],
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    err: list[str] = []
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 60
        line = ""
        while not line and proc.poll() is None and time.monotonic() < deadline:
            if select.select([proc.stdout], [], [], 0.5)[0]:
                line = proc.stdout.readline()
        if not line.startswith("svcpay example API ready http://127.0.0.1:"):
            proc.kill()
            raise AssertionError(f"no ready line: {line!r}, {proc.communicate(timeout=30)}")
        yield line.split()[-1], err
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        _, text = proc.communicate(timeout=30)
        err.append(text)
    assert proc.returncode == 0, err


def facilitator_app(
    validator: Localnet, chain: Chain, pay_to: Pubkey
) -> Callable[[], AbstractAsyncContextManager[ASGIApp]]:
    """svcpay's facilitator, in process, settling payments to `pay_to`: for `serve`."""

    @asynccontextmanager
    async def app() -> AsyncIterator[ASGIApp]:
        async with in_process_facilitator(
            validator.url, chain.funded_keypair(), pay_to=[pay_to]
        ) as facilitator:
            yield proxy(facilitator.http)

    return app


def test_a_transfer_fee_mint_is_served_and_the_api_key_read_from_the_environment(
    cli: Cli, validator: Localnet, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SVCPAY_LOCALNET_AS", "solana-mainnet")  # the example's network
    chain = Chain(validator.url, validator.can_time_travel)
    mint = t22_mint(chain, 6, transfer_fee=(FEE_BPS, MAX_FEE))
    plan = Billing(chain, TOKEN_2022).plan(amount=3 * USDC, period_secs=30 * DAY, mint=mint)
    authority = keyfile(tmp_path, plan.billing_authority, "authority.json")
    wallet = chain.funded_keypair()
    account = chain.token_account(wallet.pubkey(), mint, 5 * USDC, program_id=TOKEN_2022_PROGRAM)

    argv = ["--pay-to", str(plan.destination), "--mint", str(mint), "--plan",
            str(plan.address), "-k", authority, "-u", validator.url, "--state-db",
            str(tmp_path / "api.db")]  # fmt: skip
    with (
        serve(facilitator_app(validator, chain, plan.destination)) as facilitator_url,
        example_serve(
            [*argv, "--facilitator", facilitator_url],
            {"SVCPAY_FACILITATOR_API_KEY": "sk_not_checked_until_a_voucher_is_reported"},
        ) as (api, err),
    ):
        unpaid = httpx.get(f"{api}/v1/data")
        # A 402 offering each way to pay, x402's too: not a 500 for the Token-2022 mint.
        assert unpaid.status_code == 402, unpaid.text
        assert unpaid.json()["accepts"][0]["token"] == str(mint)
        assert "PAYMENT-REQUIRED" in unpaid.headers

        paid = cli("pay", f"{api}/v1/data", "--keypair", keyfile(tmp_path, wallet))
        assert paid.code == 0, paid.err
        assert '"data": "the data"' in paid.out
    left = 5 * USDC - chain.token_state(account)["amount"]
    assert left > USDC // 2  # the price, and its fee
    # What left the wallet is what `svcpay pay` says it paid, with the fee named.
    sent, fee = left / USDC, (left - USDC // 2) / USDC
    said = f"paid {sent:g} (the payee receives 0.50; the mint withheld a fee of {fee:g})"
    assert said in paid.out, paid.out
    assert "SVCPAY_FACILITATOR_API_KEY is not set" not in err[0], err[0]


def test_the_environment_fills_what_has_no_flag(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = keyfile(tmp_path, Keypair())
    anyone = str(Keypair().pubkey())
    args = build_parser().parse_args(
        ["example", "serve", "--pay-to", anyone, "--mint", anyone, "--plan", anyone, "-k", key]
    )
    args.url = "http://127.0.0.1:8899"
    assert example.settings_of(args).facilitator_api_key is None
    owner = str(Keypair().pubkey())
    monkeypatch.setenv("SVCPAY_FACILITATOR_API_KEY", "sk_test")
    monkeypatch.setenv("SVCPAY_MEMO_SECRET", "m" * 16)
    monkeypatch.setenv("SVCPAY_OWNER", owner)
    settings = example.settings_of(args)
    assert (settings.facilitator_api_key, settings.memo_secret, settings.owner) == (
        "sk_test",
        b"m" * 16,
        owner,
    )
    monkeypatch.setenv("SVCPAY_MEMO_SECRET", "short")
    with pytest.raises(UsageError, match="SVCPAY_MEMO_SECRET must be at least 16 bytes"):
        example.settings_of(args)


def test_mints_are_taken_by_symbol_on_the_nodes_cluster(
    validator: Localnet, tmp_path: Path
) -> None:
    """`--mint usdc --plan-mint PYUSD`: the addresses of the cluster the node at --url is
    on (a local validator holds mainnet's), and the paywall names the token."""
    key = keyfile(tmp_path, Keypair())
    anyone = str(Keypair().pubkey())
    argv = ["example", "serve", "--pay-to", anyone, "--plan", anyone, "-k", key]
    args = build_parser().parse_args([*argv, "--mint", "usdc", "--plan-mint", "PYUSD"])
    args.url = validator.url
    settings = example.settings_of(args)
    assert settings.mint == mint_of("USDC", "solana-mainnet")
    assert settings.plan_mint == mint_of("PYUSD", "solana-mainnet")
    assert settings.token_symbol == "USDC"
    usdt = build_parser().parse_args([*argv, "--mint", "USDT", "--token-symbol", "Tether"])
    usdt.url = validator.url
    assert example.settings_of(usdt).token_symbol == "Tether"  # as given
    with pytest.raises(SystemExit):  # argparse: exit 2, the symbols it knows listed
        build_parser().parse_args([*argv, "--mint", "dollars"])


def test_a_mint_the_prices_do_not_fit_stops_the_server_before_it_is_ready(
    offline_cli: Cli, validator: Localnet, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SVCPAY_FACILITATOR_KEY", str(Keypair().pubkey()))  # none is asked
    chain = Chain(validator.url, validator.can_time_travel)
    plan = Billing(chain).plan()
    two_decimals = chain.create_mint(2)
    key = str(save_keypair(plan.billing_authority, tmp_path / "authority.json"))
    done = offline_cli("example", "serve", "--pay-to", str(plan.destination), "--mint",
                       str(two_decimals), "--plan", str(plan.address), "--plan-mint",
                       str(plan.mint), "-k", key, "-u", validator.url, "--facilitator",
                       "http://127.0.0.1:1", "--port", "0")  # fmt: skip
    assert done.code == 2 and "has 2 decimals" in done.err, done.err
    assert "ready" not in done.out


def test_it_starts_through_an_rpc_provider_that_answers_429s(
    validator: Localnet, processes: Processes, tmp_path: Path
) -> None:
    """Its start-up reads (the node's cluster, the mint) wait out a provider's 429s rather
    than exit with a configuration error (issue 37: it exited twice a run under throttling)."""
    chain = Chain(validator.url, validator.can_time_travel)
    plan = Billing(chain).plan(amount=3 * USDC, period_secs=30 * DAY)
    authority = keyfile(tmp_path, plan.billing_authority, "authority.json")
    flags = ("--throttle", "0.6", "--seed", "11")
    rpc = processes.start(
        "lossy rpc",
        [sys.executable, "-m", "svcpay.localnet.lossy", "--upstream", validator.url, *flags],
        "svcpay lossy-rpc ready ",
    )
    argv = ["--pay-to", str(plan.destination), "--mint", str(plan.mint), "--plan",
            str(plan.address), "-k", authority, "-u", rpc, "--state-db",
            str(tmp_path / "api.db")]  # fmt: skip
    with (
        serve(facilitator_app(validator, chain, plan.destination)) as facilitator_url,
        example_serve([*argv, "--facilitator", facilitator_url], {}) as (api, _),
    ):
        assert httpx.get(f"{api}/v1/data").status_code == 402
    stats = httpx.get(f"{rpc}/stats").json()
    assert stats["throttled"] > 0, stats  # it did meet 429s
