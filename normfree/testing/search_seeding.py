"""Seed a database with a finished search study (or a generate study of the same functions),
some of whose trials were pruned, for the comparison, search and study pages' tests (API and
browser).

The study is created by the engine and its asks made by the driver's own ``refill`` (Optuna's
sampler and storage, real trial rows with their Optuna numbers); each asked trial is then
leased, reports its epochs and finishes through the ``Repository`` as a worker's would, and the
driver tells Optuna. The results are synthetic (``worker="synthetic-seed"``): a pruned trial
reports the epochs up to the one its "pruner" stopped it at and ends PRUNED.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from normfree.settings import Settings
from normfree.specs import StudySpec, TrialResult
from normfree.testing.seeding import synthetic_complete, synthetic_curves

__all__ = ["GENERATE_SPEC", "PRUNED_AT", "SEARCH_SPEC", "SeededSearch", "seed_search_study"]

FUNCTIONS = ["erf", "tanh", "arctan", "isru", "smoothsign"]
SEARCH_SPEC = StudySpec(
    kind="search",
    name="seeded search",
    proxy="vit-tiny",
    functions=FUNCTIONS,
    sampler="random",
    n_trials=len(FUNCTIONS),
    epochs=3,
)
# The same functions as the seeds of a generate study's generation 0 (no evolution after it):
# a function search of the other kind, whose report shows the importance on the study page.
GENERATE_SPEC = StudySpec(
    kind="generate",
    name="seeded generate",
    proxy="vit-tiny",
    functions=FUNCTIONS,
    seeds=1,
    epochs=3,
    baselines=[],
    params={"generations": 0, "population": len(FUNCTIONS), "prescreen": False},
)
# Final accuracy of each function's trial; the ones in PRUNED_AT stop at that epoch instead.
ACCURACY = {"erf": 0.82, "tanh": 0.80, "arctan": 0.76, "isru": 0.60, "smoothsign": 0.55}
PRUNED_AT = {"isru": 1, "smoothsign": 0}


@dataclass(frozen=True)
class SeededSearch:
    study_id: int
    trial_ids: dict[str, int]  # function -> its trial's id
    pruned: dict[str, int]  # function -> the epoch it was pruned at


def _result(function: str) -> TrialResult:
    if function in PRUNED_AT:
        return TrialResult(
            status="pruned",
            objective="val_acc",
            curves=synthetic_curves(ACCURACY[function])[: PRUNED_AT[function] + 1],
            worker="synthetic-seed",
        )
    return synthetic_complete(ACCURACY[function])


def seed_search_study(settings: Settings, spec: StudySpec = SEARCH_SPEC) -> SeededSearch:
    """Create, 'run' and complete the search (or ``spec``: :data:`GENERATE_SPEC`); return its
    ids. A search's refill asks one trial, a generate study's plans a whole generation: each
    is run to its end before the next refill, as the driver waits for what is in flight."""
    from normfree.workers.driver import StudyDriver, create_study

    study_id = create_study(spec, settings=settings)
    driver = StudyDriver(study_id, settings=settings)
    repo = driver.store.repo
    repo.set_study_status(study_id, "running")
    ids: dict[str, int] = {}
    while driver.kind.refill(driver):
        while (leased := repo.lease_next(study_id, driver.owner, 60.0)) is not None:
            ids[str(leased.axis_values["function"])] = _finish(driver, leased)
    repo.set_study_status(study_id, "complete")
    return SeededSearch(study_id, ids, dict(PRUNED_AT))


def _finish(driver: Any, leased: Any) -> int:
    """One leased trial run as a worker runs it (epochs recorded, then the result), and told."""
    repo = driver.store.repo
    function = str(leased.axis_values["function"])
    result = _result(function)
    for record in result.curves:  # what the worker records before each pruner question
        assert repo.record_epoch(
            leased.id, driver.owner, leased.attempt, record, lease_seconds=60.0
        )
    assert repo.finish_trial(leased.id, driver.owner, leased.attempt, result)
    driver.tell(leased.optuna_number, result.status.upper(), result.value)
    return int(leased.id)
