"""MkDocs hook: the reference pages' generated parts, made from the code while the site builds
(docs/adr/0040), so that they cannot drift from it.

A page asks for one with a marker on a line of its own, `<!-- svcpay:generated NAME -->`;
NAME is one of `GENERATORS`: the command line from `svcpay.cli.build_parser()`, the program
from the IDL shipped in the package (no program build needed), the facilitator's HTTP API
from its OpenAPI document, the settings from the docstrings that list them, the ADR index
from docs/adr. An unknown NAME fails the build.

tests/test_docs.py imports this file too (`render`), to check the generated pages.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import os
import posixpath
import re
import subprocess
import sys
from collections.abc import Callable, Iterable
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from svcpay.examples.resource_server_settings import UNFLAGGED

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
MARKER = re.compile(r"^<!--\s*svcpay:generated\s+([\w-]+)\s*-->\s*$", re.M)


class GenerationError(Exception):
    """A marker names no generator, or a source could not be read."""


# -- helpers ------------------------------------------------------------------------------


def _text(value: str) -> str:
    """Prose from the code, safe in Markdown: one line, no HTML, no stray emphasis (code
    spans, between backticks, are left as they are)."""
    parts = " ".join(value.split()).split("`")
    if len(parts) % 2 == 0:  # an unpaired backtick: no code spans then
        parts = ["`".join(parts)]
    for i in range(0, len(parts), 2):
        parts[i] = parts[i].replace("\\", "\\\\").replace("<", "&lt;").replace("*", "\\*")
    return "`".join(parts)


def _cell(value: str) -> str:
    """`_text` inside a table cell."""
    return _text(value).replace("|", "\\|")


def _table(header: Iterable[str], rows: Iterable[Iterable[str]]) -> str:
    head = list(header)
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _adr_link(page: str, adr: str) -> str | None:
    """The relative link from `page` to ADR number `adr` (`0016`), if it exists."""
    found = sorted((DOCS / "adr").glob(f"{adr}-*.md"))
    if not found:
        return None
    return posixpath.relpath(f"adr/{found[0].name}", posixpath.dirname(page) or ".")


def _link_adrs(text: str, page: str) -> str:
    """`docs/adr/0016` in prose from the code, as a link to that ADR."""

    def link(match: re.Match[str]) -> str:
        target = _adr_link(page, match.group(1))
        return f"[ADR {match.group(1)}]({target})" if target else match.group(0)

    return re.sub(r"docs/adr/(\d{4})(?:-[\w-]+\.md)?", link, text)


# -- the command line ---------------------------------------------------------------------


def _formatter(parser: argparse.ArgumentParser) -> argparse.HelpFormatter:
    return parser._get_formatter()


def _help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    if not action.help:
        return ""
    try:
        return _formatter(parser)._expand_help(action)
    except (KeyError, TypeError, ValueError):
        return action.help


def _global_flags(parser: argparse.ArgumentParser) -> set[str]:
    """The global options' flags (`--url`, ...), documented once at the top."""
    return {
        flag
        for action in parser._actions
        if action.option_strings
        and not isinstance(action, argparse._HelpAction | argparse._VersionAction)
        for flag in action.option_strings
    }


def _arguments(parser: argparse.ArgumentParser, skip: set[str]) -> list[list[str]]:
    rows = []
    formatter = _formatter(parser)
    for action in parser._actions:
        if action.help == argparse.SUPPRESS or isinstance(
            action, argparse._HelpAction | argparse._SubParsersAction
        ):
            continue
        if action.option_strings and set(action.option_strings) <= skip:
            continue
        invocation = formatter._format_action_invocation(action)
        text = _help(parser, action)  # choices show in the invocation: {GET,POST,...}
        rows.append([f"`{invocation}`", _cell(text)])
    return rows


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, str, argparse.ArgumentParser]]:
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            for name, sub in action.choices.items():
                found.append((name, helps.get(name, ""), sub))
    return found


