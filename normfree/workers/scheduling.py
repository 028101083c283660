"""From a ``StudySpec`` to trials: the pure pieces the study kinds (:mod:`normfree.workers.kinds`)
are built from: grids, option crosses, and the Optuna side of a search.

- **property**: base functions x transform values x seeds. Every cell runs. Seeds are *paired*:
  seed ``i`` is the same integer in every cell (and in the reference baselines), so two cells can
  be compared seed by seed, which removes the between-seed variance from their difference.
- **options**: functions x every combination of option values (LayerScale init, depth-scaled
  init, alpha0, shift ...) x paired seeds. Options that belong to the norm (``alpha0``, ``shift``,
  ``affine``) go into the ``NormSpec``; every other option is a proxy-config override.
- **search**: an Optuna sampler (TPE by default, or random) picks a catalog candidate (and
  optionally alpha0 and the learning rate) per trial; a pruner (successive halving, hyperband or
  median) stops poor trials on the per-epoch validation metric. The best few arms then get extra
  seeds before anything is ranked.

The grid kinds are enumerated here up front (they are small and must all run); Optuna still holds
one trial per run so ``optuna-dashboard`` shows every study, see :mod:`normfree.workers.driver`.
Nothing here touches a database or Ray: it is pure and tested directly.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import optuna

from normfree.specs import BASELINES, NormSpec, Scalar, StudySpec, TrialConfig

__all__ = [
    "NORM_OPTIONS",
    "PlannedTrial",
    "arm_label",
    "config_from_params",
    "format_value",
    "make_pruner",
    "make_sampler",
    "objective_of",
    "option_combinations",
    "paired_seeds",
    "paper_grid",
    "plan_extra_seeds",
    "plan_grid",
    "search_distributions",
    "search_functions",
    "transform_call",
    "untransformed_name",
]

# Options that configure the norm itself (NormSpec fields); all others override the proxy config.
NORM_OPTIONS = ("shift", "alpha0", "affine", "learn_alpha")
# How people spell "no LayerScale" on the command line; the proxies read 0.0 as off.
_OFF = ("off", "none", "no", "false")
# Parameter names inside the Optuna study of a search.
P_NORM, P_ALPHA0, P_LR = "norm", "alpha0", "lr"


@dataclass(frozen=True)
class PlannedTrial:
    """One run a study wants: its config and the axis values a plot or leaderboard groups by.

    ``role`` says why it exists: a grid ``cell``, a reference ``baseline``, a ``search`` trial
    asked from Optuna, or an ``extra_seed`` rerun of a search's best arm.
    """

    config: TrialConfig
    axis_values: dict[str, Any] = field(default_factory=dict)
    role: Literal["cell", "baseline", "search", "extra_seed"] = "cell"


def format_value(value: float) -> str:
    """A transform parameter as short positional text (``0.5``, ``-2``, ``0.00001``): no exponent
    notation, because the expression language parses plain decimals."""
    return np.format_float_positional(float(value), trim="-")


def transform_call(transform: str, function: str, value: float) -> str:
    """The catalog spelling of a transformed candidate: ``shift_h(erf, 0.5)``."""
    return f"{transform}({function}, {format_value(value)})"


def untransformed_name(transform: str, function: str) -> str:
    """The cell of a grid value ``None``: ``t(f)`` when t takes no parameter, else f itself.
    Text only (any function the resolver accepts: a stored name too, with no database)."""
    from normfree.search_space.transforms import TRANSFORMS

    t = TRANSFORMS.get(transform)
    return f"{transform}({function})" if t is not None and not t.params else function


def paper_grid(transform: str) -> tuple[list[str], list[float], bool]:
    """The paper's bases and values for ``transform`` (science.md section 3).

    Returns (functions, numeric values, whether the grid has a ``None`` cell: f unclipped, or a
    parameterless transform). KeyError for a transform without a paper grid.
    """
    from normfree.search_space import transforms

    grid = transforms.PAPER_GRIDS[transform]
    values = [float(v) for v in grid["values"] if v is not None]
    return list(grid["bases"]), values, any(v is None for v in grid["values"])


def paired_seeds(spec: StudySpec) -> list[int]:
    """Seeds ``seed0 .. seed0+seeds-1``: the same list for every cell of a study (paired)."""
    seed0 = int(spec.params.get("seed0", 0))
    return [seed0 + i for i in range(spec.seeds)]


def base_config(spec: StudySpec) -> dict[str, Any]:
    """The TrialConfig fields a study fixes for all its trials (from ``spec.params``).

    Every study kind builds its trials from this, so a study-wide setting (lr, dataset,
    overrides) means the same thing in grids, searches and generate studies."""
    p = spec.params
    overrides = dict(p.get("overrides", {}))
    return {
        "proxy": spec.proxy,
        "overrides": overrides,
        "dataset": p.get("dataset"),
        "epochs": spec.epochs,
        "lr": p.get("lr"),
        "weight_decay": p.get("weight_decay"),
        "warmup_epochs": p.get("warmup_epochs"),
    }


def norm_spec(name: str, spec: StudySpec, **opts: Any) -> NormSpec:
    """The NormSpec of ``name`` in this study: the study's shift and ``affine``, then ``opts``.

    A baseline keeps only ``affine`` (a shift or alpha0 means nothing to LayerNorm), so a study
    that turns affine off compares against baselines without it too, whatever its kind."""
    base: dict[str, Any] = {"shift": spec.norm_shift}
    if "affine" in spec.params:
        base["affine"] = bool(spec.params["affine"])
    base.update(opts)
    if name in BASELINES:  # options of a pointwise norm mean nothing to a baseline
        base = {k: v for k, v in base.items() if k == "affine"}
    elif spec.definitions and "formula" not in base:
        from normfree.search_space.resolver import definition

        # a stored candidate (nested in transforms too): its baked definition travels along
        if (text := definition(name, spec.definitions)) is not None:
            base["formula"] = text
    return NormSpec(name=name, **base)


def _option_value(name: str, value: Scalar) -> Scalar:
    if name == "layerscale_init" and (
        value is False or (isinstance(value, str) and value.lower() in _OFF)
    ):
        return 0.0
    return value


def option_combinations(options: dict[str, list[Scalar]]) -> list[dict[str, Scalar]]:
    """The cross product of option values, in a stable order (option names sorted)."""
    names = sorted(options)
    if not names:
        return [{}]
    return [
        {n: _option_value(n, v) for n, v in zip(names, combo, strict=True)}
        for combo in itertools.product(*(options[n] for n in names))
    ]


Cell = tuple[NormSpec, dict[str, Scalar], dict[str, Any], str]  # norm, overrides, axes, role


def property_cells(spec: StudySpec) -> tuple[list[Cell], list[dict[str, Scalar]]]:
    """A property study's cells: every function under the transform at every value (and, with
    ``untransformed_cell``, the function itself); one model, so one (empty) combination."""
    if not spec.transform or not (spec.values or spec.params.get("untransformed_cell")):
        raise ValueError("a property study needs a transform and its values")
    cells: list[Cell] = []
    for fn in spec.functions:
        if spec.params.get("untransformed_cell"):
            # The paper's "unclipped too" / parameterless cells: f itself, or t(f) when the
            # transform takes no parameter (sign_flip).
            name = untransformed_name(spec.transform, fn)
            cells.append(
                (norm_spec(name, spec), {}, {"function": fn, spec.transform: None}, "cell")
            )
        for v in spec.values:
            norm = norm_spec(transform_call(spec.transform, fn, v), spec)
            cells.append((norm, {}, {"function": fn, spec.transform: float(v)}, "cell"))
    return cells, [{}]


def option_cells(spec: StudySpec) -> tuple[list[Cell], list[dict[str, Scalar]]]:
    """An options study's cells: every function at every combination of option values."""
    combos = option_combinations(spec.options)
    cells: list[Cell] = []
    for fn in spec.functions:
        for combo in combos:
            norm_opts = {k: v for k, v in combo.items() if k in NORM_OPTIONS}
            overrides = {k: v for k, v in combo.items() if k not in NORM_OPTIONS}
            cells.append(
                (norm_spec(fn, spec, **norm_opts), overrides, {"function": fn, **combo}, "cell")
            )
    return cells, combos


