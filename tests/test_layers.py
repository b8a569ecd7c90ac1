"""The package's layers (docs/adr/0028, docs/adr/0041) and its import graph.

`LAYERS` ranks each part of `svcpay` (a subpackage, or a module at its root): `protocol`
(wire formats, pricing terms, settlement errors) and `rpc` at the bottom above the root's
small modules, then `schemes` (one package per way to pay) and `program`, then the `gate`,
the `facilitator`, the paying `client` and the drop-in validator (`localnet`) that plug them
in, and so on up to the CLI. A module imports from its own part or from a part of a lower
layer, never from another part of its own layer nor from above; each package's
`__init__` docstring names its layer ("Layer N", docs/adr/0041), and a new part fails
here until it is placed in the table.

No module of `svcpay` imports, through any chain, one that imports it back.

Every import counts, for both rules: at module level, inside functions (deferred so a
command starts fast, or because an extra may be missing) and under `if TYPE_CHECKING:`.
A typing-only import is still a dependency (the reader and mypy follow it), and it is how
the circles this test first found hid: the demo's flows and `Walkthrough`,
`protocol.pricing` and `schemes.decision`. Names loaded by `importlib` from a string (the
lazy `__getattr__` of `svcpay.gate` and `svcpay.mcp`) are not seen.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "py" / "svcpay"

LAYERS = {
    # 0: the root's small modules; none imports another part of svcpay.
    "svcpay": 0,  # the package's own __init__
    "_extras": 0,
    "amounts": 0,
    "keepalive": 0,
    "keys": 0,
    "rpc_errors": 0,
    "progress": 0,
    "stopping": 0,
    "watchdog": 0,
    "webhooks": 0,
    # 1: wire formats and terms; talking to the RPC provider.
    "protocol": 1,
    "rpc": 1,
    # 2: the ways to pay; the on-chain program's client.
    "program": 2,
    "schemes": 2,
    # 3: what plugs schemes and the program in, and the drop-in validator.
    "client": 3,
    "facilitator": 3,
    "gate": 3,
    "localnet": 3,
    # 4: built on the gate and the client.
    "examples": 4,
    "mcp": 4,
    # 5: the walkthrough, over all of them.
    "demo": 5,
    # 6: the command line; 7: its entry point.
    "cli": 6,
    "__main__": 7,
}


def modules(root: Path) -> dict[str, Path]:
    """Every module under `root` (a package directory), by dotted name."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def imports(name: str, path: Path) -> Iterator[tuple[int, str]]:
    """(line, dotted name) of every import in the module `name` at `path`, wherever it is
    (module level, a function, `if TYPE_CHECKING:`), relative ones made absolute. For
    `from a import b` it is "a.b" (b may be a module, or a name in a)."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            for alias in node.names:
                yield node.lineno, module if alias.name == "*" else f"{module}.{alias.name}"


def import_graph(root: Path) -> dict[str, dict[str, int]]:
    """Module -> {module it imports: line}, over the modules under `root`; an import names
    the deepest module it reaches ("svcpay.gate.core.GateCore" -> svcpay.gate.core)."""
    known = modules(root)
    graph: dict[str, dict[str, int]] = {}
    for name, path in known.items():
        edges: dict[str, int] = {}
        for line, target in imports(name, path):
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                edges.setdefault(target, line)
        graph[name] = edges
    return graph


def circles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected parts of more than one module (Tarjan's algorithm, iterative):
    each is a set of modules that import each other through some chain."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, targets = work[-1]
            for target in targets:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph[target]))))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    part = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        part.append(member)
                        if member == node:
                            break
                    if len(part) > 1:
                        found.append(sorted(part))
    return found


def part_of(module: str) -> str:
    """ "svcpay.gate.core" -> "gate"; "svcpay" -> "svcpay"."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def wrong_way(graph: dict[str, dict[str, int]]) -> list[str]:
    """Each import from a part of the same layer or a higher one, as "from -> to (line)"."""
    crossings = []
    for module, edges in sorted(graph.items()):
        here = part_of(module)
        for target, line in sorted(edges.items()):
            there = part_of(target)
            if there != here and LAYERS[there] >= LAYERS[here]:
                crossings.append(
                    f"{module}:{line} (layer {LAYERS[here]}) imports {target} "
                    f"(layer {LAYERS[there]})"
                )
    return crossings


def test_every_part_of_the_package_has_a_layer() -> None:
    parts = {part_of(module) for module in modules(PACKAGE)}
    assert sorted(parts - set(LAYERS)) == []
    assert sorted(set(LAYERS) - parts) == []


def test_no_import_circle() -> None:
    assert circles(import_graph(PACKAGE)) == []


def test_each_part_imports_only_from_itself_or_a_lower_layer() -> None:
    assert wrong_way(import_graph(PACKAGE)) == []


def test_each_package_docstring_names_its_layer() -> None:
    wrong = []
    for part, layer in sorted(LAYERS.items()):
        init = PACKAGE / part / "__init__.py"
        if not init.exists():
            continue  # a module at the root (or the package's own __init__)
        docstring = ast.get_docstring(ast.parse(init.read_text())) or ""
        if f"Layer {layer} (docs/adr/0041)" not in docstring:
            wrong.append(f"svcpay.{part}: no 'Layer {layer} (docs/adr/0041)' in its docstring")
    assert wrong == []


def fake_package(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "svcpay"
    for name, text in {"__init__.py": "", **files}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    for directory in [p for p in root.rglob("*") if p.is_dir()]:
        (directory / "__init__.py").touch()
    return root


def test_the_checks_see_circles_and_upward_imports_wherever_they_are(tmp_path: Path) -> None:
    root = fake_package(
        tmp_path,
        {
            "protocol/pricing.py": (
                "from typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n    from svcpay.schemes.decision import Request\n"
            ),
            "schemes/decision.py": "def f():\n    from ..protocol import pricing\n",
            "gate/core.py": "import svcpay.schemes.decision\nfrom . import asgi\n",
            "gate/asgi.py": "from svcpay.facilitator.app import create_app\n",
            "facilitator/app.py": "",
        },
    )
    graph = import_graph(root)
    assert graph["svcpay.gate.core"] == {"svcpay.schemes.decision": 1, "svcpay.gate.asgi": 2}
    assert graph["svcpay.schemes.decision"] == {"svcpay.protocol.pricing": 2}
    assert circles(graph) == [["svcpay.protocol.pricing", "svcpay.schemes.decision"]]
    assert wrong_way(graph) == [
        "svcpay.gate.asgi:1 (layer 3) imports svcpay.facilitator.app (layer 3)",
        "svcpay.protocol.pricing:3 (layer 1) imports svcpay.schemes.decision (layer 2)",
    ]
