"""The base package imports no web server, database, migration or chart library, and a part
used without its extra fails with one line naming the extra (svcpay._extras).

Each case runs in a fresh interpreter in which the extras' libraries cannot be imported (as
after `pip install svcpay`): `sys.modules[name] = None` makes `import name` fail and
`importlib.util.find_spec(name)` answer None, as for a package that is not installed."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

# What the extras install (pyproject.toml), by import name.
EXTRAS = {
    "gate": ["fastapi", "uvicorn"],
    "facilitator": ["starlette", "sqlalchemy", "alembic", "aiosqlite", "uvicorn"],
    "postgres": ["psycopg"],
    "charts": ["matplotlib"],
}
ALL = sorted({name for names in EXTRAS.values() for name in names})


def run(code: str, *, without: list[str]) -> subprocess.CompletedProcess[str]:
    block = f"import sys\nfor name in {without!r}:\n    sys.modules[name] = None\n"
    return subprocess.run(
        [sys.executable, "-c", block + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def last_line(result: subprocess.CompletedProcess[str]) -> str:
    return result.stderr.strip().splitlines()[-1]


def test_the_base_package_imports_without_any_extra() -> None:
    result = run(
        """
        import svcpay.client, svcpay.gate, svcpay.protocol.proof, svcpay.protocol.verify
        import svcpay.program.client, svcpay.program.events, svcpay.localnet.server
        import svcpay.cli, svcpay.webhooks
        svcpay.cli.build_parser()
        heavy = [m for m in sys.modules if m.split(".")[0] in BLOCKED and sys.modules[m]]
        print("loaded:", heavy)
        """.replace("BLOCKED", repr(ALL)),
        without=ALL,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "loaded: []"


@pytest.mark.parametrize(
    ("statement", "extra"),
    [
        ("import svcpay.facilitator", "facilitator"),
        ("from svcpay.facilitator.store import Store", "facilitator"),
        ("import svcpay.examples.resource_server", "gate"),
        ("import svcpay.protocol.replay_postgres", "postgres"),
    ],
)
def test_a_part_without_its_extra_fails_with_one_line_naming_it(statement: str, extra: str) -> None:
    result = run(statement, without=EXTRAS[extra])
    assert result.returncode != 0
    assert last_line(result).startswith("svcpay._extras.MissingExtra: svcpay.")
    assert last_line(result).endswith(f"the '{extra}' extra: pip install 'svcpay[{extra}]'")


def test_the_chart_alone_needs_the_charts_extra() -> None:
    result = run(
        """
        from svcpay.facilitator import analytics
        try:
            analytics.chart_png({"days": []}, title="t")
        except ImportError as e:
            print(e)
        """,
        without=EXTRAS["charts"],
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == (
        "svcpay's analytics chart needs the 'charts' extra: pip install 'svcpay[charts]'"
    )


def test_the_cli_names_the_extra_a_command_needs() -> None:
    result = run(
        """
        from svcpay.cli import main
        sys.exit(main(["facilitator", "migrate", "--database", "sqlite:///x.db"]))
        """,
        without=EXTRAS["facilitator"],
    )
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.strip().splitlines() == [
        "svcpay: svcpay.facilitator needs the 'facilitator' extra: "
        "pip install 'svcpay[facilitator]'"
    ]