def plan_cells(
    spec: StudySpec, cells: list[Cell], combos: list[dict[str, Scalar]]
) -> list[PlannedTrial]:
    """Every trial of a grid study: its cells and the baselines beside every combination that
    changes the model around them, at every paired seed, seed-major.

    Ordering puts seed 0 of every cell first, so a study stopped half way has one complete seed of
    every cell rather than all seeds of a few cells.
    """
    base = base_config(spec)
    cells = list(cells)
    for b in spec.baselines:
        for combo in combos:
            overrides = {k: v for k, v in combo.items() if k not in NORM_OPTIONS}
            axes = {"function": b, "baseline": True, **overrides}
            cells.append((norm_spec(b, spec), overrides, axes, "baseline"))
    planned: list[PlannedTrial] = []
    seen: set[str] = set()
    for seed in paired_seeds(spec):
        for norm, overrides, axes, role in cells:
            cfg = TrialConfig(
                **{**base, "overrides": {**base["overrides"], **overrides}},
                norm=norm,
                seed=seed,
            )
            if cfg.key() in seen:  # e.g. a baseline listed twice: never train a config twice
                continue
            seen.add(cfg.key())
            planned.append(PlannedTrial(cfg, {**axes, "seed": seed}, role))  # type: ignore[arg-type]
    return planned


def plan_grid(spec: StudySpec) -> list[PlannedTrial]:
    """Every trial of a grid study (property, options), planned by its kind
    (:mod:`normfree.workers.kinds`); ValueError for a kind whose trials are not a grid."""
    from normfree.workers import kinds

    kind = kinds.get(spec.kind)
    if not kind.grid:
        raise ValueError(f"plan_grid schedules property and options studies, not {spec.kind!r}")
    return kind.plan(spec)


# ---------------------------------------------------------------------------------- search


