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

# The Optuna user attribute of an ask answered from a stored trial: that trial's row id.
REPEAT_OF = "duplicate_of"


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
        """Ask Optuna for one more point and insert its row. False: the budget is spent.

        The budget (``n_trials``) counts asks. Every function named is asked once first (each is
        enqueued in turn, so TPE's random start cannot ask one function three times and skip
        three others); then the sampler chooses. A point already run at the search's seed is
        never trained again: Optuna is told the stored result (or, while that trial still runs,
        when it ends, see :func:`answer_repeats`).
        """
        spec = driver.spec
        answer_repeats(driver)
        n_trials = spec.n_trials or len(sch.search_functions(spec))
        asked = [
            t
            for t in driver.optuna.get_trials(deepcopy=False)
            if t.state != optuna.trial.TrialState.WAITING
        ]
        if len(asked) >= n_trials:  # asks, repeats included
            return False
        untried = _untried(spec, asked)
        waiting = any(
            t.state == optuna.trial.TrialState.WAITING
            for t in driver.optuna.get_trials(deepcopy=False)
        )
        if untried and not waiting:  # a crash between enqueue and ask leaves one waiting
            driver.optuna.enqueue_trial({sch.P_NORM: untried[0]})
        trial = driver.optuna.ask(fixed_distributions=sch.search_distributions(spec))
        seed = sch.paired_seeds(spec)[0] if spec.seeds else 0
        config = sch.config_from_params(spec, trial.params, seed)
        existing = driver.store.trial_by_key(driver.study_id, config.key())
        if existing is not None:
            # The sampler proposed a point already run: answer it from the stored result.
            trial.set_user_attr(REPEAT_OF, existing["id"])
            if existing["status"] in driver.TERMINAL:
                driver.tell(trial.number, existing["status"], existing["value"])
            # else: still running; answer_repeats tells it when that trial ends
            return True
        axes: dict[str, Any] = {"function": trial.params[sch.P_NORM], "seed": seed}
        axes.update({k: v for k, v in trial.params.items() if k != sch.P_NORM})
        driver.store.repo.add_trials(driver.study_id, [(config, axes, trial.number)])
        return True

    def report(self, store: Any, study_id: int) -> dict[str, Any] | None:
        """Which named functions the search trained, and which it never tried and why."""
        return coverage(store, study_id)

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


def _untried(spec: StudySpec, asked: list[optuna.trial.FrozenTrial]) -> list[str]:
    """The functions of the search no ask has chosen yet, in the spec's order."""
    chosen = {t.params.get(sch.P_NORM) for t in asked}
    return [f for f in sch.search_functions(spec) if f not in chosen]


def answer_repeats(driver: StudyDriver) -> int:
    """Tell Optuna the outcome of every repeat ask whose stored trial has ended; how many.

    A repeat of a point still running stays open in Optuna until then (never failed, never
    trained twice); the driver calls this on every refill and when it reconciles.
    """
    pending = [
        t
        for t in driver.optuna.get_trials(deepcopy=False)
        if t.state == optuna.trial.TrialState.RUNNING and REPEAT_OF in t.user_attrs
    ]
    told = 0
    for t in pending:
        row = driver.store.repo.get_trial(int(t.user_attrs[REPEAT_OF]))
        if row is None:  # cannot happen (rows are never deleted): free the ask
            driver.optuna.tell(t.number, state=optuna.trial.TrialState.FAIL, skip_if_finished=True)
        elif row["status"] in driver.TERMINAL:
            driver.tell(t.number, row["status"], row["value"])
        else:
            continue
        told += 1
    return told


# Why a function named in a search has no completed trial.
NOT_TRIED_BUDGET = "budget exhausted: n_trials was spent before the sampler chose it"
NOT_TRIED_STOPPED = "not reached: the study stopped before the sampler chose it"


def coverage(store: Any, study_id: int) -> dict[str, Any]:
    """Every function a search names, with what happened to it (the study page and the API).

    Per function: ``status`` (trained, pruned, failed, diverged, running, waiting or
    ``never tried``), its trials at the search's seed, and for a function never tried, why.
    ``repeats`` counts asks answered from a stored result instead of training again (read from
    Optuna when its store is at hand).
    """
    study = store.repo.get_study(study_id)
    if study is None:
        raise KeyError(f"no study {study_id}")
    spec = StudySpec.model_validate(study["spec"])
    functions = sch.search_functions(spec)
    search_seed = sch.paired_seeds(spec)[0] if spec.seeds else 0
    rows = [r for r in store.repo.list_trials(study_id) if r["seed"] == search_seed]
    by_fn: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_fn.setdefault(str((r["axis_values"] or {}).get("function")), []).append(r)
    budget = spec.n_trials or len(functions)
    open_ = study["status"] in ("pending", "running", "paused")
    out_fns = []
    for fn in functions:
        mine = by_fn.get(fn, [])
        statuses = {r["status"] for r in mine}
        entry: dict[str, Any] = {"function": fn, "trials": len(mine), "reason": None}
        for status, word in (
            ("COMPLETE", "trained"),
            ("RUNNING", "running"),
            ("WAITING", "waiting"),
            ("PRUNED", "pruned"),
            ("DIVERGED", "diverged"),
            ("FAILED", "failed"),
            ("CANCELLED", "cancelled"),
        ):
            if status in statuses:
                entry["status"] = word
                break
        else:
            entry["status"] = "never tried"
            if open_:
                entry["reason"] = "not asked yet"
            elif budget < len(functions):
                entry["reason"] = NOT_TRIED_BUDGET
            else:
                entry["reason"] = NOT_TRIED_STOPPED
        if entry["status"] == "pruned":
            entry["reason"] = "stopped early by the pruner (a poor validation curve)"
        elif entry["status"] in ("failed", "diverged"):
            entry["reason"] = next((r["error"] for r in mine if r.get("error")), None)
        out_fns.append(entry)
    return {
        "n_trials": budget,
        "functions": out_fns,
        "never_tried": [e["function"] for e in out_fns if e["status"] == "never tried"],
        "repeats": _repeats(store, study_id),
    }


def _repeats(store: Any, study_id: int) -> int | None:
    """Asks answered from a stored result (None: Optuna's store is not at hand)."""
    if not hasattr(store, "optuna_storage"):
        return None
    from normfree.workers.driver import optuna_study_name

    try:
        ostudy = optuna.load_study(
            study_name=optuna_study_name(study_id), storage=store.optuna_storage()
        )
    except KeyError:  # never run
        return 0
    return sum(REPEAT_OF in t.user_attrs for t in ostudy.get_trials(deepcopy=False))