def _command(
    parser: argparse.ArgumentParser, path: list[str], help: str, skip: set[str], level: int
) -> list[str]:
    name = " ".join(path)
    out = [f"{'#' * level} {name}", ""]
    if help:
        out += [_text(help[0].upper() + help[1:]) + ("" if help.endswith(".") else "."), ""]
    if path[-1] == "localnet":  # the validator parses its own flags, in its own process
        return [*out, _text(parser.description or ""), "", "```text", _validator_help(), "```", ""]
    out += ["```text", _usage(parser), "```", ""]
    if parser.description and parser.description.strip() != help.strip():
        out += [_text(parser.description), ""]
    rows = _arguments(parser, skip)
    if rows:
        out += [_table(["argument", "meaning"], rows), ""]
    subs = _subcommands(parser)
    if subs:
        out += ["Subcommands: " + ", ".join(f"`{n}`" for n, _, _ in subs) + ".", ""]
    if parser.epilog:
        out += ["```text", parser.epilog.strip("\n"), "```", ""]
    for sub_name, sub_help, sub in subs:
        out += _command(sub, [*path, sub_name], sub_help, skip, min(level + 1, 4))
    return out


def _usage(parser: argparse.ArgumentParser) -> str:
    """The usage line(s) without `usage: ` and with continuation lines indented as the first."""
    return parser.format_usage().removeprefix("usage: ").strip().replace("\n       ", "\n")


def _validator_help() -> str:
    """`svcpay localnet --help`: the validator parses its own flags, in its own process."""
    result = subprocess.run(
        [sys.executable, "-m", "svcpay.localnet.server", "--help"],
        capture_output=True,
        text=True,
        check=True,
        env={"COLUMNS": "80", "PATH": ""},
    )
    return result.stdout.strip()


def cli(page: str) -> str:
    # argparse wraps usage lines to the terminal's width: the page's must not depend on it.
    before = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "80"
    try:
        return _cli()
    finally:
        if before is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = before


def _cli() -> str:
    from svcpay.cli import build_parser

    parser = build_parser()
    skip = _global_flags(parser)
    out = [
        "```text",
        _usage(parser),
        "```",
        "",
        _text(parser.description or ""),
        "",
        "## Global options",
        "",
        "Every command but `svcpay localnet` takes these, before or after its name:",
        "",
        _table(["option", "meaning"], _arguments(parser, {"--version"})),
        "",
        "## Exit codes and errors",
        "",
        "```text",
        (parser.epilog or "").strip("\n"),
        "```",
        "",
    ]
    for name, help, sub in _subcommands(parser):
        out += _command(sub, ["svcpay", name], help, skip, 2)
    return "\n".join(out)


# -- the program (its IDL) ----------------------------------------------------------------


@cache
def idl() -> dict[str, Any]:
    """The IDL shipped beside the generated client (scripts/gen-client copies it there)."""
    text = resources.files("svcpay.program.generated").joinpath("idl.json").read_text()
    parsed: dict[str, Any] = json.loads(text)
    return parsed


def _idl_type(t: Any) -> str:
    if isinstance(t, str):
        return f"`{t}`"
    if "defined" in t:
        name = t["defined"]["name"] if isinstance(t["defined"], dict) else t["defined"]
        return f"[`{name}`](#{name.lower()})"
    if "option" in t:
        return f"{_idl_type(t['option'])} or none"
    if "vec" in t:
        return f"list of {_idl_type(t['vec'])}"
    if "array" in t:
        item, size = t["array"]
        return f"{size} × {_idl_type(item)}"
    return f"`{json.dumps(t)}`"


def _para(text: str) -> list[str]:
    return [text, ""] if text else []


def _docs(item: dict[str, Any], page: str) -> str:
    return _link_adrs(_text(" ".join(item.get("docs", []))), page)


def _fields(fields: list[dict[str, Any]], page: str) -> str:
    rows = [
        [f"`{f['name']}`", _idl_type(f["type"]), _docs(f, page).replace("|", "\\|")] for f in fields
    ]
    return _table(["field", "type", "meaning"], rows)


def _account_rows(accounts: list[dict[str, Any]], page: str, prefix: str = "") -> list[list[str]]:
    rows = []
    for account in accounts:
        if "accounts" in account:  # a composite: its accounts, named under it
            rows += _account_rows(account["accounts"], page, f"{prefix}{account['name']}.")
            continue
        traits = [
            trait
            for trait, on in (
                ("signer", account.get("signer")),
                ("writable", account.get("writable")),
                ("optional", account.get("optional")),
                ("PDA", "pda" in account),
            )
            if on
        ]
        if "address" in account:
            traits.append(f"fixed: `{account['address']}`")
        rows.append(
            [
                f"`{prefix}{account['name']}`",
                ", ".join(traits),
                _docs(account, page).replace("|", "\\|"),
            ]
        )
    return rows


