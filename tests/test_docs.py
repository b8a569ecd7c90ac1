"""Every code block in docs/ is exercised, so the docs cannot drift from the code (issue 40,
docs/adr/0040); and the generated reference pages render.

What each fenced block gets, by its info string (the word after the backticks):

- `python`: compiled (top-level `await` allowed). A self-contained block, one that uses no
  name it does not define or import, is also run, in a fresh interpreter in an empty
  directory, and must exit 0 within a minute. A block that uses names the page defines in
  prose (`PAY_TO`, `app`, ...) is compiled only.
- `sh`, `bash`, `shell`, `console`: every command that starts with `svcpay` (after `$ `, an
  `export`-free `NAME=value` prefix, or `&&`, `;`, `|`) is parsed by
  `svcpay.cli.build_parser()`, not run: a renamed command or flag fails. Values in capitals
  (`MINT`, `PAY_TO`), `$VAR`, `${VAR}` and `<placeholder>` stand for values and are not
  converted; everything else is.
- `json`: `json.loads`; `toml`: `tomllib.loads`; `yaml`: `yaml.safe_load`.
- any other (`text`, `http`, none, ...): not checked.

A block may be marked by an HTML comment on the line right before its fence (the site does
not show it):

- `<!-- docs-test: compile-only -->`: a self-contained python block that must not run here
  (it serves, or calls a network); it is still compiled.
- `<!-- docs-test: harness tests/test_x.py -->`: a richer test runs this block (against a
  validator, say, as tests/test_readme.py does for the README); that file must exist and
  name the page (its path under docs/). The block is still checked as above, but not run.
- `<!-- docs-test: skip REASON -->`: not checked at all; REASON is required.

The ADRs (docs/adr) are records of their time: their blocks are compiled and parsed as
data, but their commands are not held to today's command line.
"""

from __future__ import annotations

