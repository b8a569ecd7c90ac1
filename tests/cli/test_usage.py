"""The command line itself: help everywhere, usage errors (exit 2), not found (exit 3),
an unreachable RPC (exit 1), one line on stderr and never a traceback."""

from __future__ import annotations

import argparse
import json
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from solders.keypair import Keypair

from svcpay.cli import build_parser, main
from svcpay.localnet import process
from tests.cli.conftest import Cli, free_port, keyfile
from tests.support.chain import Chain


def command_paths(
    parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()
) -> list[tuple[str, ...]]:
    paths = [prefix]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                paths += command_paths(sub, (*prefix, name))
    return paths


def test_every_command_has_help(offline_cli: Cli) -> None:
    paths = [p for p in command_paths(build_parser()) if p[:1] != ("localnet",)]
    assert ("plan", "create") in paths and ("subscription", "cancel") in paths
    assert ("pay",) in paths and ("keys", "show") in paths and ("subscribe",) in paths
    for path in paths:
        result = offline_cli(*path, "--help")
        assert result.code == 0, path
        assert result.out.startswith(f"usage: svcpay {' '.join(path)}".rstrip()), path
    top = offline_cli("--help").out
    assert "exit codes:" in top and "4  payment declined" in top and "localnet" in top


def test_the_help_names_the_example_apis_real_routes(offline_cli: Cli) -> None:
    from starlette.routing import Route

    from svcpay.examples.resource_server import router

    routes = {
        f"{method} {route.path}"
        for route in router.routes
        if isinstance(route, Route)
        for method in route.methods or ()
    }
    pay = offline_cli("pay", "--help").out
    examples = [line.split() for line in pay.splitlines() if "localhost:8000/" in line]
    assert len(examples) == 3
    for words in examples:  # svcpay pay URL ...: a GET, as none gives -X or -d
        assert not {"-X", "-d"} & set(words), words
        assert "GET " + words[2].split("localhost:8000", 1)[1] in routes, (words, routes)
    serve = " ".join(offline_cli("example", "serve", "--help").out.split())
    named = re.findall(r"\b(?:GET|POST) /v1/\w+", serve)
    assert len(named) >= 3 and set(named) <= routes, (named, routes)


def test_no_command_prints_help_and_a_group_alone_is_a_usage_error(offline_cli: Cli) -> None:
    assert main([]) == 0
    group = offline_cli("plan")
    assert group.code == 2 and "required" in group.err
    unknown = offline_cli("frobnicate")
    assert unknown.code == 2 and "invalid choice" in unknown.err


