"""Run one benchmark's ``--quick`` mode as a user would, and read its figures back."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.children import run_json

ROOT = Path(__file__).resolve().parents[2]


def run_quick(script: str, out: Path) -> dict[str, Any]:
    """``python bench/SCRIPT --quick --out OUT`` from the repository root; the figures are the last
    stdout line (one JSON object, the benchmarks' contract) and equal what OUT holds."""
    last = run_json(
        [str(ROOT / "bench" / script), "--quick", "--out", str(out)], timeout=600, cwd=ROOT
    )
    assert json.loads(out.read_text()) == last
    return last