import argparse
import ast
import builtins
import importlib.util
import json
import re
import shlex
import subprocess
import symtable
import sys
import tomllib
from collections.abc import Callable, Iterator
from contextlib import redirect_stderr
from dataclasses import dataclass
from io import StringIO
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from svcpay.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`\n]*)$")
MARK = re.compile(r"^\s*<!--\s*docs-test:\s*(?P<what>[\w-]+)\s*(?P<arg>.*?)\s*-->\s*$")
SHELLS = {"sh", "bash", "shell", "console", "zsh"}
RUN_TIMEOUT_SECS = 60


@dataclass(frozen=True)
class Block:
    page: str  # path under docs/
    line: int  # the opening fence's, 1-based
    lang: str
    code: str
    mark: str = ""  # compile-only, harness, skip
    mark_arg: str = ""

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


def pages() -> list[Path]:
    return sorted(p for p in DOCS.rglob("*.md") if "hooks" not in p.relative_to(DOCS).parts)


def blocks(path: Path) -> Iterator[Block]:
    """The fenced blocks of one page, with the mark before each."""
    lines = path.read_text().splitlines()
    page = path.relative_to(DOCS).as_posix()
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        indent, fence = opening["indent"], opening["fence"]
        body: list[str] = []
        j = i + 1
        while j < len(lines):
            closing = FENCE.match(lines[j])
            if closing and closing["fence"].startswith(fence) and not closing["info"].strip():
                break
            body.append(lines[j][len(indent) :] if lines[j].startswith(indent) else lines[j])
            j += 1
        mark = MARK.match(lines[i - 1]) if i > 0 else None
        info = opening["info"].strip()
        lang = info.split()[0].strip("{}.").lower() if info else ""
        yield Block(
            page,
            i + 1,
            lang,
            "\n".join(body) + "\n",
            mark["what"] if mark else "",
            mark["arg"] if mark else "",
        )
        i = j + 1


ALL = [b for p in pages() for b in blocks(p)]


def of(*langs: str) -> list[Any]:
    return [pytest.param(b, id=b.id) for b in ALL if b.lang in langs and b.mark != "skip"]


# -- python -------------------------------------------------------------------------------


def compiled(code: str, name: str) -> Any:
    return compile(code, name, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)


def free_names(code: str) -> set[str]:
    """The names a block uses without defining or importing them (builtins aside): its body
    analysed as the body of one function, whose globals are then what it does not define."""
    body = "\n".join(
        line for line in code.splitlines() if not line.startswith("from __future__ import")
    )
    wrapped = "async def __block__():\n" + "\n".join("    " + line for line in body.splitlines())
    table = symtable.symtable(wrapped + "\n    pass\n", "<block>", "exec")
    found: set[str] = set()

    def walk(t: symtable.SymbolTable) -> None:
        for symbol in t.get_symbols():
            if symbol.is_referenced() and symbol.is_global():
                found.add(symbol.get_name())
        for child in t.get_children():
            walk(child)

    for child in table.get_children():
        walk(child)
    return found - set(dir(builtins)) - {"__block__"}


RUNNER = """
import ast, asyncio, inspect, sys
source = open(sys.argv[1]).read()
code = compile(source, sys.argv[1], "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
result = eval(code, {"__name__": "__main__"})
if inspect.iscoroutine(result):
    asyncio.run(result)
"""


@pytest.mark.parametrize("block", of("python", "py"))
def test_python_blocks_compile_and_self_contained_ones_run(block: Block, tmp_path: Path) -> None:
    compiled(block.code, block.id)
    if (
        block.page.startswith("adr/")
        or block.mark in ("compile-only", "harness")
        or free_names(block.code)
    ):
        return
    script = tmp_path / "block.py"
    script.write_text(block.code)
    result = subprocess.run(
        [sys.executable, "-c", RUNNER, str(script)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_SECS,
    )
    assert result.returncode == 0, (
        f"{block.id} is self-contained, so it runs, and it failed (mark it "
        f"`<!-- docs-test: compile-only -->` if it must not run here):\n{result.stderr[-3000:]}"
    )


def test_free_names_are_what_a_block_does_not_define() -> None:
    code = (
        "import httpx\nfrom a import b\nx = 1\n\nasync def f(y):\n    return x + y + z + len(b)\n"
    )
    assert free_names(code) == {"z"}
    assert free_names("class A:\n    n = N\nA()\nawait go()\n") == {"N", "go"}


# -- the command line ---------------------------------------------------------------------

PLACEHOLDER = re.compile(r"^(?:[A-Z][A-Z0-9_]+|.*\$\{?\w+\}?.*|<[^>]*>)$")


def lenient(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """`parser` (and its subcommands') with placeholders passed through unconverted."""

    def wrap(convert: Callable[[str], Any]) -> Callable[[str], Any]:
        def converted(value: str) -> Any:
            return value if PLACEHOLDER.match(value) else convert(value)

        converted.__name__ = getattr(convert, "__name__", "value")
        return converted

    for action in parser._actions:
        if callable(action.type):
            action.type = wrap(action.type)
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                lenient(sub)
    return parser


def commands(code: str) -> Iterator[list[str]]:
    """Each `svcpay ...` command of a shell block, as its arguments."""
    text = re.sub(r"\\\n", " ", code)
    for line in text.splitlines():
        line = line.strip()
        line = line.removeprefix("$ ").strip()
        if not line or line.startswith("#"):
            continue
        line = re.sub(r"<[^<>\s]+>", "PLACEHOLDER", line)  # <mint> -> a value in capitals
        lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|<>()")
        lexer.whitespace_split = True
        lexer.commenters = "#"
        command: list[str] = []
        for token in [*lexer, ";"]:
            if token and set(token) <= set(";&|<>()"):
                while command and re.match(r"^[A-Za-z_]\w*=", command[0]):
                    command.pop(0)
                if command[:1] == ["svcpay"]:
                    yield command[1:]
                command = []
            else:
                command.append(token)


def test_commands_are_found_in_shell_lines() -> None:
    code = (
        "$ svcpay keys create -o a.json  # note\n"
        "FOO=1 svcpay pay URL \\\n  --max-amount 0.5 && svcpay token balance <mint> | cat\n"
        "export X=1\n"
    )
    assert list(commands(code)) == [
        ["keys", "create", "-o", "a.json"],
        ["pay", "URL", "--max-amount", "0.5"],
        ["token", "balance", "PLACEHOLDER"],
    ]


class _Captured(Exception):
    pass


def validator_parser() -> argparse.ArgumentParser:
    """The drop-in validator's parser, which `svcpay localnet` hands every argument to (it
    builds it in its `main`): caught as `main` is about to parse."""
    from svcpay.localnet import server

    captured: list[argparse.ArgumentParser] = []

    def capture(self: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> Any:
        captured.append(self)
        raise _Captured

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(argparse.ArgumentParser, "parse_args", capture)
        with pytest.raises(_Captured):
            server.main([])
    return captured[0]


@pytest.mark.parametrize("block", of(*SHELLS))
def test_svcpay_commands_in_shell_blocks_parse(block: Block) -> None:
    if block.page.startswith("adr/"):
        return
    for args in commands(block.code):
        parser = lenient(build_parser())
        if args[:1] == ["localnet"]:  # as svcpay.cli.main does
            parser, args = lenient(validator_parser()), args[1:]
        errors = StringIO()
        try:
            with redirect_stderr(errors):
                parser.parse_args(args)
        except SystemExit as e:
            assert e.code == 0, (
                f"{block.id}: `svcpay {shlex.join(args)}` does not parse: "
                f"{errors.getvalue().strip()}"
            )


# -- data ---------------------------------------------------------------------------------


@pytest.mark.parametrize("block", of("json", "toml", "yaml", "yml"))
def test_data_blocks_parse(block: Block) -> None:
    if block.lang == "json":
        json.loads(block.code)
    elif block.lang == "toml":
        tomllib.loads(block.code)
    else:
        yaml.safe_load(block.code)


# -- marks --------------------------------------------------------------------------------


@pytest.mark.parametrize("block", [pytest.param(b, id=b.id) for b in ALL if b.mark])
def test_marks_are_known_and_complete(block: Block) -> None:
    assert block.mark in ("compile-only", "harness", "skip"), f"{block.id}: mark {block.mark}?"
    if block.mark == "skip":
        assert block.mark_arg, f"{block.id}: `docs-test: skip` needs a reason"
    if block.mark == "harness":
        harness = ROOT / block.mark_arg
        assert harness.is_file(), f"{block.id}: no harness {block.mark_arg}"
        assert block.page in harness.read_text(), f"{block.mark_arg} does not name {block.page}"


# -- the generated reference pages --------------------------------------------------------


def hooks() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_reference", DOCS / "hooks/reference.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def rendered(page: str) -> str:
    reference = hooks()
    text: str = reference.render((DOCS / page).read_text(), page)
    return text


def settings_used_in_the_code() -> set[str]:
    """Every SVCPAY_* name in the package's string literals (environment variables; the MCP
    `_meta` keys are Python names, not strings)."""
    found: set[str] = set()
    for path in (ROOT / "py/svcpay").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                found |= set(re.findall(r"SVCPAY_[A-Z0-9]+(?:_[A-Z0-9]+)*", node.value))
    return found


def test_every_setting_is_on_the_settings_page() -> None:
    page = rendered("reference/settings.md")
    used = settings_used_in_the_code()
    assert "SVCPAY_RPC_URL" in used and "SVCPAY_SETTLE_BURST" in used
    missing = sorted(name for name in used if f"`{name}`" not in page)
    assert not missing, f"docs/reference/settings.md does not list {missing}"


@pytest.mark.parametrize(
    "page",
    [
        p.relative_to(DOCS).as_posix()
        for p in pages()
        if re.search(r"^<!-- *svcpay:generated", p.read_text(), re.M)
    ],
)
def test_generated_pages_render(page: str) -> None:
    text = rendered(page)
    assert not re.search(r"^<!-- *svcpay:generated", text, re.M)
    assert len(text) > 1000


def test_the_reference_follows_the_code() -> None:
    cli = rendered("reference/cli.md")
    for name in ("svcpay pay", "svcpay facilitator serve", "svcpay session top-up"):
        assert f"## {name}\n" in cli
    assert "`--max-amount AMOUNT`" in cli
    program = rendered("reference/program.md")
    assert "### redeem_session" in program and "| 6000 | `InsufficientFunds` |" in program
    api = rendered("reference/http-api.md")
    assert "### POST /authorize" in api and "### AuthorizeRequest" in api
    index = rendered("adr/index.md")
    for adr in (DOCS / "adr").glob("0*.md"):
        assert f"]({adr.name})" in index


def test_the_protocol_page_names_what_the_code_sends() -> None:
    """docs/reference/protocols.md is written by hand: its header names, networks and problem
    types are checked against the constants the code sends."""
    from svcpay.mcp import wire as mcp
    from svcpay.protocol import headers, mpp
    from svcpay.schemes.mpp_charge import wire as charge
    from svcpay.schemes.x402_exact import wire as x402

    page = (DOCS / "reference/protocols.md").read_text()
    names = [headers.X_PAYMENT, headers.X_SVC_SUB, x402.PAYMENT_REQUIRED, x402.PAYMENT_SIGNATURE]
    names += [x402.PAYMENT_RESPONSE, x402.X_PAYMENT_RESPONSE, x402.PAYMENT_IDENTIFIER]
    names += [*x402.CAIP2, *x402.CAIP2.values(), *x402.V1_NETWORK.values(), *mpp.PROBLEMS]
    names += [*charge.NETWORKS.values(), mpp.PROBLEM_BASE, mcp.X402_PAYMENT, mcp.MPP_CREDENTIAL]
    names += [mcp.SVCPAY_PAYMENT, mcp.SVCPAY_SUBSCRIPTION, str(mcp.PAYMENT_REQUIRED_CODE)]
    missing = [name for name in names if name not in page]
    assert not missing, f"docs/reference/protocols.md does not name {missing}"


def test_the_readme_is_short_and_leads_to_the_docs() -> None:
    """Issue 40: at most 150 lines, the two commands first, one click to getting started."""
    readme = (ROOT / "README.md").read_text()
    lines = readme.splitlines()
    assert len(lines) <= 150, len(lines)
    assert lines[3:5] == [
        "scripts/demo    # the demo: builds what is missing, then walks through svcpay's flows",
        "scripts/test    # the whole test suite (what CI runs)",
    ]
    assert "(docs/index.md)" in readme and (DOCS / "index.md").is_file()
