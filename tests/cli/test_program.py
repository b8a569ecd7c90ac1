"""`svcpay program deploy|upgrade|show`: the program reaches an empty validator through the
upgradeable loader's own transactions, resumes an interrupted buffer, is used, and is upgraded.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from solders.keypair import Keypair
from solders.system_program import CreateAccountParams, create_account

from svcpay.localnet.chain import CLOCK_SYSVAR
from svcpay.localnet.process import (
    PROGRAM_KEYPAIR,
    PROGRAM_SO,
    TEST_HOOK_SO,
    Localnet,
    localnet,
)
from svcpay.program import deploy
from svcpay.program.generated.program_id import PROGRAM_ID
from svcpay.rpc import connect
from tests.cli.conftest import Cli, keyfile
from tests.support.billing import USDC, Billing, deduct_ix
from tests.support.chain import TICKS_PER_SLOT, Chain
from tests.support.clock import Clock
from tests.support.processes import Processes


@pytest.fixture(autouse=True)
def _in_tmp(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Buffer keypairs go to ./.svcpay/buffers/: here, never the repository."""
    monkeypatch.chdir(tmp_path)


@pytest.fixture(scope="module")
def empty_validator() -> Iterator[Localnet]:
    """A validator of the session's kind with no svc_billing on it."""
    with localnet(program=None, ticks_per_slot=TICKS_PER_SLOT) as node:
        yield node


@pytest.fixture
def cluster_paced_validator() -> Iterator[Localnet]:
    """An empty validator with a real cluster's 400 ms slots: a blockhash lives about a
    minute, not the 15 s of the suite's fast slots, which a loaded machine's starved
    rebroadcasts can outlast (ADR 0034)."""
    with localnet(program=None) as node:
        yield node


@pytest.fixture
def empty_cli(capsys: pytest.CaptureFixture[str], empty_validator: Localnet) -> Cli:
    return Cli(capsys, empty_validator.url)


def write_some_chunks(chain: Chain, buffer: Keypair, elf: bytes, chunks: int) -> None:
    """An interrupted deploy: the buffer created and its first `chunks` chunks written."""
    payer = chain.payer
    size = deploy.BUFFER_HEADER + len(elf)
    create = create_account(
        CreateAccountParams(
            from_pubkey=payer.pubkey(),
            to_pubkey=buffer.pubkey(),
            lamports=chain.minimum_balance(size),
            space=size,
            owner=deploy.LOADER,
        )
    )
    chain.send_ok(
        [create, deploy.initialize_buffer(buffer.pubkey(), payer.pubkey())], [payer, buffer]
    )
    step = deploy.chunk_size(payer, payer)
    for offset in range(0, chunks * step, step):
        ix = deploy.write(buffer.pubkey(), payer.pubkey(), offset, elf[offset : offset + step])
        chain.send_ok([ix], [payer])


def patched(elf: bytes) -> bytes:
    """The same program with one letter of an error message changed: a new binary that
    still verifies and runs."""
    old = b"must lie between"
    assert old in elf
    return elf.replace(old, b"must lie betwixt", 1)


