"""``search``: an Optuna sampler picks a function (and optionally alpha0 and the lr) per trial.

TPE by default (or random); a pruner (successive halving, hyperband or median) stops poor trials
on the per-epoch validation metric, decided in the worker. Each ask inserts one trial row; when
the budget is spent and everything has run, the best few arms get extra seeds, so one lucky seed
does not crown a function.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

import optuna
from pydantic import Field, StrictInt

from normfree.specs import StudySpec
from normfree.workers import scheduling as sch
from normfree.workers.kinds.base import CommonParams, PruningParams, StudyKind

if TYPE_CHECKING:
    from normfree.workers.driver import StudyDriver


class SearchParams(PruningParams):
    alpha0_range: tuple[float, float] | None = None  # log-uniform alpha0 as a search dimension
    lr_range: tuple[float, float] | None = None  # log-uniform learning rate
    n_startup_trials: StrictInt | None = Field(default=None, ge=0, le=1000)  # TPE's start (5)
    top_arms: StrictInt | None = Field(default=None, ge=1, le=100)  # arms given extra seeds (3)


class SearchKind(StudyKind):
    name = "search"
    Params: ClassVar[type[CommonParams]] = SearchParams
    asks_optuna = True
    prunes = True

    def validate(self, spec: StudySpec) -> None:
        sch.search_distributions(spec)  # the candidate list and the ranges, early

    def budget_trials(self, spec: StudySpec) -> int:
        """The driver's asks (default: one per candidate) plus the top arms' extra seeds."""
        n = spec.n_trials or len(sch.search_functions(spec))
        return n + int(spec.params.get("top_arms", 3)) * spec.extra_seeds_for_top

    def sampler(self, spec: StudySpec, seed: int | None = None) -> optuna.samplers.BaseSampler:
        if spec.sampler == "tpe":
            return sch.tpe_sampler(spec, seed)
        return sch.random_sampler(spec, seed)

    def refill(self, driver: StudyDriver) -> bool:
        """Ask Optuna for one more point and insert its row. False: the budget is spent."""
        spec = driver.spec
        n_trials = spec.n_trials or len(sch.search_functions(spec))
        if len(driver.optuna.get_trials(deepcopy=False)) >= n_trials:  # asks, dups included
            return False
        trial = driver.optuna.ask(fixed_distributions=sch.search_distributions(spec))
        seed = sch.paired_seeds(spec)[0] if spec.seeds else 0
        config = sch.config_from_params(spec, trial.params, seed)
        existing = driver.store.trial_by_key(driver.study_id, config.key())
        if existing is not None:
            # The sampler proposed a point already trained: reuse its result, train nothing.
            trial.set_user_attr("duplicate_of", existing["id"])
            if existing["status"] in driver.TERMINAL:
                driver.tell(trial.number, existing["status"], existing["value"])
            else:
                driver.optuna.tell(trial.number, state=optuna.trial.TrialState.FAIL)
            return True
        axes: dict[str, Any] = {"function": trial.params[sch.P_NORM], "seed": seed}
        axes.update({k: v for k, v in trial.params.items() if k != sch.P_NORM})
        driver.store.repo.add_trials(driver.study_id, [(config, axes, trial.number)])
        return True

    def finish(self, driver: StudyDriver) -> bool:
        """Extra seeds for the best arms, planned once (a restart ranks the same arms)."""
        return extra_seeds(driver) > 0


def extra_seeds(driver: StudyDriver) -> int:
    """Insert the top arms' extra seeds (``spec.extra_seeds_for_top``); how many were new."""
    spec, repo = driver.spec, driver.store.repo
    if driver.extra_planned:
        return 0
    rows = repo.list_trials(driver.study_id, status="COMPLETE")
    search_seed = sch.paired_seeds(spec)[0] if spec.seeds else 0
    finished = []
    for r in rows:
        # Rank on the search's own seed only, so a restart picks the same top arms.
        if r["value"] is not None and r["seed"] == search_seed:
            ax = r["axis_values"]
            params = {sch.P_NORM: ax["function"]}
            params.update({k: ax[k] for k in (sch.P_ALPHA0, sch.P_LR) if k in ax})
            finished.append((params, float(r["value"])))
    planned = sch.plan_extra_seeds(spec, finished, driver.direction)
    driver.extra_planned = True
    before = repo.study_progress(driver.study_id)["total"]
    repo.add_trials(driver.study_id, [(p.config, p.axis_values) for p in planned])
    return repo.study_progress(driver.study_id)["total"] - before