def program(page: str) -> str:
    doc = idl()
    types = {t["name"]: t for t in doc.get("types", [])}
    meta = doc["metadata"]
    out = [
        f"Program id `{doc['address']}` (localnet and tests; a deployment of your own has its "
        f"own), `{meta['name']}` {meta['version']}: {_text(meta.get('description', ''))}.",
        "",
        "## Instructions",
        "",
    ]
    for ins in doc["instructions"]:
        out += [f"### {ins['name']}", "", *_para(_docs(ins, page))]
        if ins.get("accounts"):
            out += [_table(["account", "", "meaning"], _account_rows(ins["accounts"], page)), ""]
        if ins.get("args"):
            rows = [[f"`{a['name']}`", _idl_type(a["type"])] for a in ins["args"]]
            out += [_table(["argument", "type"], rows), ""]
        else:
            out += ["No arguments.", ""]
    out += ["## Accounts", ""]
    for account in doc.get("accounts", []):
        t = types.get(account["name"], {})
        out += [f"### {account['name']}", "", *_para(_docs(t, page))]
        out += [_fields(t.get("type", {}).get("fields", []), page), ""]
    out += ["## Events", "", "Emitted with `emit!` (in the transaction's logs); the facilitator's "
            "indexer decodes them (`svcpay.program.events`).", ""]  # fmt: skip
    for event in doc.get("events", []):
        t = types.get(event["name"], {})
        out += [f"### {event['name']}", "", *_para(_docs(t, page))]
        out += [_fields(t.get("type", {}).get("fields", []), page), ""]
    named = {a["name"] for a in doc.get("accounts", [])} | {
        e["name"] for e in doc.get("events", [])
    }
    out += ["## Types", ""]
    for name, t in types.items():
        if name in named:
            continue
        out += [f"### {name}", "", *_para(_docs(t, page))]
        body = t["type"]
        if body["kind"] == "enum":
            rows = [[f"`{v['name']}`", str(i)] for i, v in enumerate(body["variants"])]
            out += [_table(["variant", "index"], rows), ""]
        else:
            out += [_fields(body.get("fields", []), page), ""]
    out += [
        "## Errors",
        "",
        "A failed instruction's custom error code; `svcpay.program.errors` maps each to an "
        "exception of the same name.",
        "",
        _table(
            ["code", "name", "message"],
            ([str(e["code"]), f"`{e['name']}`", _cell(e.get("msg", ""))] for e in doc["errors"]),
        ),
        "",
        "## Constants",
        "",
        _table(
            ["name", "type", "value", "meaning"],
            (
                [f"`{c['name']}`", f"`{c['type']}`", _constant(c), _docs(c, page)]
                for c in doc.get("constants", [])
            ),
        ),
        "",
    ]
    return "\n".join(out)


def _constant(c: dict[str, Any]) -> str:
    value = c["value"]
    if c["type"] == "bytes":
        try:
            return f'`"{bytes(json.loads(value)).decode()}"`'
        except (ValueError, UnicodeDecodeError):
            pass
    return f"`{value}`"


# -- the facilitator's HTTP API (its OpenAPI document) ------------------------------------


def _ref_name(ref: str) -> str:
    return ref.rsplit("/", 1)[-1]


def _schema_type(s: dict[str, Any]) -> str:
    if "$ref" in s:
        name = _ref_name(s["$ref"])
        return f"[{name}](#{name.lower()})"
    for key in ("anyOf", "oneOf"):
        if key in s:
            parts = [_schema_type(x) for x in s[key]]
            return " or ".join(p for p in parts)
    if "const" in s:
        return f"`{json.dumps(s['const'])}`"
    if "enum" in s:
        return " \\| ".join(f"`{json.dumps(v)}`" for v in s["enum"])
    kind = s.get("type")
    if kind == "array":
        return f"list of {_schema_type(s.get('items', {}))}"
    if kind == "object" and "additionalProperties" in s and s["additionalProperties"]:
        extra = s["additionalProperties"]
        inner = _schema_type(extra) if isinstance(extra, dict) else "any"
        return f"object of {inner}"
    if isinstance(kind, list):
        return " or ".join(f"`{k}`" for k in kind)
    if kind:
        fmt = f" ({s['format']})" if "format" in s else ""
        return f"`{kind}`{fmt}"
    return "any"


def _body_schema(content: dict[str, Any]) -> str:
    parts = []
    for media, spec in content.items():
        schema = spec.get("schema")
        parts.append(f"`{media}`" + (f": {_schema_type(schema)}" if schema else ""))
    return "; ".join(parts)


