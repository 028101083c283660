"""Seed a database with a real property study for API, browser and load tests.

The study, its Optuna study and its trial rows are created by the engine (``create_study``); every
trial is leased and finished through the storage ``Repository`` exactly as a worker would. Results
come from two sources, both real writes of ``TrialResult``:

- ``real_trials`` of them are run by ``train_trial`` on the tiny ViT (a few seconds each), so the
  trial page shows true curves and per-layer diagnostics;
- the rest get small synthetic ``TrialResult``s (a smooth function of the transform value plus a
  seed offset; one cell diverges), because training dozens of trials would blow the test budget.
  They are marked ``worker="synthetic-seed"`` so nobody mistakes them for measurements.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from normfree.settings import Settings
from normfree.specs import EpochRecord, LayerDiagnostic, StudySpec, TrialResult

LAYERS = ("blocks.0.norm1", "blocks.0.norm2", "blocks.1.norm1", "blocks.1.norm2", "norm_final")


def property_spec(**overrides: Any) -> StudySpec:
    """A small shift_h property study on the tiny ViT (2 functions x 3 values x 2 seeds plus
    LayerNorm, one epoch): the seeded study, and the base a test overrides with only the fields
    its point depends on."""
    fields: dict[str, Any] = {
        "kind": "property",
        "proxy": "vit-tiny",
        "seeds": 2,
        "functions": ["erf", "tanh"],
        "transform": "shift_h",
        "values": [-1.0, 0.0, 1.0],
        "baselines": ["layernorm"],
        "epochs": 1,
    }
    return StudySpec(**(fields | overrides))


SPEC = property_spec(name="seeded shift_h study")
# (function, transform value, seed) that diverges: the study page must mark it.
DIVERGED_CELL = ("tanh", 1.0, 1)


@dataclass(frozen=True)
class Seeded:
    study_id: int
    trial_ids: list[int]
    real_trial_ids: list[int]
    diverged_trial_ids: list[int]


def synthetic_curves(acc: float) -> list[EpochRecord]:
    """Three epochs of falling losses and a validation accuracy rising to ``acc`` (also the
    read-scale benchmark's synthetic trials)."""
    return [
        EpochRecord(
            epoch=e,
            step=10 * (e + 1),
            train_loss=2.3 - 0.4 * e,
            val_loss=2.2 - 0.35 * e,
            metrics={"val_acc": acc - 0.1 * (2 - e)},
            lr=1e-3,
            wall_time_s=0.5 * (e + 1),
        )
        for e in range(3)
    ]


def synthetic_result(function: str, value: float | None, seed: int, diverged: bool) -> TrialResult:
    base = {"erf": 0.80, "tanh": 0.78, "layernorm": 0.85}.get(function, 0.7)
    v = 0.0 if value is None else value
    acc = base - 0.06 * abs(v) - 0.02 * v + 0.01 * (seed - 0.5)
    diagnostics = [
        LayerDiagnostic(
            epoch=e,
            layer=layer,
            alpha=0.5 + 0.3 * e + 0.1 * i,
            gamma_mean=1.0 + 0.05 * e * (i + 1),
            gamma_std=0.02 * e,
            input_std=1.0 / (0.6 + 0.25 * e + 0.1 * i),
            branch_norm=0.1 * (i + 1) + 0.02 * e,
            grad_norm=0.01,
        )
        for e in range(3)
        for i, layer in enumerate(LAYERS)
    ]
    if diverged:
        return TrialResult(
            status="diverged",
            metrics={},
            objective="val_acc",
            curves=synthetic_curves(acc)[:1],
            diagnostics=diagnostics[: len(LAYERS)],
            diverged_at_step=7,
            spike_step=6,
            worker="synthetic-seed",
        )
    return synthetic_complete(acc, diagnostics=diagnostics, eval_train_loss=1.0 - acc / 2)


def synthetic_complete(acc: float, **fields: Any) -> TrialResult:
    """A COMPLETE synthetic result reaching validation accuracy ``acc`` (the seeded studies'
    common shape; ``fields`` adds what one seeder records beyond it, such as diagnostics)."""
    return TrialResult(
        status="complete",
        metrics={"val_acc": acc, "val_loss": 1.5 - acc},
        objective="val_acc",
        direction="maximize",
        curves=synthetic_curves(acc),
        train_time_s=1.0,
        total_time_s=1.2,
        worker="synthetic-seed",
        **fields,
    )


def seed_property_study(settings: Settings, *, real_trials: int = 0) -> Seeded:
    """Create, run (as above) and complete one property study; return its ids."""
    from normfree.storage import Database, Repository
    from normfree.workers.driver import create_study

    study_id = create_study(SPEC, settings=settings)
    db = Database(settings.database_url)
    repo = Repository(db, max_attempts=3)
    repo.set_study_status(study_id, "running")
    trial_ids: list[int] = []
    real: list[int] = []
    diverged: list[int] = []
    owner = "seed-worker"
    try:
        while (leased := repo.lease_next(study_id, owner, 600.0)) is not None:
            ax = leased.axis_values
            function = str(ax.get("function"))
            value = ax.get(SPEC.transform or "")
            seed = int(ax.get("seed", leased.config.seed))
            if len(real) < real_trials and not ax.get("baseline"):
                import torch

                from normfree.workers.trainer import train_trial

                torch.set_num_threads(1)
                result = train_trial(leased.config)
                real.append(leased.id)
            else:
                is_div = (function, value, seed) == DIVERGED_CELL
                result = synthetic_result(function, value, seed, is_div)
                if is_div:
                    diverged.append(leased.id)
            assert repo.finish_trial(leased.id, owner, leased.attempt, result)
            trial_ids.append(leased.id)
        repo.set_study_status(study_id, "complete")
    finally:
        db.dispose()
    assert not math.isnan(study_id)
    return Seeded(study_id, trial_ids, real, diverged)
