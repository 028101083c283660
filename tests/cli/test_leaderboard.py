"""``normfree leaderboard``: the CLI files arms in groups as the API does."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from normfree.cli import main
from normfree.specs import NormSpec, StudySpec, TrialConfig, TrialResult
from normfree.storage import Database, Repository


def _board_db(path: Path) -> str:
    """erf (a catalog function: no candidate row), a stored user function and LayerNorm."""
    url = f"sqlite:///{path}"
    db = Database(url)
    db.migrate()
    repo = Repository(db, max_attempts=3)
    repo.upsert_candidate({"name": "mine", "group": "user", "properties": {"odd": True}})
    sid = repo.create_study(StudySpec(kind="options", proxy="vit-tiny", functions=["erf"]))
    values = {"erf": [0.9, 0.92], "mine": [0.5, 0.52], "layernorm": [0.8, 0.81]}
    configs = [
        TrialConfig(proxy="vit-tiny", norm=NormSpec(name=n), seed=s)
        for n, vs in values.items()
        for s in range(len(vs))
    ]
    repo.add_trials(sid, [(c, {"function": c.norm.name}, None) for c in configs])
    while (lease := repo.lease_next(sid, "t", 60)) is not None:
        value = values[lease.config.norm.name][lease.config.seed]
        result = TrialResult(status="complete", metrics={"val_acc": value}, objective="val_acc")
        assert repo.finish_trial(lease.id, "t", lease.attempt, result)
    db.dispose()
    return url


def _rows(*args: str) -> list[dict]:
    res = CliRunner().invoke(main, ["leaderboard", *args, "--json"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return json.loads(res.output.strip().splitlines()[-1])["rows"]


def test_group_keeps_catalog_functions(tmp_path: Path) -> None:
    db = _board_db(tmp_path / "board.db")
    everything = _rows("--proxy", "vit-tiny", "--db", db)
    assert [r["candidate"] for r in everything] == ["erf", "layernorm", "mine"]
    natural = _rows("--proxy", "vit-tiny", "--group", "natural", "--db", db)
    assert [(r["candidate"], r["group"], r["rank"]) for r in natural] == [("erf", "natural", 1)]
    assert natural[0]["properties"]["odd"] is True  # filled from the catalog, as the API does
    user = _rows("--proxy", "vit-tiny", "--group", "user", "--db", db)
    assert [r["candidate"] for r in user] == ["mine"]
    baseline = _rows("--proxy", "vit-tiny", "--group", "baseline", "--db", db)
    assert [r["candidate"] for r in baseline] == ["layernorm"]
