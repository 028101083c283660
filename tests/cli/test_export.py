"""``normfree export``: the files the API serves, written from the database or downloaded from a
server, read back with pandas; and clear errors for what it cannot do."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient

from normfree.api import create_app
from normfree.cli import main
from normfree.settings import Settings
from normfree.testing.live import app_server
from normfree.testing.seeding import Seeded, seed_property_study

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def seeded_db(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Seeded]:
    url = f"sqlite:///{tmp_path_factory.mktemp('export') / 'n.db'}"
    return url, seed_property_study(Settings(database_url=url))


def _cli(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(main, ["export", *args], catch_exceptions=False)
    return res.exit_code, res.output


@pytest.mark.parametrize("fmt", ["csv", "parquet", "json"])
@pytest.mark.parametrize("what", ["trials", "arms", "leaderboard", "curves"])
def test_files_equal_the_api_exports(
    seeded_db: tuple[str, Seeded], tmp_path: Path, what: str, fmt: str
) -> None:
    url, seeded = seeded_db
    key = "vit-tiny" if what == "leaderboard" else str(seeded.study_id)
    out = tmp_path / f"table.{fmt}"
    code, text = _cli(what, key, "--db", url, "-o", str(out), "--json")
    assert code == 0, text
    summary = json.loads(text)
    assert summary["format"] == fmt and summary["path"] == str(out)
    read = {"csv": pd.read_csv, "parquet": pd.read_parquet, "json": pd.read_json}[fmt]
    mine = read(out)
    assert summary["rows"] == len(mine) > 0
    path = {
        "trials": f"/api/studies/{seeded.study_id}/trials",
        "arms": f"/api/studies/{seeded.study_id}/arms",
        "curves": f"/api/studies/{seeded.study_id}/curves",
        "leaderboard": "/api/leaderboards/vit-tiny",
    }[what]
    with TestClient(create_app(Settings(database_url=url), run_studies=False)) as c:
        served = pd.read_parquet(io.BytesIO(c.get(path, params={"format": "parquet"}).content))
    assert list(mine.columns) == list(served.columns)
    for col in (
        "objective_value", "mean", "ci_low", "n", "metrics.val_acc", "diag.alpha_mean", "value",
    ):  # fmt: skip
        if col in served:
            pd.testing.assert_series_equal(
                mine[col].astype(float), served[col].astype(float), check_names=False
            )


@pytest.mark.parametrize("what", ["leaderboard", "arms"])
def test_the_command_exits_cleanly_in_its_own_process(
    seeded_db: tuple[str, Seeded], tmp_path: Path, what: str
) -> None:
    """The whole process, not only the command's function: a leaderboard export asked for the
    board's fidelity line, whose thread was still in scipy when the interpreter finalized, and
    the process aborted (exit 134, "FATAL: exception not rethrown") after writing its file."""
    url, seeded = seeded_db
    key = "vit-tiny" if what == "leaderboard" else str(seeded.study_id)
    # a user's settings (the suite waits for every line: here none is waited for, so a line
    # asked for would still be computing at the exit)
    env = {k: v for k, v in os.environ.items() if not k.startswith("NORMFREE_FIDELITY_LINE")}
    env.update(PYTHONPATH=str(ROOT), NORMFREE_FIDELITY_LINE_WAIT_S="0")
    done = subprocess.run(
        [sys.executable, "-m", "normfree", "export", what, key, "--db", url, "--format", "csv",
         "-o", str(tmp_path / "out.csv")],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "FATAL" not in done.stderr and len(pd.read_csv(tmp_path / "out.csv")) > 0


def test_stdout_through_the_entry_point(seeded_db: tuple[str, Seeded]) -> None:
    """``python -m normfree export ... `` writes the CSV itself to stdout (a pipe)."""
    url, seeded = seeded_db
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "normfree", "export", "trials", str(seeded.study_id), "--db", url,
         "--status", "diverged"],
        capture_output=True, env=env, cwd=ROOT, timeout=120, check=True,
    )  # fmt: skip
    df = pd.read_csv(io.BytesIO(done.stdout))
    assert list(df["id"]) == seeded.diverged_trial_ids


def test_download_from_a_server(seeded_db: tuple[str, Seeded], tmp_path: Path) -> None:
    url, seeded = seeded_db
    app = create_app(Settings(database_url=url), run_studies=False)
    out = tmp_path / "arms.parquet"
    with app_server(app) as server:
        code, text = _cli("arms", str(seeded.study_id), "--url", server, "-o", str(out), "--json")
        assert code == 0, text
        assert json.loads(text)["rows"] == len(pd.read_parquet(out))
        code, text = _cli("arms", "999", "--url", server, "--json", "-o", str(out))
        assert code == 2 and "404" in json.loads(text)["error"]
        code, text = _cli("arms", "1", "--url", server, "--format", "json", "-o", str(out))
        assert code == 2 and "csv or parquet" in text


def test_curves_of_chosen_trials_here_and_from_a_server(
    seeded_db: tuple[str, Seeded], tmp_path: Path
) -> None:
    url, seeded = seeded_db
    sid, chosen = str(seeded.study_id), seeded.trial_ids[:2]
    here, there = tmp_path / "here.csv", tmp_path / "there.csv"
    trials = [a for t in chosen for a in ("--trial", str(t))]
    code, text = _cli("curves", sid, *trials, "--db", url, "-o", str(here), "--json")
    assert code == 0, text
    mine = pd.read_csv(here)
    assert sorted(set(mine["trial_id"])) == chosen and json.loads(text)["rows"] == len(mine)
    with app_server(create_app(Settings(database_url=url), run_studies=False)) as server:
        code, text = _cli("curves", sid, *trials, "--url", server, "-o", str(there), "--json")
        assert code == 0, text
        assert there.read_bytes() == here.read_bytes()
        code, text = _cli("curves", sid, "--trial", "9999", "--url", server, "--json", "-o", "x")
        assert code == 2 and "no trial 9999" in json.loads(text)["error"]
    code, text = _cli("curves", sid, "--trial", "9999", "--db", url, "--json", "-o", str(here))
    assert code == 2 and "no trial 9999" in json.loads(text)["error"]


def test_errors_are_clear(seeded_db: tuple[str, Seeded], tmp_path: Path) -> None:
    url, _ = seeded_db
    code, text = _cli("trials", "999", "--db", url, "--json", "-o", str(tmp_path / "x.csv"))
    assert code == 2 and "no study 999" in json.loads(text)["error"]
    code, text = _cli("trials", "1", "--db", url, "--json")
    assert code == 2 and "--output" in json.loads(text)["error"]
    code, text = _cli("trials", "1", "--db", url, "--status", "nope")
    assert code == 2 and "unknown status NOPE" in text
    code, text = _cli("leaderboard", "nosuchproxy", "--db", url, "-o", str(tmp_path / "b.csv"))
    assert code == 2 and "unknown proxy" in text
    code, text = _cli("arms", "1", "--db", url, "-o", str(tmp_path / "no" / "dir.csv"))
    assert code == 2 and "cannot write" in text


@pytest.mark.parametrize("args", [("export", "--help"), ("export", "trials", "--help")])
def test_help_loads_nothing_heavy(tmp_path: Path, args: tuple[str, ...]) -> None:
    """The rule of tests/cli/test_quick.py: help imports neither torch nor the table libraries."""
    from tests.cli.test_quick import HEAVY, LIGHT, _loaded

    heavy = (*HEAVY, *LIGHT, "httpx", "pandas", "pyarrow")
    assert _loaded(*args, cache=tmp_path, heavy=heavy) == {"code": 0, "heavy": []}


def test_the_command_offers_the_formats_the_api_writes() -> None:
    from normfree.api.export import FILE_FORMATS
    from normfree.cli.export import FORMATS

    assert set(FORMATS) == set(FILE_FORMATS)
