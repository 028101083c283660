"""From a ``StudySpec`` to trials: the pieces every study kind (:mod:`normfree.workers.kinds`)
builds its trials from, and nothing that belongs to one kind.

- the study-wide config of every trial (:func:`base_config`) and the norm of a function in the
  study (:func:`norm_spec`), so lr, dataset, overrides, shift and ``affine`` mean the same in
  every kind;
- paired seeds: seed ``i`` is the same integer in every cell and in the reference baselines,
  so two cells compare seed by seed, which removes the between-seed variance from their
  difference;
- a grid's trials from its cells (:func:`plan_cells`: cells and baselines, seed-major, never a
  config twice), the transform spellings a grid's cells use, the paper's grids;
- the Optuna pieces more than one kind uses (a seeded random sampler, the epoch pruner) and the
  proxy's objective.

Each kind's own planning (a property study's cells, an options study's crosses, a search's
distributions and extra seeds) lives in its module. Nothing here touches a database or Ray: it
is pure and tested directly.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import optuna

from normfree.specs import BASELINES, NormSpec, Scalar, StudySpec, TrialConfig

__all__ = [
    "Cell",
    "PlannedTrial",
    "base_config",
    "epoch_pruner",
    "format_value",
    "make_pruner",
    "make_sampler",
    "norm_spec",
    "objective_of",
    "paired_seeds",
    "paper_grid",
    "plan_cells",
    "plan_grid",
    "random_sampler",
    "transform_call",
    "untransformed_name",
]


def common_params(spec: StudySpec) -> Any:
    """The study's shared params, typed (``kinds.base.common_params``; imported on use: the
    kinds' modules import this one)."""
    from normfree.workers.kinds.base import common_params as typed

    return typed(spec)


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
    seed0 = common_params(spec).seed0
    return [seed0 + i for i in range(spec.seeds)]


def base_config(spec: StudySpec) -> dict[str, Any]:
    """The TrialConfig fields a study fixes for all its trials (from ``spec.params``).

    Every study kind builds its trials from this, so a study-wide setting (lr, dataset,
    overrides) means the same thing in grids, searches and generate studies."""
    p = common_params(spec)
    return {
        "proxy": spec.proxy,
        "overrides": dict(p.overrides),
        "dataset": p.dataset,
        "epochs": spec.epochs,
        "lr": p.lr,
        "weight_decay": p.weight_decay,
        "warmup_epochs": p.warmup_epochs,
    }


def norm_spec(name: str, spec: StudySpec, **opts: Any) -> NormSpec:
    """The NormSpec of ``name`` in this study: the study's shift and ``affine``, then ``opts``.

    A baseline keeps only ``affine`` (a shift or alpha0 means nothing to LayerNorm), so a study
    that turns affine off compares against baselines without it too, whatever its kind."""
    base: dict[str, Any] = {"shift": spec.norm_shift}
    if (affine := common_params(spec).affine) is not None:
        base["affine"] = affine
    base.update(opts)
    if name in BASELINES:  # options of a pointwise norm mean nothing to a baseline
        base = {k: v for k, v in base.items() if k == "affine"}
    elif spec.definitions and "formula" not in base:
        from normfree.search_space.resolver import definition

        # a stored candidate (nested in transforms too): its baked definition travels along
        if (text := definition(name, spec.definitions)) is not None:
            base["formula"] = text
    return NormSpec(name=name, **base)


Cell = tuple[NormSpec, dict[str, Scalar], dict[str, Any], str]  # norm, overrides, axes, role


def plan_cells(
    spec: StudySpec, cells: list[Cell], models: list[dict[str, Scalar]]
) -> list[PlannedTrial]:
    """Every trial of a grid study: its cells and the baselines beside every model the cells
    run in (``models``: the proxy overrides of each, ``[{}]`` for the preset alone), at every
    paired seed, seed-major.

    Ordering puts seed 0 of every cell first, so a study stopped half way has one complete seed of
    every cell rather than all seeds of a few cells.
    """
    base = base_config(spec)
    cells = list(cells)
    for b in spec.baselines:
        for overrides in models:
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
            if norm.shift != "none" and "shift" not in axes and role != "baseline":
                # the study's operator (its norm_shift, the published one for the 16) is an
                # axis like an option's: every cell's label says it ran with s ("erf + s")
                axes = {**axes, "shift": norm.shift}
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
    seed = common_params(spec).sampler_seed if seed is None else seed
    return optuna.samplers.RandomSampler(seed=seed)


def epoch_pruner(spec: StudySpec) -> optuna.pruners.BasePruner:
    """The pruner ``spec.pruner`` names, in units of epochs (the step of every report).

    Successive halving keeps the best 1/reduction_factor at each rung (epochs 1, rf, rf^2, ...);
    hyperband runs several such brackets with different starting rungs; median stops a trial
    below the median of earlier trials at the same epoch.
    """
    if spec.pruner == "none":
        return optuna.pruners.NopPruner()
    from normfree.workers.kinds.base import PruningParams

    params = PruningParams.model_validate(spec.params)
    rf = params.reduction_factor
    budget = spec.epochs
    if budget is None:
        from normfree.workers.proxies import get_preset

        budget = get_preset(spec.proxy).epochs
    # Grace period: no verdict before a quarter of the budget. Early epochs rank functions
    # badly (warmup; on dit-tiny the eventual best is the *worst* after epoch 1), and a pruned
    # winner is never found again. ``params["min_resource"]`` overrides.
    min_resource = params.min_resource or max(1, budget // 4)
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
