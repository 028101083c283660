"""The study and leaderboard commands, through click, on a real database and a local Ray."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from normfree.search_space import catalog
from tests.cli import run as _run
from tests.cli import run_json as _json
from tests.workers.engine_support import ray_cluster


@pytest.fixture(scope="module")
def _ray() -> Iterator[None]:
    yield from ray_cluster()


def test_property_detach_status_run_leaderboard(tmp_path: Path, _ray: None) -> None:
    db = f"sqlite:///{tmp_path / 'cli.db'}"
    created = _json(
        "study", "property", "--transform", "shift_h", "--functions", "erf",
        "--values", "-0.5,0.5", "--proxy", "vit-tiny", "--seeds", "2", "--epochs", "1",
        "--detach", "--db", db,
    )  # fmt: skip
    sid = created["study_id"]
    assert created["trials"] == 6  # 2 values x 2 seeds + LayerNorm x 2 seeds
    status = _json("study", "status", str(sid), "--db", db)
    assert status["counts"]["WAITING"] == 6 and status["status"] == "pending"
    ran = _json("study", "run", str(sid), "--db", db)
    assert ran["status"] == "complete" and ran["counts"]["COMPLETE"] == 6
    out = _json("leaderboard", "--proxy", "vit-tiny", "--study", str(sid), "--db", db)
    board = out["rows"]
    # a smoke preset and two seeds: no fidelity verdict, and the ranking is provisional
    assert out["fidelity"]["headline"].startswith("no fidelity headline")
    assert out["caveats"]["provisional"] and not out["caveats"]["calibrated"]
    assert {r["candidate"] for r in board} == {
        "shift_h(erf, -0.5)",
        "shift_h(erf, 0.5)",
        "layernorm",
    }
    assert all(r["n"] == 2 for r in board) and [r["rank"] for r in board] == [1, 2, 3]
    code, out = _run("leaderboard", "--proxy", "vit-tiny", "--study", str(sid), "--db", db)
    assert code == 0 and "layernorm" in out and "mean ± CI" in out
    assert "no fidelity headline" in out and "caveat: provisional ranking" in out
    code, out = _run("study", "status", str(sid), "--db", db)
    assert code == 0 and "COMPLETE" in out
    listed = _json("study", "list", "--db", db)
    assert listed[0]["id"] == sid


def test_pause_resume_cancel_commands(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'cli.db'}"
    sid = _json(
        "study", "options", "--functions", "erf,tanh", "--option", "alpha0=0.5,1",
        "--option", "layerscale_init=off,1e-5", "--proxy", "vit-tiny", "--seeds", "1",
        "--baselines", "", "--detach", "--db", db,
    )["study_id"]  # fmt: skip
    assert _json("study", "pause", str(sid), "--db", db)["status"] == "paused"
    # The API's state machine: a paused study cannot be paused again.
    code, text = _run("study", "pause", str(sid), "--db", db, "--json")
    assert code == 1 and "cannot pause a study that is paused" in json.loads(text)["error"]
    assert _json("study", "resume", str(sid), "--detach", "--db", db)["status"] == "running"
    out = _json("study", "cancel", str(sid), "--db", db)
    assert out == {"study_id": sid, "status": "cancelled", "cancelled_waiting": 8}
    code, text = _run("study", "cancel", str(sid), "--db", db, "--json")
    assert code == 1 and "cancelled" in json.loads(text)["error"]


def test_bad_input_is_a_clear_error(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'cli.db'}"
    code, out = _run("study", "status", "99", "--db", db, "--json")
    assert code == 1 and json.loads(out)["error"] == "no study 99"
    code, out = _run(
        "study", "options", "--functions", "erf", "--option", "alpha0", "--proxy", "vit-tiny",
        "--detach", "--db", db, "--json",
    )  # fmt: skip
    assert code == 2 and "NAME=V1,V2" in json.loads(out)["error"]
    code, out = _run(
        "study", "property", "--transform", "not_a_transform", "--proxy", "vit-tiny",
        "--detach", "--db", db, "--json",
    )  # fmt: skip
    assert code == 2 and "no paper grid" in json.loads(out)["error"]
    code, out = _run(
        "study", "search", "--proxy", "vit-tiny", "--lr-range", "1,0.1", "--detach",
        "--db", db, "--json",
    )  # fmt: skip
    assert code == 2 and "LO,HI" in json.loads(out)["error"]
    code, out = _run(
        "study", "property", "--transform", "shift_h", "--functions", "erf", "--values", "a,b",
        "--proxy", "vit-tiny", "--db", db,
    )  # fmt: skip
    assert code == 2 and "comma-separated numbers" in out


def test_demo_study_runs_end_to_end_and_prints_where_results_are(
    tmp_path: Path, _ray: None, capsys: pytest.CaptureFixture[str]
) -> None:
    from normfree.cli.demo import DEMO_STUDY, demo_study, print_demo_study

    assert DEMO_STUDY["proxy"] == "vit-screen-heldout" and DEMO_STUDY["baselines"] == ["layernorm"]
    assert set(DEMO_STUDY["values"]) >= {-2.0, 2.0}  # the Derf paper's failing shifts
    db = f"sqlite:///{tmp_path / 'demo.db'}"
    out = demo_study(
        db, as_json=True, proxy="vit-tiny", epochs=1, seeds=1, functions=["erf"], values=[0.0]
    )
    assert out["run"]["status"] == "complete" and out["run"]["counts"]["COMPLETE"] == 2
    # shift_h(erf, 0) is erf, but alone an arm keeps the name its study gave it (a property
    # study's cell reads so; storage.leaderboard.merge_identities)
    assert {r["candidate"] for r in out["leaderboard"]} == {"shift_h(erf, 0)", "layernorm"}
    assert out["fidelity"]["subject"]["study_id"] == out["study_id"]
    print_demo_study(out)
    text = capsys.readouterr().out
    assert "demo.db" in text and "demo-optuna.db" in text and "layernorm" in text
    assert "Against the published results" in text
    # one seed on a smoke preset: a provisional ranking and no fidelity verdict, said so
    assert out["caveats"]["provisional"] and "caveat: provisional ranking" in text
    assert "no fidelity headline" in text and "mean Spearman" not in text


def test_demo_command_evaluates_the_catalog_then_runs_a_study(tmp_path: Path, _ray: None) -> None:
    db = f"sqlite:///{tmp_path / 'demo.db'}"
    data = _json("demo", "--quick", "--db", db)
    assert len(data["candidates"]) == len(catalog.names()) and data["baselines"][0] == "layernorm"
    study = data["study"]
    assert study["run"]["status"] == "complete" and study["proxy"] == "vit-tiny"
    assert study["run"]["counts"]["COMPLETE"] == 21  # 2 functions x 3 values x 3 seeds + LN x 3
    assert study["database"].endswith("demo.db")


def test_a_study_whose_every_trial_fails_ends_failed_and_exits_non_zero(
    tmp_path: Path, _ray: None
) -> None:
    """Failure looks like failure (issue 24, point 3): a function that diverges at once (loss
    not finite within a few steps of vit-tiny) trains nothing; the study ends ``failed``, ``study
    run`` exits 1 and says why per arm, and the leaderboard lists the arm apart, unranked."""
    from normfree import storage
    from normfree.settings import Settings

    db = f"sqlite:///{tmp_path / 'cli.db'}"
    store = storage.open(Settings(database_url=db))
    store.repo.upsert_candidate({"name": "blowup", "formula": "1000000*u"})
    sid = _json(
        "study", "options", "--functions", "blowup", "--option", "alpha0=0.5",
        "--proxy", "vit-tiny", "--seeds", "2", "--epochs", "1", "--baselines", "",
        "--detach", "--db", db,
    )["study_id"]  # fmt: skip
    code, text = _run("study", "run", str(sid), "--db", db, "--json")
    assert code == 1, text
    ran = json.loads(text.strip().splitlines()[-1])
    assert ran["status"] == "failed" and ran["counts"]["COMPLETE"] == 0
    (row,) = ran["leaderboard"]
    assert row["rank"] is None and not row["ranked"] and row["failure"]["count"] == 2
    assert store.repo.get_study(sid)["status"] == "failed"
    code, out = _run("study", "run", str(sid), "--db", db)  # again: nothing to run, still failed
    assert code == 1
    assert f"error: study {sid} failed: no trial completed" in out
    assert f"  blowup: {row['failure']['reason']} (2 of 2 trials; 2 failed in all)" in out
    code, out = _run("leaderboard", "--proxy", "vit-tiny", "--study", str(sid), "--db", db)
    assert code == 0 and "not ranked: no seed completed" in out and "mean ± CI" not in out


def test_search_run_says_which_functions_the_budget_never_reached(
    tmp_path: Path, _ray: None
) -> None:
    db = f"sqlite:///{tmp_path / 'search.db'}"
    created = _json(
        "study", "search", "--functions", "erf,tanh,arctan", "--n-trials", "2",
        "--extra-seeds", "0", "--pruner", "none", "--proxy", "vit-tiny", "--seeds", "1",
        "--epochs", "1", "--detach", "--db", db,
    )  # fmt: skip
    code, out = _run("study", "run", str(created["study_id"]), "--db", db)
    assert code == 0, out
    # the first two named are asked first; the third is never tried, and the run says why
    assert "arctan: never tried (budget exhausted" in out
    assert "tanh: never tried" not in out and "erf: never tried" not in out
