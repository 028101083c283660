"""The reads behind a study's trial export: every trial whole, and its diagnostics summarised.

An export is a table a researcher opens in pandas or a spreadsheet: one row per trial with its
config, final metrics and a few numbers that say how its norms behaved. The per-layer, per-epoch
diagnostics (hundreds of rows a trial) are folded here, in SQL, to the last diagnosed epoch:
the mean over the slots of each diagnostic and the largest input magnitude, input std, branch
norm and gradient norm of any slot, and the training monitor's maxima over the whole run (the
largest activation seen between probes). Those are what a failure is read from; the trial's own
document (``GET /api/trials/{id}``) keeps every value.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from normfree.storage._common import DIAGNOSTIC_FIELDS
from normfree.storage.models import TrialDiagnosticRow, TrialRow
from normfree.storage.reads import _plain_rows

# Trial columns an export shows (lease bookkeeping, keys and the stored document are internal).
TRIAL_EXPORT_COLUMNS = (
    "id", "study_id", "proxy", "candidate", "seed", "status", "attempt", "axis_values",
    "objective", "direction", "objective_value", "metrics", "eval_train_loss",
    "diverged_at_step", "spike_step", "failure", "train_time_s", "total_time_s", "worker",
    "error", "created_at", "started_at", "finished_at", "config",
)  # fmt: skip
# Diagnostics whose largest slot is shown beside the mean: a single slot blowing up is the story.
MAX_FIELDS = ("input_std", "input_absmax", "branch_norm", "grad_norm")
# The training monitor's maxima in a slot's ``extra`` (``workers.diagnostics.MONITOR_KEYS``
# and ``train_nonfinite``), named here so that reading an export imports no torch.
TRAINING_MAXIMA = ("train_absmax", "train_std_max", "train_out_absmax", "train_nonfinite")


def study_trials(conn: Any, study_id: int, status: list[str] | None = None) -> list[dict[str, Any]]:
    """Every trial of the study in id order (or those in ``status``), with config and metrics."""
    t = TrialRow.__table__
    q = sa.select(*(t.c[c] for c in TRIAL_EXPORT_COLUMNS)).where(t.c.study_id == study_id)
    if status:
        q = q.where(t.c.status.in_(status))
    return _plain_rows(conn.execute(q.order_by(t.c.id)))


def diagnostics_summary(conn: Any, study_id: int) -> dict[int, dict[str, Any]]:
    """Per trial of the study that has diagnostics: at its last diagnosed epoch, the number of
    slots, each diagnostic's mean over the slots and the maxima of :data:`MAX_FIELDS`."""
    d, t = TrialDiagnosticRow.__table__, TrialRow.__table__
    last = (
        sa.select(d.c.trial_id, sa.func.max(d.c.epoch).label("epoch"))
        .join(t, t.c.id == d.c.trial_id)
        .where(t.c.study_id == study_id)
        .group_by(d.c.trial_id)
        .subquery()
    )
    columns = [
        d.c.trial_id,
        last.c.epoch.label("epoch"),
        sa.func.count().label("layers"),
        *(sa.func.avg(d.c[f]).label(f"{f}_mean") for f in DIAGNOSTIC_FIELDS),
        *(sa.func.max(d.c[f]).label(f"{f}_max") for f in MAX_FIELDS),
    ]
    q = (
        sa.select(*columns)
        .join(last, sa.and_(d.c.trial_id == last.c.trial_id, d.c.epoch == last.c.epoch))
        .group_by(d.c.trial_id, last.c.epoch)
    )
    out: dict[int, dict[str, Any]] = {}
    for row in conn.execute(q):
        values = dict(row._mapping)
        tid = int(values.pop("trial_id"))
        out[tid] = {
            k: (float(v) if isinstance(v, int | float) and k not in ("epoch", "layers") else v)
            for k, v in values.items()
        }
    for tid, maxima in _training_maxima(conn, study_id).items():
        out.setdefault(tid, {}).update(maxima)
    return out


def _training_maxima(conn: Any, study_id: int) -> dict[int, dict[str, float]]:
    """Per trial, the largest value over every epoch and slot of the training monitor's
    extras (:data:`TRAINING_MAXIMA`: what happened between probes, the epoch a run diverged in
    included); only trials that recorded them."""
    d, t = TrialDiagnosticRow.__table__, TrialRow.__table__
    columns = [sa.func.max(d.c.extra[k].as_float()).label(f"{k}_max") for k in TRAINING_MAXIMA]
    q = (
        sa.select(d.c.trial_id, *columns)
        .join(t, t.c.id == d.c.trial_id)
        .where(t.c.study_id == study_id)
        .group_by(d.c.trial_id)
    )
    out: dict[int, dict[str, float]] = {}
    for row in conn.execute(q):
        values = {k: float(v) for k, v in row._mapping.items() if k != "trial_id" and v is not None}
        if values:
            out[int(row.trial_id)] = values
    return out


__all__ = [
    "MAX_FIELDS",
    "TRAINING_MAXIMA",
    "TRIAL_EXPORT_COLUMNS",
    "diagnostics_summary",
    "study_trials",
]
