"""The driver's bookkeeping without Ray: Optuna reconciliation after crashes, search dedup."""

from __future__ import annotations

from pathlib import Path

import optuna

from normfree.specs import StudySpec, TrialResult
from normfree.workers.driver import StudyDriver, create_study
from normfree.workers.kinds.search import extra_seeds
from tests.workers.engine_support import engine_settings


def _result(value: float) -> TrialResult:
    return TrialResult(
        status="complete", metrics={"val_acc": value}, objective="val_acc", direction="maximize"
    )


def test_restarted_driver_tells_optuna_what_finished_unwatched(tmp_path: Path) -> None:
    settings = engine_settings(f"sqlite:///{tmp_path / 'nf.db'}")
    spec = StudySpec(kind="options", proxy="vit-tiny", seeds=2, functions=["erf"], epochs=1)
    study_id = create_study(spec, settings=settings)
    first = StudyDriver(study_id, settings=settings)
    leased = first.store.repo.lease_next(study_id, first.owner, 30.0)
    number = first._grid_number(leased)
    # Recorded on the row: a retried attempt leases it with this number (kept across attempts).
    assert first.store.repo.get_trial(leased.id)["optuna_number"] == number
    # The task wrote its result, then the driver died before telling Optuna ...
    assert first.store.repo.finish_trial(leased.id, first.owner, leased.attempt, _result(0.7))
    # ... and another process asked Optuna for a trial it never recorded.
    orphan = first.optuna.ask().number
    second = StudyDriver(study_id, settings=settings)
    second._reconcile()
    trials = {t.number: t for t in second.optuna.get_trials()}
    assert trials[number].state == optuna.trial.TrialState.COMPLETE
    assert trials[number].value == 0.7
    assert trials[number].user_attrs["function"] == "erf"
    assert trials[orphan].state == optuna.trial.TrialState.FAIL


def test_search_reuses_a_trained_point_instead_of_training_it_twice(tmp_path: Path) -> None:
    settings = engine_settings(f"sqlite:///{tmp_path / 'nf.db'}")
    spec = StudySpec(
        kind="search", proxy="vit-tiny", functions=["erf"], sampler="random", n_trials=3, epochs=1
    )
    study_id = create_study(spec, settings=settings)
    driver = StudyDriver(study_id, settings=settings)
    assert driver.kind.refill(driver)
    (row,) = driver.store.repo.list_trials(study_id)
    leased = driver.store.repo.lease_next(study_id, driver.owner, 30.0)
    assert leased.id == row["id"] and leased.optuna_number == row["optuna_number"]
    driver.store.repo.finish_trial(leased.id, driver.owner, leased.attempt, _result(0.4))
    driver.tell(leased.optuna_number, "COMPLETE", 0.4)
    # The only candidate again: told the stored value, nothing new to train.
    assert driver.kind.refill(driver) and driver.kind.refill(driver)
    assert len(driver.store.repo.list_trials(study_id)) == 1
    values = [t.value for t in driver.optuna.get_trials()]
    assert values == [0.4, 0.4, 0.4]
    assert not driver.kind.refill(driver)  # budget of 3 asks spent


def test_extra_seeds_are_planned_once_for_the_top_arms(tmp_path: Path) -> None:
    settings = engine_settings(f"sqlite:///{tmp_path / 'nf.db'}")
    spec = StudySpec(
        kind="search",
        proxy="vit-tiny",
        functions=["erf", "tanh", "isru"],
        sampler="random",
        n_trials=3,
        extra_seeds_for_top=2,
        params={"top_arms": 1},
        epochs=1,
    )
    study_id = create_study(spec, settings=settings)
    driver = StudyDriver(study_id, settings=settings)
    repo = driver.store.repo
    while driver.kind.refill(driver):
        leased = repo.lease_next(study_id, driver.owner, 30.0)
        if leased is not None:
            value = {"erf": 0.9, "tanh": 0.5, "isru": 0.3}[leased.config.norm.name]
            repo.finish_trial(leased.id, driver.owner, leased.attempt, _result(value))
    best = max(repo.list_trials(study_id, status="COMPLETE"), key=lambda r: r["value"])["candidate"]
    added = extra_seeds(driver)
    assert added == 2
    extra = repo.list_trials(study_id, status="WAITING")
    assert {r["candidate"] for r in extra} == {best} and {r["seed"] for r in extra} == {1, 2}
    assert extra_seeds(StudyDriver(study_id, settings=settings)) == 0  # idempotent


SIX = ["erf", "tanh", "arctan", "isru", "linear", "sin"]


