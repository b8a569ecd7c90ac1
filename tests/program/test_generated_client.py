"""py/svcpay/program/generated/ is exactly what scripts/gen-client makes from the current IDL."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GENERATED = ROOT / "py" / "svcpay" / "program" / "generated"


def files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


def test_generated_client_is_up_to_date(tmp_path: Path) -> None:
    out = tmp_path / "generated"
    subprocess.run([sys.executable, str(ROOT / "scripts" / "gen-client"), str(out)], check=True)
    fresh, committed = files(out), files(GENERATED)
    assert fresh.keys() == committed.keys(), "file list differs: run scripts/gen-client"
    stale = [name for name in fresh if fresh[name] != committed[name]]
    assert not stale, f"stale generated files {stale}: run scripts/gen-client"