def http_api(page: str) -> str:
    from svcpay.facilitator.openapi import schema

    doc = schema()
    components = doc.get("components", {})
    shared = components.get("responses", {})
    info = doc["info"]
    out = [_text(info.get("description", "")), ""]
    out += [
        f"OpenAPI {doc['openapi']}, API version {info['version']}; a running facilitator "
        "serves this document at `GET /openapi.json`.",
        "",
    ]
    schemes = components.get("securitySchemes", {})
    for name, scheme in schemes.items():
        out += [
            f"**Authentication** (`{name}`): `Authorization: Bearer <key>`, "
            f"{_text(scheme.get('description', ''))}.",
            "",
        ]
    by_tag: dict[str, list[tuple[str, str, dict[str, Any]]]] = {}
    for path, operations in doc["paths"].items():
        for method, op in operations.items():
            tag = (op.get("tags") or ["other"])[0]
            by_tag.setdefault(tag, []).append((path, method, op))
    tags = {t["name"]: t.get("description", "") for t in doc.get("tags", [])}
    for tag in [*tags, *(t for t in by_tag if t not in tags)]:
        if tag not in by_tag:
            continue
        title = tag[0].upper() + tag[1:]
        out += [f"## {title}", ""]
        if tags.get(tag):
            out += [_text(tags[tag][0].upper() + tags[tag][1:]) + ".", ""]
        for path, method, op in by_tag[tag]:
            out += [f"### {method.upper()} {path}", ""]
            if op.get("summary"):
                out += [f"**{_text(op['summary'])}.**", ""]
            if op.get("description"):
                out += [_text(op["description"]), ""]
            if op.get("security"):
                out += ["Needs a provider's API key.", ""]
            params = op.get("parameters", [])
            if params:
                rows = [
                    [
                        f"`{p['name']}`",
                        p.get("in", ""),
                        _schema_type(p.get("schema", {})),
                        "yes" if p.get("required") else "",
                        _cell(p.get("description", "")),
                    ]
                    for p in params
                ]
                out += [_table(["parameter", "in", "type", "required", "meaning"], rows), ""]
            body = op.get("requestBody")
            if body:
                what = _text(body.get("description", ""))
                schema = _body_schema(body.get("content", {}))
                out += [f"Body: {schema}" + (f", {what}" if what else "") + ".", ""]
            rows = []
            for status, response in op.get("responses", {}).items():
                if "$ref" in response:
                    response = shared.get(_ref_name(response["$ref"]), {})
                rows.append(
                    [
                        f"`{status}`",
                        _cell(response.get("description", "")),
                        _body_schema(response.get("content", {})),
                    ]
                )
            out += [_table(["status", "meaning", "body"], rows), ""]
    out += ["## Schemas", ""]
    for name, s in components.get("schemas", {}).items():
        out += [f"### {name}", ""]
        if s.get("description"):
            out += [_text(s["description"]), ""]
        props = s.get("properties")
        if props:
            required = set(s.get("required", []))
            rows = [
                [
                    f"`{prop}`",
                    _schema_type(spec),  # its only "|" are escaped already
                    "yes" if prop in required else "",
                    _cell(spec.get("description", "")),
                ]
                for prop, spec in props.items()
            ]
            out += [_table(["field", "type", "required", "meaning"], rows), ""]
        elif any(k in s for k in ("anyOf", "oneOf", "$ref", "type")):
            out += [f"Type: {_schema_type(s)}.", ""]
    return "\n".join(out)


# -- settings (the docstrings that list them) ---------------------------------------------

# Each module whose docstring lists SVCPAY_* variables in an indented table: the name, then
# (in the facilitator's) a default column, then what it means.
SETTINGS_SOURCES = {
    "svcpay.facilitator.config": "The facilitator (`svcpay facilitator serve`, `crank`, ...)",
    "svcpay.examples.resource_server": "The example API (`python -m "
    "svcpay.examples.resource_server`; `svcpay example serve` takes each as a flag, "
    "`svcpay example serve --help`, and reads from the environment only "
    + ", ".join(f"`{name}`" for name in UNFLAGGED)
    + ")",
}
_ROW = re.compile(r"^(    )(SVCPAY_[A-Z0-9_]+(?:, _[A-Z0-9_]+)*)")


def _docstring(module: str) -> str:
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise GenerationError(f"settings: no module {module}")
    doc = ast.get_docstring(ast.parse(Path(spec.origin).read_text()))
    if not doc:
        raise GenerationError(f"settings: {module} has no docstring")
    return doc


