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

from normfree.specs import BASELINES, StudySpec, TrialConfig
from normfree.workers import scheduling as sch
from normfree.workers.kinds.base import CommonParams, PruningParams, StudyKind
from normfree.workers.scheduling import PlannedTrial, base_config, norm_spec

if TYPE_CHECKING:
    from normfree.workers.driver import StudyDriver
    from normfree.workers.generate import ImportanceSource

# The Optuna user attribute of an ask answered from a stored trial: that trial's row id.
REPEAT_OF = "duplicate_of"


# Parameter names inside the Optuna study of a search.
P_NORM, P_ALPHA0, P_LR = "norm", "alpha0", "lr"


class SearchParams(PruningParams):
    alpha0_range: tuple[float, float] | None = None  # log-uniform alpha0 as a search dimension
    lr_range: tuple[float, float] | None = None  # log-uniform learning rate
    n_startup_trials: StrictInt = Field(default=5, ge=0, le=1000)  # TPE's random start
    top_arms: StrictInt = Field(default=3, ge=1, le=100)  # arms given extra seeds


def search_params(spec: StudySpec) -> SearchParams:
    """The search's params, typed, with their defaults."""
    return SearchParams.model_validate(spec.params)


def search_functions(spec: StudySpec) -> list[str]:
    """The candidates a search chooses among: the spec's list, or the whole catalog."""
    if spec.functions:
        return list(dict.fromkeys(spec.functions))
    from normfree.search_space import catalog

    return [c.name for c in catalog.all() if c.name not in BASELINES]


def search_distributions(spec: StudySpec) -> dict[str, optuna.distributions.BaseDistribution]:
    """Optuna's search space: a categorical over candidates, plus optional alpha0 / lr ranges
    (``alpha0_range``, ``lr_range``: both log-uniform, they act multiplicatively)."""
    params = search_params(spec)
    dists: dict[str, optuna.distributions.BaseDistribution] = {
        P_NORM: optuna.distributions.CategoricalDistribution(search_functions(spec))
    }
    if rng := params.alpha0_range:
        dists[P_ALPHA0] = optuna.distributions.FloatDistribution(*map(float, rng), log=True)
    if rng := params.lr_range:
        dists[P_LR] = optuna.distributions.FloatDistribution(*map(float, rng), log=True)
    return dists


def config_from_params(spec: StudySpec, params: dict[str, Any], seed: int) -> TrialConfig:
    """The TrialConfig of one search point (Optuna params) at one seed."""
    base = base_config(spec)
    if P_LR in params:
        base["lr"] = float(params[P_LR])
    opts = {"alpha0": float(params[P_ALPHA0])} if P_ALPHA0 in params else {}
    return TrialConfig(**base, norm=norm_spec(str(params[P_NORM]), spec, **opts), seed=seed)


def arm_label(params: dict[str, Any]) -> str:
    """A search arm as every view spells arms (``storage.leaderboard.arm_text``): ``erf`` or
    ``erf [alpha0=0.3, lr=0.002]``."""
    from normfree.storage.leaderboard import arm_text

    extra = {k: f"{params[k]:.3g}" for k in (P_ALPHA0, P_LR) if k in params}
    return arm_text(str(params[P_NORM]), options=extra)


def plan_extra_seeds(
    spec: StudySpec, finished: list[tuple[dict[str, Any], float]], direction: str
) -> list[PlannedTrial]:
    """Extra seeds for the ``spec.extra_seeds_for_top`` best arms of a search.

    ``finished`` holds (params, objective value) of the search's completed trials. One lucky seed
    should not crown a function: the top arms are rerun on seeds 1..k (the search used seed0) so
    the leaderboard ranks them on means with a confidence interval.
    """
    k = spec.extra_seeds_for_top
    if k <= 0 or not finished:
        return []
    typed = search_params(spec)
    best: dict[str, tuple[dict[str, Any], float]] = {}
    sign = -1.0 if direction == "maximize" else 1.0
    for params, value in finished:
        label = arm_label(params)
        if label not in best or sign * value < sign * best[label][1]:
            best[label] = (params, value)
    ranked = sorted(best.values(), key=lambda pv: sign * pv[1])[: typed.top_arms]
    out = []
    for params, _ in ranked:
        for i in range(1, k + 1):
            seed = typed.seed0 + i
            axes = {"function": params[P_NORM], "seed": seed}
            axes.update({k2: v for k2, v in params.items() if k2 != P_NORM})
            out.append(PlannedTrial(config_from_params(spec, params, seed), axes, "extra_seed"))
    return out


