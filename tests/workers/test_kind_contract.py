"""The study-kind contract, run for real: every registered kind (a new one too, unchanged)
goes through create -> plan -> run on a smoke preset -> leaderboard, on embedded Ray and SQLite.

Each kind states the small study that exercises it (``StudyKind.smoke_spec``); nothing here
names a kind, so a kind registered without a working plan, driver path or report fails here.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from normfree.workers import kinds
from normfree.workers.cost import estimate
from normfree.workers.driver import StudyDriver, create_study
from normfree.workers.execution import RayExecutor, TrialStore
from tests.workers.engine_support import engine_settings, ray_cluster

SMOKE_PROXY = "vit-tiny"


@pytest.fixture(scope="module", autouse=True)
def _ray() -> Iterator[None]:
    yield from ray_cluster()


@pytest.mark.parametrize("name", sorted(kinds.KINDS))
def test_every_kind_creates_plans_runs_and_ranks(name: str, tmp_path: Path) -> None:
    kind = kinds.get(name)
    spec = kind.smoke_spec(SMOKE_PROXY)
    assert spec.kind == name and spec.proxy == SMOKE_PROXY
    assert kind.summary.strip()
    assert kind.problems(spec) == [], kind.problems(spec)
    est = estimate(spec)
    assert est.trials >= 1 and est.trial_seconds > 0

    url = f"sqlite:///{tmp_path / 'nf.db'}"
    settings = engine_settings(url)
    # create as a request is created (REST and CLI): validation, params, cost
    study_id = create_study(spec, settings=settings, request=True)
    store = TrialStore(url)
    planned = kind.plan(spec)
    assert store.repo.study_progress(study_id)["total"] == len(planned)
    assert bool(planned) == kind.grid

    summary = StudyDriver(study_id, settings=settings, executor=RayExecutor(settings)).run()
    assert summary.status == "complete", summary
    trials = store.repo.list_trials(study_id)
    assert trials and all(t["status"] == "COMPLETE" for t in trials), trials
    assert len(trials) <= est.trials  # the estimate bounds what ran

    board = store.repo.leaderboard(SMOKE_PROXY, study_id=study_id)
    assert board and all(row["n"] >= 1 for row in board), board
    report = kind.report(store, study_id)
    if report is not None:
        assert all(isinstance(line, str) for line in kind.report_lines(report))
