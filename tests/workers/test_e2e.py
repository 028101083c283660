"""End to end on real parts: a tiny property study and a pruned search, local Ray, both DBs."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import optuna
import pytest

from normfree.specs import StudySpec
from normfree.testing.seeding import property_spec
from normfree.workers.driver import StudyDriver, create_study, optuna_study_name
from normfree.workers.execution import RayExecutor, TrialStore
from tests.workers.engine_support import engine_settings, ray_cluster


@pytest.fixture(scope="module", autouse=True)
def _ray() -> Iterator[None]:
    yield from ray_cluster()


def test_property_study_end_to_end(url: str) -> None:
    settings = engine_settings(url)
    spec = property_spec(functions=["erf"], values=[-1.0, 0.5])
    study_id = create_study(spec, settings=settings)
    store = TrialStore(url)
    assert store.repo.study_progress(study_id)["counts"]["WAITING"] == 6
    seen: list[dict[str, int]] = []
    summary = StudyDriver(
        study_id, settings=settings, executor=RayExecutor(settings), on_progress=seen.append
    ).run()
    assert summary.status == "complete" and summary.dispatched == 6 and summary.retried == 0
    trials = store.repo.list_trials(study_id)
    assert len(trials) == 6 and {t["status"] for t in trials} == {"COMPLETE"}
    assert all(t["attempt"] == 1 and t["value"] is not None for t in trials)
    # Two workers and the driver wrote concurrently (epochs, heartbeats, results, Optuna):
    # no write failed (SQLite: no "database is locked"), nothing was retried.
    assert all(t["error"] is None for t in trials)
    # Each trial wrote its curve; the epoch rows exist once per epoch.
    detail = store.repo.get_trial(trials[0]["id"])
    assert [c["epoch"] for c in detail["curves"]] == [1]
    # Optuna holds one finished trial per run, and each row knows its number.
    numbers = {t["optuna_number"] for t in trials}
    assert None not in numbers and len(numbers) == 6
    ostudy = optuna.load_study(
        study_name=optuna_study_name(study_id), storage=store.optuna_storage()
    )
    assert sum(t.state == optuna.trial.TrialState.COMPLETE for t in ostudy.trials) == 6
    # Leaderboard: 3 arms x 2 paired seeds, each compared with LayerNorm on the same seeds.
    board = store.repo.leaderboard("vit-tiny", study_id=study_id)
    assert len(board) == 3 and all(r["n"] == 2 for r in board)
    assert all(r["vs_layernorm"]["n_pairs"] == 2 for r in board if r["candidate"] != "layernorm")
    assert seen and sum(seen[-1].values()) == 6
    # Running a finished study again does nothing.
    again = StudyDriver(study_id, settings=settings).run()
    assert again.dispatched == 0 and again.status == "complete"


def _tpe_search(url: str, **fields: Any) -> tuple[int, Any, TrialStore, optuna.Study]:
    """A TPE search of 8 asks on one seed, created and driven to its end two trials at a time:
    its id, the driver's summary, the store and the Optuna study."""
    settings = engine_settings(url)
    spec = StudySpec(kind="search", seeds=1, sampler="tpe", n_trials=8, **fields)
    study_id = create_study(spec, settings=settings)
    summary = StudyDriver(study_id, settings=settings, max_parallel=2).run()
    store = TrialStore(url)
    name = optuna_study_name(study_id)
    return (
        study_id,
        summary,
        store,
        optuna.load_study(study_name=name, storage=store.optuna_storage()),
    )


def test_search_with_pruning_prunes_and_reseeds_the_best(url: str) -> None:
    study_id, summary, store, ostudy = _tpe_search(
        url,
        proxy="dit-tiny",  # continuous objective (val_loss): rungs have a strict order
        functions=["erf", "tanh", "arctan", "isru", "linear", "sin", "dampx", "smoothsign"],
        epochs=3,
        pruner="sha",
        extra_seeds_for_top=1,
        params={"top_arms": 2, "n_startup_trials": 4, "reduction_factor": 2},
    )
    assert summary.status == "complete"
    trials = store.repo.list_trials(study_id)
    pruned = [t for t in trials if t["status"] == "PRUNED"]
    assert pruned, "successive halving pruned nothing"
    # A pruned trial recorded the epochs it ran, up to the budget: successive halving may decide
    # at any reported epoch, the last one included (which of them depends on how the two
    # parallel trials' reports interleave, so the test does not pin it).
    for t in pruned:
        assert 1 <= len(store.repo.get_trial(t["id"])["curves"]) <= 3
    states = [t.state for t in ostudy.trials]
    assert len(states) == 8 and optuna.trial.TrialState.PRUNED in states
    assert optuna.trial.TrialState.RUNNING not in states
    # The two best arms got a second seed (seed 1), no other arm did.
    extra = [t for t in trials if t["seed"] == 1]
    assert len(extra) == 2 and all(t["optuna_number"] is None for t in extra)
    assert {t["status"] for t in extra} <= {"COMPLETE", "DIVERGED"}
    board = store.repo.leaderboard("dit-tiny", study_id=study_id)
    assert board[0]["direction"] == "minimize"
    assert {r["candidate"] for r in board if r["n"] == 2} == {t["candidate"] for t in extra}


def test_search_trains_each_function_once_and_answers_repeats_from_storage(url: str) -> None:
    # Issue 24: a 6-function search with n_trials 6 trained 3 (TPE asked tanh three times).
    # Now: the six are trained once each; asks 7 and 8 can only repeat a point (no alpha0 or lr
    # range), and are answered from the stored results without training.
    functions = ["erf", "tanh", "arctan", "isru", "linear", "sin"]
    study_id, summary, store, ostudy = _tpe_search(
        url, proxy="vit-tiny", functions=functions, epochs=1, pruner="none", extra_seeds_for_top=0
    )
    assert summary.status == "complete" and summary.dispatched == 6
    trials = store.repo.list_trials(study_id)
    assert sorted(t["candidate"] for t in trials) == sorted(functions)
    assert {t["status"] for t in trials} <= {"COMPLETE", "DIVERGED"}
    assert len(ostudy.trials) == 8
    assert all(t.state != optuna.trial.TrialState.RUNNING for t in ostudy.trials)
    value_of = {t["candidate"]: t["value"] for t in trials}
    repeats = [t for t in ostudy.trials if "duplicate_of" in t.user_attrs]
    assert len(repeats) == 2
    for t in repeats:  # the stored value of the point repeated, not a new training run
        if t.state == optuna.trial.TrialState.COMPLETE:
            assert t.value == value_of[t.params["norm"]]
    report = StudyDriver(study_id, settings=engine_settings(url)).kind.report(store, study_id)
    assert report["never_tried"] == [] and report["repeats"] == 2
