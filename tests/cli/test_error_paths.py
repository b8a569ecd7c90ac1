"""Every error a user can cause or meet is one line on stderr saying what failed and what to
do, with the documented exit code, in text and --json mode; never a traceback (issue 17).

`offline_cli` itself fails on a `Traceback` or on more than one line on stderr."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from solders.keypair import Keypair

from tests.cli.conftest import Cli, free_port, keyfile


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


def error_paths(tmp: Path, busy: int) -> list[tuple[tuple[str, ...], int, str]]:
    """(argv, exit code, words the line must hold)."""
    key = keyfile(tmp, Keypair())
    bad = tmp / "bad.json"
    bad.write_text("[1, 2]")
    dead = f"http://127.0.0.1:{free_port()}"
    dead_pg = f"postgresql://svcpay@127.0.0.1:{free_port()}/svcpay"
    db = f"sqlite:///{tmp / 'f.db'}"
    nothing = str(Keypair().pubkey())
    return [
        # arguments
        (("keys", "airdrop", "1000000000000", "-k", key, "-u", dead), 2, "out of range"),
        (("keys", "airdrop", "1e3", "-k", key, "-u", dead), 2, "exponents (1e3)"),
        (("token", "mint", nothing, "-1u", "-k", key, "-u", dead), 2, "must be positive"),
        (("keys", "airdrop", "-1", "-k", key), 2, "not an amount"),
        (("plan", "show", nothing, "-u", "mainnet"), 2, "not an RPC URL or moniker"),
        (("facilitator", "serve", "--port", "70000", "--database", db, "-k", key), 2,
         "not a port"),
        (("token", "create-mint", "--decimals", "12", "-k", key, "-u", dead), 2, "0 to 9"),
        # files and directories
        (("keys", "show", "-k", str(tmp / "missing.json")), 2, "svcpay keys create"),
        (("keys", "show", "-k", str(bad)), 2, "64 bytes"),
        (("keys", "show", "-k", str(tmp)), 2, "not a JSON keypair file"),
        (("keys", "create", "-o", "/proc/svcpay-no/id.json"), 1, "--outfile"),
        (("program", "deploy", str(tmp / "none.so"), "-k", key, "-u", dead), 2,
         "build the program"),
        (("analytics", "--chart", str(tmp / "no" / "c.png"), "--database", db), 2,
         "does not exist"),
        (("facilitator", "migrate", "--database", "sqlite:////proc/svcpay-no/f.db"), 1,
         "check the path"),
        (("demo", "--out", key), 2, "give a directory"),
        (("example", "serve", "--pay-to", nothing, "--mint", nothing, "--plan", nothing,
          "-k", str(tmp / "missing.json"), "-u", dead), 2, "svcpay keys create"),
        # an unreachable RPC
        (("plan", "show", nothing, "-u", dead), 1, "cannot reach RPC"),
        (("plan", "list", "-u", dead), 1, "cannot reach RPC"),
        (("subscription", "show", nothing, "-u", dead), 1, "cannot reach RPC"),
        (("program", "show", "-u", dead), 1, "cannot reach RPC"),
        (("keys", "airdrop", "1", "-k", key, "-u", dead), 1, "cannot reach RPC"),
        (("token", "balance", nothing, "-k", key, "-u", dead), 1, "cannot reach RPC"),
        (("facilitator", "crank", "--database", db, "-k", key, "-u", dead), 1,
         "cannot reach RPC"),
        (("example", "serve", "--pay-to", nothing, "--mint", nothing, "--plan", nothing,
          "-k", key, "-u", dead, "--facilitator", dead), 2,
         "cannot read the genesis hash"),  # which cluster comes first (docs/adr/0038)
        # an unreachable database
        (("facilitator", "migrate", "--database", dead_pg), 1, "database server runs"),
        (("facilitator", "provider", "list", "--database", dead_pg), 1, "database server runs"),
        (("analytics", "--database", dead_pg), 1, "database server runs"),
        (("facilitator", "serve", "--database", dead_pg, "-k", key, "--port", "0"), 1,
         "database server runs"),
        # a port in use
        (("facilitator", "serve", "--port", str(busy), "--database", db, "-k", key), 1,
         f"port {busy} on 127.0.0.1 is already in use"),
    ]  # fmt: skip


def test_every_error_path_is_one_line_with_its_code(
    offline_cli: Cli, tmp_path: Path, busy_port: int
) -> None:
    paths = error_paths(tmp_path, busy_port)
    for argv, code, words in paths:
        text = offline_cli(*argv)
        assert (text.code, words in text.err) == (code, True), (argv, text.err)
        assert text.err.startswith("svcpay") and "unexpected" not in text.err, text.err
        assert text.out == "", argv
        jsoned = offline_cli(*argv, "--json")
        assert (jsoned.code, jsoned.json["exitCode"]) == (code, code), argv
        assert words in jsoned.json["message"] or code == 2 and words in jsoned.err, argv
    assert len(paths) >= 25


def test_migrate_works_from_any_directory_with_a_fresh_home(
    offline_cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    monkeypatch.delenv("SVCPAY_DATABASE_URL", raising=False)
    expected = tmp_path / "home" / ".local" / "share" / "svcpay" / "facilitator.db"
    for cwd in ("a", "b"):
        (tmp_path / cwd).mkdir()
        monkeypatch.chdir(tmp_path / cwd)
        migrated = offline_cli.ok("facilitator", "migrate")
        assert migrated["database"] == f"sqlite:///{expected}"
    assert expected.is_file() and migrated["from"] == migrated["to"]  # the same database
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert offline_cli.ok("facilitator", "migrate")["database"] == (
        f"sqlite:///{tmp_path / 'xdg' / 'svcpay' / 'facilitator.db'}"
    )
    relative = offline_cli.ok("facilitator", "migrate", "--database", "sqlite:///rel/f.db")
    assert relative["database"] == f"sqlite:///{tmp_path / 'b' / 'rel' / 'f.db'}"