def settings_table(doc: str) -> list[tuple[list[str], str, str]]:
    """The (names, default, meaning) rows of the first SVCPAY_* table in a docstring. Columns
    start where the first row's do; a column boundary counts only after two spaces (or, after
    the name, one), so text running across one stays in its column."""
    lines = doc.splitlines()
    start = next((i for i, line in enumerate(lines) if _ROW.match(line)), None)
    if start is None:
        raise GenerationError("settings: no SVCPAY_* table in the docstring")
    first = lines[start]
    name_end = _ROW.match(first).end()  # type: ignore[union-attr]
    starts = [m.start() for m in re.finditer(r"(?<=\s\s)\S", first) if m.start() > name_end]
    default_col, meaning_col = (starts[0], starts[1]) if len(starts) >= 2 else (None, starts[0])
    rows: list[tuple[list[str], str, str]] = []
    for line in lines[start:]:
        if not line.strip():
            break
        match = _ROW.match(line)
        if match:
            head, *more = match.group(2).split(", ")
            names = [head] + [head.rsplit("_", 1)[0] + extra for extra in more]
            rows.append((names, "", ""))
            rest_at = match.end()
        else:
            rest_at = len(line) - len(line.lstrip())
        if not rows:
            continue
        rest = line[rest_at:]
        default, meaning = "", ""
        if default_col is None:
            meaning = rest
        else:
            at = rest_at + len(rest) - len(rest.lstrip())
            text = line[at:]
            if at >= meaning_col:
                meaning = text
            else:
                cut = meaning_col - at
                if line[meaning_col - 2 : meaning_col] == "  " and len(line) > meaning_col:
                    default, meaning = text[:cut], text[cut:]
                else:
                    default = text
        names, d, m = rows[-1]
        rows[-1] = (names, f"{d} {default.strip()}".strip(), f"{m} {meaning.strip()}".strip())
    return rows


def settings(page: str) -> str:
    out = []
    for module, title in SETTINGS_SOURCES.items():
        rows = settings_table(_docstring(module))
        has_defaults = any(default for _, default, _ in rows)
        out += [f"## {title}", "", f"From `{module}`'s docstring.", ""]
        header = ["variable", "default", "meaning"] if has_defaults else ["variable", "meaning"]
        table_rows = []
        for names, default, meaning in rows:
            row = [", ".join(f"`{n}`" for n in names)]
            if has_defaults:
                row.append(_cell(default))
            row.append(_link_adrs(_cell(meaning), page))
            table_rows.append(row)
        out += [_table(header, table_rows), ""]
    return "\n".join(out)


# -- the ADR index ------------------------------------------------------------------------


def adr_index(page: str) -> str:
    rows = []
    for path in sorted((DOCS / "adr").glob("[0-9][0-9][0-9][0-9]-*.md")):
        lines = path.read_text().splitlines()
        title = next((line[2:].strip() for line in lines if line.startswith("# ")), path.stem)
        number, _, title = title.partition(". ")
        status = next((line for line in lines if line.startswith("Status:")), "")
        status = status.removeprefix("Status:").strip()
        link = posixpath.relpath(f"adr/{path.name}", posixpath.dirname(page) or ".")
        rows.append([number, f"[{_cell(title)}]({link})", _cell(status)])
    return _table(["ADR", "decision", "status"], rows)


# -- the hook -----------------------------------------------------------------------------

GENERATORS: dict[str, Callable[[str], str]] = {
    "cli": cli,
    "program": program,
    "http-api": http_api,
    "settings": settings,
    "adr-index": adr_index,
}


def render(markdown: str, page: str) -> str:
    """`markdown` (the page at `page`, relative to docs/) with its markers filled."""

    def fill(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in GENERATORS:
            raise GenerationError(f"{page}: no generator {name!r} (known: {', '.join(GENERATORS)})")
        return GENERATORS[name](page)

    return MARKER.sub(fill, markdown)


def on_page_markdown(markdown: str, page: Any, **kwargs: Any) -> str:
    from mkdocs.exceptions import PluginError

    try:
        return render(markdown, page.file.src_uri)
    except GenerationError as e:
        raise PluginError(str(e)) from e


def on_serve(server: Any, **kwargs: Any) -> Any:
    """`scripts/docs serve` rebuilds when the code the pages come from changes."""
    server.watch(str(ROOT / "py" / "svcpay"))
    return server
