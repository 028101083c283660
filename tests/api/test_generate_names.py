"""A generate study seeded with a stored user candidate (issue 24, point 1): REST and the CLI
accept the stored name (``softsign15``, also inside a transform call) through the one resolver,
bake its formula into the seed's trials, and the seeds train on the vit-tiny smoke preset."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from normfree.cli import main
from normfree.specs import TrialConfig, TrialResult
from tests.api.conftest import Api
from tests.workers.engine_support import engine_settings, ray_cluster

SOFTSIGN15 = "1.5*u/(1+abs(u))"
TINY = {"generations": 0, "population": 1, "prescreen": False}


@pytest.fixture(scope="module")
def _ray() -> Iterator[None]:
    yield from ray_cluster()


def _submit(api: Api) -> None:
    r = api.client.post(
        "/api/candidates", json={"name": "softsign15", "formula": SOFTSIGN15}, headers=api.auth
    )
    assert r.status_code in (200, 201, 202), r.text


def test_rest_accepts_a_stored_seed_and_its_trials_train(
    make_api: Callable[..., Api], sqlite_database_url: str
) -> None:
    from normfree.workers.driver import StudyDriver
    from normfree.workers.importance import study_importance
    from normfree.workers.trainer import train_trial

    api = make_api(sqlite_database_url, prescreen=False)
    _submit(api)
    body = {
        "kind": "generate", "proxy": "vit-tiny", "seeds": 1, "epochs": 1, "baselines": [],
        "functions": ["softsign15", "shift_h(softsign15, 0.5)", "erf"], "params": TINY,
    }  # fmt: skip
    r = api.client.post("/api/studies", json=body, headers=api.auth)
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    stored = api.repo.get_study(sid)["spec"]
    assert stored["definitions"] == {"softsign15": SOFTSIGN15}

    # generation 0 is planned as the driver plans it; each seed trains as a worker runs it
    driver = StudyDriver(sid, settings=engine_settings(sqlite_database_url))
    assert driver.kind.refill(driver)
    rows = {row["candidate"]: row for row in api.repo.list_trials(sid)}
    assert set(rows) == {"softsign15", "shift_h(softsign15, 0.5)", "erf"}
    norms = {n: TrialConfig.model_validate(row["config"]).norm for n, row in rows.items()}
    assert norms["softsign15"].formula == SOFTSIGN15  # baked: no database on the worker
    assert norms["shift_h(softsign15, 0.5)"].formula == f"shift_h({SOFTSIGN15}, 0.5)"
    assert norms["erf"].formula is None
    while (lease := api.repo.lease_next(sid, "seed-test", 600)) is not None:
        if lease.config.norm.name == "erf":  # the catalog's seed: not what this test is about
            result = TrialResult(status="complete", objective="val_acc", metrics={"val_acc": 0.1})
        else:
            result = train_trial(lease.config, threads=1)
        assert result.status in ("complete", "diverged"), (lease.config.norm.name, result.error)
        assert api.repo.finish_trial(lease.id, "seed-test", lease.attempt, result)
    # property importance reads each seed's properties (the transform of a stored one too)
    assert study_importance(api.repo, sid)["n_candidates"] == 3

    # an unknown seed is refused with the nearest names, and nothing is written
    typo = {**body, "functions": ["softsing15"]}
    r = api.client.post("/api/studies", json=typo, headers=api.auth)
    assert r.status_code == 422 and "did you mean 'softsign15'" in r.text, r.text
    assert api.client.get("/api/studies").json()["count"] == 1


def test_cli_runs_a_generate_study_seeded_with_a_stored_name(tmp_path: Path, _ray: None) -> None:
    from normfree import storage
    from normfree.search_space import parse
    from normfree.settings import Settings

    db = f"sqlite:///{tmp_path / 'gen-names.db'}"
    store = storage.open(Settings(database_url=db))
    store.repo.upsert_candidate(parse(SOFTSIGN15, name="softsign15"))
    args = [
        "study", "generate", "--proxy", "vit-tiny", "--functions", "softsign15",
        "--generations", "0", "--population", "1", "--no-prescreen", "--seeds", "1",
        "--epochs", "1", "--baselines", "", "--parallel", "1", "--db", db, "--json",
    ]  # fmt: skip
    res = CliRunner().invoke(main, args, catch_exceptions=False)
    assert res.exit_code == 0, res.output
    out = json.loads(res.output.strip().splitlines()[-1])
    assert out["run"]["status"] == "complete", out["run"]
    (trial,) = store.repo.list_trials(out["study_id"])
    assert trial["candidate"] == "softsign15" and trial["status"] in ("COMPLETE", "DIVERGED")
    assert trial["config"]["norm"]["formula"] == SOFTSIGN15
    assert [g["trained"] for g in out["generate"]["generations"]] == [["softsign15"]]

    bad = CliRunner().invoke(main, [*args[:4], "softsing15", *args[5:]])
    assert bad.exit_code != 0 and "softsign15" in bad.output, bad.output
