"""bench/bench_read_scale.py --quick runs end to end: real seeding, a real server, real load."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_read_scale_quick(tmp_path: Path) -> None:
    out = tmp_path / "read_scale_quick.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "bench_read_scale.py"), "--quick", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    last = json.loads(proc.stdout.strip().splitlines()[-1])  # one JSON object, last line
    assert json.loads(out.read_text()) == last
    run = last["runs"]["sqlite"]["scales"]["300"]
    assert run["seeding"]["trials"] >= 300
    names = {
        "floor_version", "leaderboard", "leaderboard_page", "study_summary", "study_page",
        "trial", "candidates", "submit",
    }  # fmt: skip
    assert set(run["endpoints"]) == names
    for name, figures in run["endpoints"].items():
        assert figures["errors"] == 0, (name, figures)
        assert figures["count"] > 0 and figures["p99_ms"] >= figures["p50_ms"] > 0
    assert run["write_alone"]["writes"] == run["write_under_readers"]["writes"] == 10
    assert run["readers_during_writes"]["errors"] == 0
