"""`svcpay facilitator serve|migrate|provider|crank` and `svcpay analytics`: the operator's
commands, against the session's validator and a real facilitator process."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from solders.keypair import Keypair

from svcpay.facilitator.store import Event, Store, new_id
from svcpay.localnet.process import Localnet
from svcpay.program import instructions, pda
from svcpay.protocol.stablecoins import mint_of
from tests.cli.conftest import Cli, free_port, keyfile
from tests.support.billing import USDC, create_plan_ix
from tests.support.chain import Chain
from tests.support.clock import Clock


def test_migrate_then_provider_create_prints_a_working_key_once(
    offline_cli: Cli, tmp_path: Path
) -> None:
    db = f"sqlite:///{tmp_path / 'f.db'}"
    migrated = offline_cli.ok("facilitator", "migrate", "--database", db)
    assert (migrated["from"], migrated["to"]) == (None, "0007")
    plan = str(Keypair().pubkey())

    made = offline_cli.ok(
        "facilitator", "provider", "create", "acme", "--plan", plan, "--database", db, "--no-check"
    )

    assert made["apiKey"].startswith("svc_") and made["name"] == "acme"
    added = offline_cli.ok(
        "facilitator",
        "provider",
        "add",
        made["provider"],
        "--pay-to",
        str(Keypair().pubkey()),  # an address of its own (not the plan's with a digit changed)
        "--database",
        db,
        "--no-check",
    )
    assert {r["kind"] for r in added["resources"]} == {"plan", "payTo"}
    missing = offline_cli(
        "facilitator",
        "provider",
        "add",
        "prov_nope",
        "--plan",
        plan,
        "--database",
        db,
        "--no-check",
    )
    assert missing.code == 3 and "no provider" in missing.err


def test_bad_configuration_is_a_usage_error_with_the_fix(offline_cli: Cli, tmp_path: Path) -> None:
    bad_db = offline_cli("facilitator", "migrate", "--database", "mysql://x/y")
    assert bad_db.code == 2 and "unsupported database" in bad_db.err
    no_key = offline_cli("facilitator", "crank", "--database", f"sqlite:///{tmp_path / 'f.db'}")
    assert no_key.code == 2 and "svcpay keys create" in no_key.err
    bad_range = offline_cli(
        "analytics", "--from", "yesterday", "--database", f"sqlite:///{tmp_path / 'f.db'}"
    )
    assert bad_range.code == 2


def test_serve_says_what_is_wrong_with_its_settings_before_it_starts(
    offline_cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = keyfile(tmp_path, Keypair(), "facilitator.json")
    monkeypatch.setenv("SVCPAY_FACILITATOR_KEYPAIR", key)
    db = f"sqlite:///{tmp_path / 'f.db'}"
    monkeypatch.setenv("SVCPAY_RPC_RATE", "fast")
    rate = offline_cli("facilitator", "serve", "--database", db, "--port", "0")
    assert rate.code == 2 and "SVCPAY_RPC_RATE must be a number, not 'fast'" in rate.err
    monkeypatch.delenv("SVCPAY_RPC_RATE")
    dead = f"http://127.0.0.1:{free_port()}"
    down = offline_cli("facilitator", "serve", "--database", db, "--port", "0", "--url", dead)
    assert down.code == 2, down.err
    assert f"cannot reach {dead} (ConnectError" in down.err and "SVCPAY_NETWORK" in down.err
    assert "GetGenesisHash" not in down.err  # solana-py's repr of its request class


def test_analytics_prints_a_table_and_writes_a_chart(offline_cli: Cli, tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'f.db'}"
    chart = tmp_path / "chart.png"
    report = offline_cli.ok("analytics", "--database", db, "--chart", str(chart))
    assert report["totals"]["volume"] == "0" and len(report["days"]) >= 30
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    human = offline_cli("analytics", "--database", db)
    assert human.code == 0 and "recurring revenue" in human.out


def test_analytics_reports_one_mint_and_names_the_others(offline_cli: Cli, tmp_path: Path) -> None:
    """Amounts of different mints are never added (docs/adr/0044): `--mint` picks one, by
    address or symbol; the others are listed apart."""
    db = f"sqlite:///{tmp_path / 'f.db'}"
    usdc, pyusd = mint_of("USDC", "solana-mainnet"), mint_of("PYUSD", "solana-mainnet")

    async def seed() -> None:
        store = Store.open(db)
        try:
            now = int(time.time())
            for mint, amount in ((usdc, 1_000_000), (pyusd, 2_000_000), (pyusd, 3_000_000)):
                data = {"payTo": "PayTo", "amount": str(amount), "token": mint}
                await store.events.add(Event(new_id("evt"), "payment.settled", now, data,
                                             mode="one-time", amount=amount))  # fmt: skip
        finally:
            await store.close()

    asyncio.run(seed())
    default = offline_cli.ok("analytics", "--database", db)
    assert (default["mint"], default["totals"]["volume"]) == (pyusd, "5000000")
    chosen = offline_cli.ok("analytics", "--database", db, "--mint", "usdc")
    assert (chosen["mint"], chosen["totals"]["volume"]) == (usdc, "1000000")
    human = offline_cli("analytics", "--database", db, "--mint", str(usdc))
    assert human.code == 0 and f"in {usdc} (USDC)" in human.out
    assert f"also paid in {pyusd} (PYUSD)" in human.out and "5000000 in 2 payments" in human.out
    absent = offline_cli("analytics", "--database", db, "--mint", "USDT")
    assert absent.code == 2 and "no payment or subscription in USDT" in absent.err
    bad = offline_cli("analytics", "--database", db, "--mint", "dollars")
    assert bad.code == 2 and "not a base58 Solana address" in bad.err


def test_serve_runs_the_api_until_interrupted(
    validator: Localnet, chain: Chain, tmp_path: Path
) -> None:
    key = keyfile(tmp_path, chain.funded_keypair())
    env = {
        **os.environ,
        "SVCPAY_RPC_URL": validator.url,
        "SVCPAY_FACILITATOR_KEYPAIR": key,
        "SVCPAY_DATABASE_URL": f"sqlite:///{tmp_path / 'f.db'}",
        "SVCPAY_CRANK_INTERVAL_SECS": "0",
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "svcpay.cli", "facilitator", "serve", "--port", "0"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        ready = proc.stdout.readline()
        assert ready.startswith("svcpay facilitator ready http://127.0.0.1:"), proc.stderr
        url = ready.split()[3]
        supported = httpx.get(f"{url}/supported").json()
        assert supported["facilitatorKey"] == Path(key).stem
        assert httpx.get(f"{url}/openapi.json").json()["openapi"].startswith("3.")
        assert httpx.post(f"{url}/v1/usage", json={}).status_code == 401
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(20)
    assert proc.returncode == 0


def test_crank_collects_the_registered_plans_due_subscriptions(
    cli: Cli, chain: Chain, clock: Clock, tmp_path: Path
) -> None:
    facilitator, provider = chain.funded_keypair(), chain.funded_keypair()
    mint = chain.create_mint()
    destination = chain.token_account(provider.pubkey(), mint)
    period = clock.days(3)
    ix = create_plan_ix(provider.pubkey(), 5, mint, destination, facilitator.pubkey(), USDC, period)
    chain.send_ok([ix], [provider])
    plan = pda.plan_address(provider.pubkey(), 5)
    for _ in range(3):
        kp = chain.funded_keypair()
        wallet = chain.token_account(kp.pubkey(), mint, 2 * USDC)
        chain.send_ok([instructions.subscribe(plan, kp.pubkey(), wallet, mint, destination)], [kp])
    db = f"sqlite:///{tmp_path / 'f.db'}"
    cli.ok("facilitator", "provider", "create", "acme", "--plan", str(plan), "--database", db)
    clock.advance(period)

    run = cli("facilitator", "crank", "--database", db, "--json",
              "--keypair", keyfile(tmp_path, facilitator))  # fmt: skip

    assert run.code == 0, run.err
    assert (run.json["due"], run.json["renewed"]) == (3, 3)
    assert run.json["collected"] == str(3 * USDC)
    assert "billing run: 3/3 due subscriptions handled" in run.err  # progress
    assert int(chain.token_state(destination)["amount"]) == 6 * USDC


def test_provider_list_and_revoke(offline_cli: Cli, tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'f.db'}"
    assert "no providers" in offline_cli("facilitator", "provider", "list", "--database", db).out
    pay_to = str(Keypair().pubkey())
    made = offline_cli.ok("facilitator", "provider", "create", "acme", "--pay-to", pay_to,
                          "--database", db, "--no-check")  # fmt: skip
    listed = offline_cli.ok("facilitator", "provider", "list", "--database", db)["providers"]
    assert [(p["id"], p["name"]) for p in listed] == [(made["provider"], "acme")]
    assert listed[0]["resources"] == [{"kind": "payTo", "address": pay_to}]
    assert [k["id"] for k in listed[0]["keys"]] == [made["keyId"]]
    shown = offline_cli("facilitator", "provider", "list", "--database", db).out
    assert made["apiKey"] not in shown
    assert f"key    {made['keyId']}  -  live" in shown  # the id `revoke --key` takes

    revoked = offline_cli.ok("facilitator", "provider", "revoke", "acme", "--database", db)
    assert revoked["revoked"] == 1  # by its name, as the guide shows
    listed = offline_cli.ok("facilitator", "provider", "list", "--database", db)["providers"]
    assert listed[0]["keys"][0]["revokedAt"] is not None
    again = offline_cli(
        "facilitator", "provider", "revoke", "--key", made["keyId"], "--database", db
    )
    assert again.code == 3 and "no live API key" in again.err
    nobody = offline_cli("facilitator", "provider", "revoke", "prov_nope", "--database", db)
    assert nobody.code == 3
    other = offline_cli.ok("facilitator", "provider", "create", "acme", "--pay-to", pay_to,
                           "--database", db, "--no-check")  # fmt: skip
    two = offline_cli("facilitator", "provider", "revoke", "acme", "--database", db)
    assert two.code == 2 and made["provider"] in two.err and other["provider"] in two.err
    by_id = offline_cli.ok("facilitator", "provider", "revoke", other["provider"], "--database", db)
    assert by_id["revoked"] == 1


def test_provider_accounts_are_checked_against_the_chain(
    cli: Cli, chain: Chain, tmp_path: Path
) -> None:
    db = f"sqlite:///{tmp_path / 'f.db'}"
    mint = chain.create_mint()
    account = chain.token_account(Keypair().pubkey(), mint)
    as_plan = cli("facilitator", "provider", "create", "acme", "--plan", str(account),
                  "--database", db)  # fmt: skip
    assert as_plan.code == 3 and f"no plan at {account}" in as_plan.err
    as_pay_to = cli("facilitator", "provider", "create", "acme", "--pay-to", str(mint),
                    "--database", db)  # fmt: skip
    assert as_pay_to.code == 3 and f"--pay-to {mint} is a mint" in as_pay_to.err
    ok = cli.ok("facilitator", "provider", "create", "acme", "--pay-to", str(account),
                "--database", db)  # fmt: skip
    assert ok["name"] == "acme"


def test_plan_create_refuses_a_destination_of_another_mint(
    cli: Cli, chain: Chain, tmp_path: Path
) -> None:
    provider = chain.funded_keypair()
    mint, other = chain.create_mint(), chain.create_mint()
    wrong = chain.token_account(provider.pubkey(), other)
    key = keyfile(tmp_path, provider)
    result = cli("plan", "create", "--plan-id", "1", "--mint", str(mint), "--amount", "1",
                 "--period", "30d", "--destination", str(wrong),
                 "-k", key)  # fmt: skip
    assert result.code == 2 and f"holds mint {other}, not {mint}" in result.err
    swapped = cli("plan", "create", "--plan-id", "1", "--mint", str(wrong), "--amount", "1",
                  "--period", "30d", "--destination", str(mint),
                  "-k", key)  # fmt: skip
    assert swapped.code == 3 and "not an SPL Token mint" in swapped.err
