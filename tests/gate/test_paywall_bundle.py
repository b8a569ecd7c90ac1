"""py/svcpay/gate/static/paywall.js is exactly what scripts/build-paywall makes from
web/paywall (its source and the npm packages its lock pins), as the generated client is
checked against the IDL."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "py" / "svcpay" / "gate" / "static" / "paywall.js"


def test_the_wallet_bundle_is_up_to_date(tmp_path: Path) -> None:
    out = tmp_path / "paywall.js"
    done = subprocess.run(
        [str(ROOT / "scripts" / "build-paywall"), str(out)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert out.read_bytes() == COMMITTED.read_bytes(), "stale: run scripts/build-paywall"


def test_the_bundle_can_be_inlined_in_the_page() -> None:
    text = COMMITTED.read_text("utf-8").lower()
    assert "</script" not in text and "<!--" not in text
