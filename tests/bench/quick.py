"""Run one benchmark's ``--quick`` mode as a user would, and read its figures back."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def run_quick(script: str, out: Path) -> dict[str, Any]:
    """``python bench/SCRIPT --quick --out OUT`` from the repository root; the figures are the last
    stdout line (one JSON object, the benchmarks' contract) and equal what OUT holds."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / script), "--quick", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    last = json.loads(proc.stdout.strip().splitlines()[-1])
    assert json.loads(out.read_text()) == last
    return last