def test_localnet_is_handed_to_the_validator_unparsed(
    offline_cli: Cli, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Unparsed: the CLI's own parser would refuse --rpc-port (exit 2); the validator's
    # missing program stops it first, before it replaces the process.
    monkeypatch.setattr(process, "PROGRAM_SO", tmp_path / "missing.so")
    result = offline_cli("localnet", "--rpc-port", "8899")
    assert result.code == 1 and "run scripts/build-program" in result.err


@pytest.mark.parametrize("flag", ["--help", "-h", "--he"])
def test_localnet_help_needs_no_built_program(flag: str, tmp_path: Path) -> None:
    # In a process of its own: the validator replaces the process it starts in.
    script = (
        "import sys\n"
        "from pathlib import Path\n"
        "from svcpay.localnet import process\n"
        f"process.PROGRAM_SO = Path({str(tmp_path / 'missing.so')!r})\n"
        "from svcpay.cli import main\n"
        f"sys.exit(main(['localnet', {flag!r}]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: svcpay localnet") and "--rpc-port" in done.stdout
    assert "build-program" not in done.stdout + done.stderr


@pytest.mark.parametrize(
    ("option", "value", "complaint"),
    [
        ("--amount", "abc", "not an amount"),
        ("--amount", "-1", "the amount must be positive"),
        ("--amount", "-1u", "the amount must be positive"),
        ("--amount", "1e3", "exponents (1e3), nan and inf are not amounts"),
        ("--amount", "0", "greater than zero"),
        ("--amount", "12x", "not an amount"),
        ("--period", "3x", "not a duration"),
        ("--period", "0s", "longer than zero"),
        ("--grace", "soon", "not a duration"),
        ("--mint", "not-a-key", "not a base58 Solana address"),
        ("--plan-id", "-4", "must lie between"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(
    offline_cli: Cli, option: str, value: str, complaint: str
) -> None:
    args = {"--plan-id": "1", "--mint": str(Keypair().pubkey()), "--amount": "1",
            "--period": "30d", "--destination": str(Keypair().pubkey()), option: value}  # fmt: skip
    argv = [part for pair in args.items() for part in pair]
    result = offline_cli("plan", "create", *argv)
    assert result.code == 2
    assert complaint in result.err and "svcpay plan create --help" in result.err


@pytest.mark.parametrize(
    ("argv", "complaint"),
    [
        (("facilitator", "serve", "--crank-interval", "-1"), "give seconds, 0 or more (0: off)"),
        (("facilitator", "serve", "--crank-interval", "inf"), "'inf' is not a number of seconds"),
        (("pay", "http://127.0.0.1:1/v1/data", "--timeout", "0"), "give seconds above 0"),
        (("pay", "http://127.0.0.1:1/v1/data", "--timeout", "nan"), "not a number of seconds"),
        (("mcp", "--timeout", "-3"), "give seconds above 0"),
    ],
)
def test_seconds_that_mean_nothing_exit_2_with_one_line(
    offline_cli: Cli, argv: tuple[str, ...], complaint: str
) -> None:
    """A negative interval or a timeout of 0, nan or inf was taken as given (and a crank
    every -1 s, or an HTTP call that times out at once, followed)."""
    result = offline_cli(*argv)
    assert result.code == 2
    assert complaint in result.err and f"argument {argv[-2]}" in result.err, result.err


def test_durations_and_amounts_in_every_accepted_form(offline_cli: Cli) -> None:
    from svcpay.cli._common import amount_arg, format_duration, parse_duration

    assert [parse_duration(t) for t in ("30d", "1h", "3600s", "90m", "1w", "1d12h", "45")] == [
        2_592_000, 3600, 3600, 5400, 604_800, 129_600, 45,
    ]  # fmt: skip
    assert [format_duration(s) for s in (2_592_000, 3600, 5400, 0)] == ["30d", "1h", "1h30m", "0s"]
    assert amount_arg("9.99").to_base(6) == 9_990_000
    assert amount_arg("9990000u").to_base(2) == 9_990_000
    assert amount_arg("1_000").to_base(0) == 1000


def test_negative_and_exponent_amounts_are_refused_wherever_an_amount_is_read(
    offline_cli: Cli, tmp_path: Path
) -> None:
    """A leading '-' reaches the amount's parser (not "the following arguments are
    required"), and only plain decimals and base units are amounts: never 1e3, nan or inf
    (Decimal reads them all), as a positional or an option, token units or SOL."""
    key = keyfile(tmp_path, Keypair())
    nothing = str(Keypair().pubkey())
    dead = f"http://127.0.0.1:{free_port()}"
    positive, forms = "the amount must be positive", "exponents (1e3), nan and inf"
    commands: list[tuple[tuple[str, ...], str]] = [
        (("token", "mint", nothing, "{}"), "argument AMOUNT"),
        (("session", "top-up", nothing, "{}"), "argument AMOUNT"),
        (("session", "open", "--mint", nothing, "--pay-to", nothing, "--deposit", "{}"),
         "argument --deposit"),
        (("pay", "http://127.0.0.1:1/v1/data", "--max-amount", "{}"), "argument --max-amount"),
        (("subscribe", nothing, "--max-overage", "{}"), "argument --allowance-cap"),
        (("token", "create-mint", "--token-2022", "--transfer-fee-bps", "10", "--max-fee",
          "{}"), "argument --max-fee"),
        (("keys", "airdrop", "{}"), "not an amount of SOL"),
    ]  # fmt: skip
    for template, argument in commands:
        for value, complaint in (("-1u", positive), ("-1", positive), ("-.5", positive),
                                 ("1e3", forms), ("1E3u", forms), ("nan", forms),
                                 ("inf", forms)):  # fmt: skip
            argv = [value if part == "{}" else part for part in template]
            result = offline_cli(*argv, "-k", key, "-u", dead)
            assert result.code == 2, (argv, result.err)
            assert argument in result.err and complaint in result.err, (argv, result.err)
            assert "required" not in result.err, (argv, result.err)


def test_a_missing_keypair_names_the_fix(cli: Cli, tmp_path: Path) -> None:
    missing = str(tmp_path / "nowhere" / "id.json")
    result = cli("plan", "deprecate", str(Keypair().pubkey()), "--keypair", missing)
    assert result.code == 2
    assert f"keypair {missing} not found" in result.err and "svcpay keys create" in result.err
    default = cli("subscription", "pause", str(Keypair().pubkey()))  # $SVCPAY_KEYPAIR: missing
    assert default.code == 2 and "no-default-keypair.json not found" in default.err


def test_unknown_accounts_exit_3(cli: Cli, tmp_path: Path, chain: Chain) -> None:
    nothing = str(Keypair().pubkey())
    for argv in (("plan", "show", nothing), ("subscription", "show", nothing),
                 ("plan", "deprecate", nothing), ("subscribe", nothing),
                 ("subscription", "cancel", nothing)):  # fmt: skip
        result = cli(*argv, "--keypair", keyfile(tmp_path, chain.funded_keypair()))
        assert result.code == 3, argv
        assert nothing in result.err


def test_an_unreachable_rpc_says_how_to_start_one_or_check_the_url(offline_cli: Cli) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    result = offline_cli("plan", "show", str(Keypair().pubkey()), "--url", url)
    assert result.code == 1
    assert result.err.strip() == (
        f"svcpay: cannot reach RPC at {url}: start one with `svcpay localnet` or pass --url"
    )
    remote = "http://rpc.invalid:8899"  # .invalid never resolves (RFC 2606)
    result = offline_cli("plan", "show", str(Keypair().pubkey()), "--url", remote)
    assert result.code == 1
    # Not refused: the message says why (the resolver's words vary by machine).
    assert result.err.startswith(f"svcpay: cannot reach RPC at {remote} (ConnectError: ")
    assert result.err.strip().endswith(
        "): check the URL and this machine's network, or pass another with --url"
    )


def test_a_local_node_that_takes_no_connection_is_not_called_absent(offline_cli: Cli) -> None:
    """A node that listens but does not take the connection (its listen queue full: a busy
    node) times out; "start one" would send the user to start a second node."""
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(0)  # never accepted: one connection fills the queue, the next waits
        url = f"http://127.0.0.1:{busy.getsockname()[1]}"
        with socket.create_connection(busy.getsockname()):  # the queue is full
            result = offline_cli("plan", "show", str(Keypair().pubkey()), "--url", url)
    assert result.code == 1
    assert result.err.startswith(f"svcpay: cannot reach RPC at {url} (ConnectTimeout"), result.err
    assert result.err.strip().endswith("): check that the node is not overloaded, or pass --url")


def test_json_errors_are_one_object_on_stdout(cli: Cli) -> None:
    result = cli("plan", "show", str(Keypair().pubkey()), "--json")
    assert result.code == 3
    assert json.loads(result.out) == {
        "error": "NotFound",
        "message": result.err.strip().removeprefix("svcpay: "),
        "exitCode": 3,
    }


def test_global_options_go_before_or_after_the_command(cli: Cli, chain: Chain) -> None:
    nothing = str(Keypair().pubkey())
    before = main(["--json", "--url", cli.url or "", "plan", "show", nothing])
    assert before == 3
    assert cli("plan", "list", "--authority", nothing).out.strip() == f"no plans of {nothing}"


def test_transaction_failures_are_named() -> None:
    from svcpay.cli._errors import describe
    from svcpay.program.client import TransactionError

    anchor_log = (
        "Program log: AnchorError caused by account: destination. Error Code: "
        "ConstraintDuplicateMutableAccount. Error Number: 2040. Error Message: A duplicate "
        "mutable account is not allowed."
    )
    anchor = TransactionError("custom program error: 0x7f8", [anchor_log])
    assert describe(anchor, None) == (
        1,
        "TransactionError",
        "ConstraintDuplicateMutableAccount: A duplicate mutable account is not allowed",
    )
    unfunded = describe(TransactionError("simulation failed: AccountNotFound"), None)
    assert unfunded is not None and "svcpay keys airdrop" in unfunded[2]


def test_the_installed_console_script_runs_main(tmp_path: Path) -> None:
    import subprocess
    import sys

    script = Path(sys.executable).parent / "svcpay"
    missing = tmp_path / "id.json"
    done = subprocess.run(
        [str(script), "keys", "show", "--keypair", str(missing)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == (
        f"svcpay: keypair {missing} not found: create one with `svcpay keys create` "
        f"or pass --keypair PATH\n"
    )


def test_error_paths_print_one_line_with_what_to_do_and_no_traceback(
    offline_cli: Cli, tmp_path: Path
) -> None:
    """Errors a user can cause, each one line naming what failed and what to do (never the
    catch-all "unexpected ..."), with the documented exit code. `offline_cli` itself fails
    on a traceback or a second line on stderr."""
    key = keyfile(tmp_path, Keypair())
    dead_rpc = f"http://127.0.0.1:{free_port()}"
    database = f"sqlite:///{tmp_path / 'facilitator.db'}"
    cases: list[tuple[tuple[str, ...], int, str]] = [
        (
            ("keys", "airdrop", "1000000000000", "--keypair", key, "--url", dead_rpc),
            2,
            "out of range",
        ),  # fmt: skip
        (("keys", "airdrop", "-1", "--keypair", key, "--url", dead_rpc), 2, "not an amount"),
        (
            (
                "analytics",
                "--chart",
                str(tmp_path / "missing" / "chart.png"),
                "--database",
                database,
            ),
            2,
            "does not exist",
        ),  # fmt: skip
    ]
    for argv, code, words in cases:
        result = offline_cli(*argv)
        assert (result.code, words in result.err) == (code, True), (argv, result.err)
        assert "Traceback" not in result.err and "unexpected" not in result.err, result.err
        assert result.err.startswith("svcpay: ")
        jsoned = offline_cli(*argv, "--json")
        assert (jsoned.code, jsoned.json["exitCode"]) == (code, code)


def test_version_prints_the_package_version(offline_cli: Cli) -> None:
    from importlib.metadata import version

    result = offline_cli("--version")
    assert (result.code, result.out) == (0, f"svcpay {version('svcpay')}\n")