# First in the file: its validator of its own is stopped before `empty_validator` (the
# module's) starts, so the two never run at once beside the stage's shared one (cold
# run 9: three validators at once, load 76 on two cores).
@pytest.mark.anyio
async def test_a_deploy_through_an_rpc_that_drops_sends_lands_every_chunk_in_one_round(
    cluster_paced_validator: Localnet, processes: Processes
) -> None:
    """A real cluster's leaders drop sends: each chunk write is rebroadcast until it lands
    (svcpay.rpc.landing), so a third of them dropped costs no second round of writes, with
    a real cluster's blockhash lifetime."""
    node = cluster_paced_validator
    dropping = processes.lossy_rpc(node.url, "--drop-sends", "0.3", "--seed", "41")
    payer = Chain(node.url).funded_keypair(20 * 10**9)
    program, elf, said = Keypair(), TEST_HOOK_SO.read_bytes(), list[str]()  # 146 chunks
    rpc = connect(dropping)
    try:
        await deploy.deploy(rpc, payer, program, payer, elf, Keypair(), progress=said.append)
        info = await deploy.program_info(rpc, program.pubkey())
    finally:
        await rpc.close()
    assert info is not None and info.sha256 == hashlib.sha256(elf.rstrip(b"\0")).hexdigest()
    total = -(-len(elf) // deploy.chunk_size(payer, payer))
    assert f"buffer complete: {total} chunks of {deploy.chunk_size(payer, payer)} bytes" in said
    assert not [line for line in said if line.startswith("round ")], said
    dropped = httpx.get(f"{dropping}/stats").json()["dropped"]
    assert dropped >= total // 5, dropped  # the proxy did drop about a third of the sends


def test_deploy_resumes_a_buffer_then_the_program_runs_and_upgrades(
    empty_cli: Cli, empty_validator: Localnet, tmp_path: Path
) -> None:
    chain = Chain(empty_validator.url, empty_validator.can_time_travel)
    elf = PROGRAM_SO.read_bytes()
    payer = keyfile(tmp_path, chain.payer, "payer.json")
    buffer = Keypair()
    write_some_chunks(chain, buffer, elf, chunks=20)
    total = -(-len(elf) // deploy.chunk_size(chain.payer, chain.payer))

    deployed = empty_cli(
        "program", "deploy", str(PROGRAM_SO), "--program-keypair", str(PROGRAM_KEYPAIR),
        "--buffer", keyfile(tmp_path, buffer, "buffer.json"), "--keypair", payer, "--json",
    )  # fmt: skip

    assert deployed.code == 0, deployed.err
    assert "resuming" in deployed.err
    assert f"wrote {deploy.IN_FLIGHT}/{total} chunks" not in deployed.err  # 20 were there
    assert f"buffer complete: {total} chunks" in deployed.err  # progress shown
    assert not (tmp_path / "buffer.json").exists()  # consumed: nothing left to resume
    shown = empty_cli.ok("program", "show", "--program-id", str(PROGRAM_ID))
    assert shown == {k: v for k, v in deployed.json.items() if k != "signature"}
    assert shown["programId"] == str(PROGRAM_ID)
    assert shown["authority"] == str(chain.payer.pubkey())
    assert shown["sha256"] == hashlib.sha256(elf.rstrip(b"\0")).hexdigest()
    account = chain.account(PROGRAM_ID)
    assert account is not None and account.executable and account.owner == deploy.LOADER

    # The deployed program does its job: subscribe, collect a renewal, deduct usage.
    billing, clock = Billing(chain), Clock(chain)
    plan = billing.plan(amount=USDC, period_secs=clock.days(2), grace_secs=clock.days(1))
    sub = billing.subscriber(plan, balance=10 * USDC)
    assert billing.subscribe(plan, sub, max_overage=USDC).ok
    meter = plan.billing_authority
    assert chain.send_ok([deduct_ix(plan, sub, USDC // 4, meter.pubkey())], [meter]).ok
    clock.advance_to(billing.subscription(plan, sub).current_period_end)
    assert billing.collect(plan, sub, has_allowance=True).event("SubscriptionRenewed")
    assert billing.subscription(plan, sub).total_paid == 2 * USDC + USDC // 4  # + usage

    new = tmp_path / "svc_billing_v2.so"
    new.write_bytes(patched(elf))
    stranger = keyfile(tmp_path, chain.funded_keypair(), "stranger.json")
    refused = empty_cli("program", "upgrade", str(new), "--keypair", stranger)
    assert refused.code == 1 and "upgrade authority is" in refused.err
    same = empty_cli("program", "upgrade", str(PROGRAM_SO), "--keypair", payer)
    assert same.code == 1 and "already runs this binary" in same.err
    redeploy = empty_cli(
        "program", "deploy", str(PROGRAM_SO), "--program-keypair", str(PROGRAM_KEYPAIR),
        "--keypair", payer,
    )  # fmt: skip
    assert redeploy.code == 1 and "already deployed" in redeploy.err
    upgraded = empty_cli.ok("program", "upgrade", str(new), "--keypair", payer)
    assert upgraded["sha256"] == hashlib.sha256(new.read_bytes().rstrip(b"\0")).hexdigest()
    assert upgraded["lastDeploySlot"] > shown["lastDeploySlot"]
    again = billing.subscriber(plan, balance=10 * USDC)
    assert billing.subscribe(plan, again).ok  # the upgraded program runs


def test_deploy_refuses_what_would_break_or_leak(
    empty_cli: Cli, offline_cli: Cli, tmp_path: Path
) -> None:
    other = keyfile(tmp_path, Keypair(), "other-program.json")
    payer = keyfile(tmp_path, Keypair(), "payer.json")
    wrong_id = offline_cli(
        "program", "deploy", str(PROGRAM_SO), "--program-keypair", other, "--keypair", payer
    )
    assert wrong_id.code == 2 and "does not declare program id" in wrong_id.err

    public = offline_cli(
        "program", "deploy", str(PROGRAM_SO), "--program-keypair", str(PROGRAM_KEYPAIR),
        "--keypair", payer, "--url", "https://api.devnet.solana.com",
    )  # fmt: skip
    assert public.code == 2 and "public localnet program key" in public.err

    missing = offline_cli("program", "deploy", str(tmp_path / "nope.so"), "--keypair", payer)
    assert missing.code == 2 and "not found" in missing.err
    not_elf = tmp_path / "text.so"
    not_elf.write_text("hello")
    assert offline_cli("program", "upgrade", str(not_elf), "--keypair", payer).code == 2


def test_show_names_what_is_not_a_program(empty_cli: Cli) -> None:
    nothing = empty_cli("program", "show", "--program-id", str(Keypair().pubkey()))
    assert nothing.code == 3 and "no program at" in nothing.err
    clock = empty_cli("program", "show", "--program-id", str(CLOCK_SYSVAR))
    assert clock.code == 1 and "not a program of the upgradeable loader" in clock.err