def tpe_sampler(spec: StudySpec, seed: int | None = None) -> optuna.samplers.BaseSampler:
    """TPE from a few random trials (``n_startup_trials``)."""
    params = search_params(spec)
    seed = params.sampler_seed if seed is None else seed
    return optuna.samplers.TPESampler(seed=seed, n_startup_trials=params.n_startup_trials)


class SearchKind(StudyKind):
    name = "search"
    summary = "a sampler picks among functions (default: the catalog), with pruning"
    Params: ClassVar[type[CommonParams]] = SearchParams
    asks_optuna = True
    prunes = True
    searches = True

    def smoke_spec(self, proxy: str) -> StudySpec:
        return StudySpec(
            kind=self.name, proxy=proxy, seeds=1, functions=["erf", "tanh"], sampler="random",
            n_trials=2, extra_seeds_for_top=1, params={"top_arms": 1}, epochs=1,
        )  # fmt: skip

    def validate(self, spec: StudySpec) -> None:
        search_distributions(spec)  # the candidate list and the ranges, early

    def budget_trials(self, spec: StudySpec) -> int:
        """The driver's asks (default: one per candidate) plus the top arms' extra seeds."""
        n = spec.n_trials or len(search_functions(spec))
        return n + search_params(spec).top_arms * spec.extra_seeds_for_top

    def sampler(self, spec: StudySpec, seed: int | None = None) -> optuna.samplers.BaseSampler:
        if spec.sampler == "tpe":
            return tpe_sampler(spec, seed)
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
        n_trials = spec.n_trials or len(search_functions(spec))
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
            driver.optuna.enqueue_trial({P_NORM: untried[0]})
        trial = driver.optuna.ask(fixed_distributions=search_distributions(spec))
        seed = sch.paired_seeds(spec)[0] if spec.seeds else 0
        config = config_from_params(spec, trial.params, seed)
        existing = driver.store.trial_by_key(driver.study_id, config.key())
        if existing is not None:
            # The sampler proposed a point already run: answer it from the stored result.
            trial.set_user_attr(REPEAT_OF, existing["id"])
            if existing["status"] in driver.TERMINAL:
                driver.tell(trial.number, existing["status"], existing["value"])
            # else: still running; answer_repeats tells it when that trial ends
            return True
        axes: dict[str, Any] = {"function": trial.params[P_NORM], "seed": seed}
        axes.update({k: v for k, v in trial.params.items() if k != P_NORM})
        driver.store.repo.add_trials(driver.study_id, [(config, axes, trial.number)])
        return True

    def report(
        self, store: Any, study_id: int, importance: ImportanceSource | None = None
    ) -> dict[str, Any] | None:
        """Which named functions the search trained, and which it never tried and why (its
        importance is on its search view, ``api.search``, not in this report)."""
        return coverage(store, study_id)

    def report_lines(self, report: dict[str, Any]) -> list[str]:
        """Repeats answered from storage, and every function not trained, with why."""
        out = []
        if report.get("repeats"):
            out.append(
                f"{report['repeats']} repeated asks answered from stored results (not retrained)"
            )
        for f in report["functions"]:
            if f["status"] != "trained":
                why = f" ({f['reason']})" if f["reason"] else ""
                out.append(f"  {f['function']}: {f['status']}{why}")
        if not report["never_tried"]:
            out.append(f"every one of the {len(report['functions'])} functions named was tried")
        return out

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
            params = {P_NORM: ax["function"]}
            params.update({k: ax[k] for k in (P_ALPHA0, P_LR) if k in ax})
            finished.append((params, float(r["value"])))
    planned = plan_extra_seeds(spec, finished, driver.direction)
    driver.extra_planned = True
    before = repo.study_progress(driver.study_id)["total"]
    repo.add_trials(driver.study_id, [(p.config, p.axis_values) for p in planned])
    return repo.study_progress(driver.study_id)["total"] - before


def _untried(spec: StudySpec, asked: list[optuna.trial.FrozenTrial]) -> list[str]:
    """The functions of the search no ask has chosen yet, in the spec's order."""
    chosen = {t.params.get(P_NORM) for t in asked}
    return [f for f in search_functions(spec) if f not in chosen]


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
    functions = search_functions(spec)
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