def _search(tmp_path: Path, n_trials: int) -> tuple[StudyDriver, int]:
    settings = engine_settings(f"sqlite:///{tmp_path / 'nf.db'}")
    spec = StudySpec(
        kind="search",
        proxy="vit-tiny",
        functions=SIX,
        sampler="tpe",
        n_trials=n_trials,
        extra_seeds_for_top=0,
        epochs=1,
    )
    study_id = create_study(spec, settings=settings)
    return StudyDriver(study_id, settings=settings), study_id


def _run_fake(driver: StudyDriver, study_id: int, values: dict[str, float]) -> None:
    """The driver's refill loop with each trial 'trained' at once to a fixed value."""
    repo = driver.store.repo
    while driver.kind.refill(driver):
        leased = repo.lease_next(study_id, driver.owner, 30.0)
        if leased is not None:
            value = values[leased.config.norm.name]
            repo.finish_trial(leased.id, driver.owner, leased.attempt, _result(value))
            driver.tell(leased.optuna_number, "COMPLETE", value)


def test_search_asks_every_named_function_before_the_sampler_repeats_one(tmp_path: Path) -> None:
    # TPE's random start (seed 0) asked tanh three times in six asks; now each function is
    # asked once before the sampler chooses.
    driver, study_id = _search(tmp_path, 6)
    _run_fake(driver, study_id, {f: 0.1 * i for i, f in enumerate(SIX)})
    rows = driver.store.repo.list_trials(study_id)
    assert sorted(r["candidate"] for r in rows) == sorted(SIX)
    report = driver.kind.report(driver.store, study_id)
    assert report["never_tried"] == [] and report["repeats"] == 0
    assert {f["status"] for f in report["functions"]} == {"trained"}


def test_search_answers_repeats_from_stored_results(tmp_path: Path) -> None:
    driver, study_id = _search(tmp_path, 8)
    values = {f: 0.1 * i for i, f in enumerate(SIX)}
    _run_fake(driver, study_id, values)
    assert len(driver.store.repo.list_trials(study_id)) == 6  # nothing trained twice
    trials = driver.optuna.get_trials()
    assert len(trials) == 8 and all(t.state == optuna.trial.TrialState.COMPLETE for t in trials)
    repeats = [t for t in trials if "duplicate_of" in t.user_attrs]
    assert len(repeats) == 2
    for t in repeats:  # told the stored value of the point it repeats
        assert t.value == values[t.params["norm"]]
    assert driver.kind.report(driver.store, study_id)["repeats"] == 2


def test_a_repeat_of_a_running_trial_waits_for_its_result(tmp_path: Path) -> None:
    settings = engine_settings(f"sqlite:///{tmp_path / 'nf.db'}")
    spec = StudySpec(
        kind="search", proxy="vit-tiny", functions=["erf"], n_trials=2, extra_seeds_for_top=0
    )
    study_id = create_study(spec, settings=settings)
    driver = StudyDriver(study_id, settings=settings)
    assert driver.kind.refill(driver)
    leased = driver.store.repo.lease_next(study_id, driver.owner, 30.0)
    assert driver.kind.refill(driver)  # erf again while erf still runs: no new row ...
    assert len(driver.store.repo.list_trials(study_id)) == 1
    second = driver.optuna.get_trials()[1]
    assert second.state == optuna.trial.TrialState.RUNNING  # ... and not failed either
    # a restarted driver does not take the open repeat for an orphan ask
    StudyDriver(study_id, settings=settings)._reconcile()
    assert driver.optuna.get_trials()[1].state == optuna.trial.TrialState.RUNNING
    driver.store.repo.finish_trial(leased.id, driver.owner, leased.attempt, _result(0.6))
    driver.tell(leased.optuna_number, "COMPLETE", 0.6)
    assert not driver.kind.refill(driver)  # budget spent; the repeat is answered on the way
    assert [t.value for t in driver.optuna.get_trials()] == [0.6, 0.6]


def test_search_report_says_which_functions_the_budget_never_reached(tmp_path: Path) -> None:
    driver, study_id = _search(tmp_path, 4)
    _run_fake(driver, study_id, {f: 0.5 for f in SIX})
    driver.store.repo.set_study_status(study_id, "complete")
    report = driver.kind.report(driver.store, study_id)
    assert report["never_tried"] == SIX[4:]  # asked in the order named
    reasons = {f["function"]: f["reason"] for f in report["functions"]}
    assert "budget exhausted" in reasons["linear"] and reasons["erf"] is None
