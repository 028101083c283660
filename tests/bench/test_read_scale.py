"""bench/bench_read_scale.py --quick runs end to end: real seeding, a real server, real load."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.bench.quick import run_quick


@pytest.mark.slow
def test_read_scale_quick(tmp_path: Path) -> None:
    last = run_quick("bench_read_scale.py", tmp_path / "read_scale_quick.json")
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