def search_functions(spec: StudySpec) -> list[str]:
    """The candidates a search chooses among: the spec's list, or the whole catalog."""
    if spec.functions:
        return list(dict.fromkeys(spec.functions))
    from normfree.search_space import catalog

    return [c.name for c in catalog.all() if c.name not in BASELINES]


def search_distributions(spec: StudySpec) -> dict[str, optuna.distributions.BaseDistribution]:
    """Optuna's search space: a categorical over candidates, plus optional alpha0 / lr ranges.

    ``spec.params["alpha0_range"] = [lo, hi]`` and ``spec.params["lr_range"] = [lo, hi]`` turn the
    extra dimensions on (both log-uniform: they act multiplicatively).
    """
    dists: dict[str, optuna.distributions.BaseDistribution] = {
        P_NORM: optuna.distributions.CategoricalDistribution(search_functions(spec))
    }
    if rng := spec.params.get("alpha0_range"):
        dists[P_ALPHA0] = optuna.distributions.FloatDistribution(*map(float, rng), log=True)
    if rng := spec.params.get("lr_range"):
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
    n_top = int(spec.params.get("top_arms", 3))
    best: dict[str, tuple[dict[str, Any], float]] = {}
    sign = -1.0 if direction == "maximize" else 1.0
    for params, value in finished:
        label = arm_label(params)
        if label not in best or sign * value < sign * best[label][1]:
            best[label] = (params, value)
    ranked = sorted(best.values(), key=lambda pv: sign * pv[1])[:n_top]
    seed0 = int(spec.params.get("seed0", 0))
    out = []
    for params, _ in ranked:
        for i in range(1, k + 1):
            cfg = config_from_params(spec, params, seed0 + i)
            out.append(
                PlannedTrial(
                    cfg,
                    {
                        "function": params[P_NORM],
                        "seed": seed0 + i,
                        **{k2: v for k2, v in params.items() if k2 != P_NORM},
                    },
                    "extra_seed",
                )
            )
    return out


def make_sampler(spec: StudySpec, seed: int | None = None) -> optuna.samplers.BaseSampler:
    """The study's sampler, as its kind chooses (``StudyKind.sampler``)."""
    from normfree.workers import kinds

    return kinds.get(spec.kind).sampler(spec, seed)


def make_pruner(spec: StudySpec) -> optuna.pruners.BasePruner:
    """The study's pruner, as its kind chooses (``StudyKind.pruner``)."""
    from normfree.workers import kinds

    return kinds.get(spec.kind).pruner(spec)


def random_sampler(spec: StudySpec, seed: int | None = None) -> optuna.samplers.BaseSampler:
    """Random, seeded by ``params["sampler_seed"]``: grid kinds enqueue their own points, so any
    sampler serves them, and random keeps that cheap."""
    seed = int(spec.params.get("sampler_seed", 0)) if seed is None else seed
    return optuna.samplers.RandomSampler(seed=seed)


def tpe_sampler(spec: StudySpec, seed: int | None = None) -> optuna.samplers.BaseSampler:
    """TPE from a few random trials (``params["n_startup_trials"]``, default 5)."""
    seed = int(spec.params.get("sampler_seed", 0)) if seed is None else seed
    n_startup = int(spec.params.get("n_startup_trials", 5))
    return optuna.samplers.TPESampler(seed=seed, n_startup_trials=n_startup)


def epoch_pruner(spec: StudySpec) -> optuna.pruners.BasePruner:
    """The pruner ``spec.pruner`` names, in units of epochs (the step of every report).

    Successive halving keeps the best 1/reduction_factor at each rung (epochs 1, rf, rf^2, ...);
    hyperband runs several such brackets with different starting rungs; median stops a trial
    below the median of earlier trials at the same epoch.
    """
    if spec.pruner == "none":
        return optuna.pruners.NopPruner()
    rf = int(spec.params.get("reduction_factor", 3))
    budget = spec.epochs
    if budget is None:
        from normfree.workers.proxies import get_preset

        budget = get_preset(spec.proxy).epochs
    # Grace period: no verdict before a quarter of the budget. Early epochs rank functions
    # badly (warmup; on dit-tiny the eventual best is the *worst* after epoch 1), and a pruned
    # winner is never found again. ``params["min_resource"]`` overrides.
    min_resource = int(spec.params.get("min_resource") or max(1, budget // 4))
    if spec.pruner == "sha":
        return optuna.pruners.SuccessiveHalvingPruner(
            min_resource=min_resource, reduction_factor=rf
        )
    if spec.pruner == "hyperband":
        max_resource: int | str = spec.epochs if spec.epochs else "auto"
        return optuna.pruners.HyperbandPruner(
            min_resource=min_resource, max_resource=max_resource, reduction_factor=rf
        )
    return optuna.pruners.MedianPruner(n_startup_trials=3, n_warmup_steps=min_resource)


def objective_of(proxy: str) -> tuple[str, Literal["maximize", "minimize"]]:
    """The proxy's primary metric and its direction (what searches optimise and prune on)."""
    from normfree.workers.proxies import get_preset

    preset = get_preset(proxy)
    return preset.objective, preset.direction
