"""The package's layers (docs/adr/0028): `protocol` (wire formats, pricing terms, settlement
errors) at the bottom, then `schemes` (one module per way to pay), then the `gate` and the
`facilitator` that plug schemes in. A module imports only from its own layer or below;
typing-only imports (under `if TYPE_CHECKING:`) are exempt."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "py" / "svcpay"
FORBIDDEN = {
    "protocol": ("svcpay.schemes", "svcpay.gate", "svcpay.facilitator"),
    "schemes": ("svcpay.gate", "svcpay.facilitator"),
}


def runtime_imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text())
    typing_only: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            typing_only |= {id(n) for child in node.body for n in ast.walk(child)}
    found = []
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.ImportFrom) and node.module:
            found.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
    return found


def test_each_layer_imports_only_from_itself_or_below() -> None:
    crossings = []
    for layer, forbidden in FORBIDDEN.items():
        files = sorted((PACKAGE / layer).rglob("*.py"))
        assert files, layer
        for path in files:
            for line, module in runtime_imports(path):
                if module.startswith(forbidden):
                    crossings.append(f"{path.relative_to(PACKAGE)}:{line} imports {module}")
    assert crossings == []


def test_the_check_sees_an_upward_import(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "from typing import TYPE_CHECKING\nimport svcpay.gate.core\n"
        "if TYPE_CHECKING:\n    from svcpay.facilitator import app\n"
    )
    assert runtime_imports(module) == [(1, "typing"), (2, "svcpay.gate.core")]
