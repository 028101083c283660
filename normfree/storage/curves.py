"""Reads of learning curves across trials: what a comparison and a search's pages plot.

A trial's own page reads its whole document (``storage.reads.trial_detail``: curves and every
layer's diagnostics). A comparison overlays the curves of up to a few hundred trials and needs
neither their diagnostics nor their configs, so these read only the columns they plot, a set
of trials by primary key or one study's rows through ``ix_trials_study_status``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import sqlalchemy as sa

from normfree.storage.models import TrialMetricRow, TrialRow

__all__ = ["CURVE_FIELDS", "HEAD_FIELDS", "curves_of", "last_epochs", "trial_heads"]

# What a compared trial is labelled and grouped by (``value``: its objective value).
HEAD_FIELDS = (
    "id", "study_id", "proxy", "candidate", "seed", "status", "axis_values", "objective",
    "direction", "value", "optuna_number", "finished_at",
)  # fmt: skip
# One point of a curve (``storage.specs.EpochRecord`` without its timings).
CURVE_FIELDS = ("epoch", "step", "train_loss", "val_loss", "metrics")
_COLUMN = {"value": "objective_value"}
# SQLite binds at most 32,766 parameters a statement; a comparison asks far fewer.
_CHUNK = 500


def _head_columns() -> list[Any]:
    return [getattr(TrialRow, _COLUMN.get(f, f)).label(f) for f in HEAD_FIELDS]


def _rows(result: Any) -> list[dict[str, Any]]:
    keys = list(result.keys())
    out = [dict(zip(keys, r, strict=True)) for r in result]
    for r in out:
        if r.get("finished_at") is not None:
            r["finished_at"] = r["finished_at"].isoformat()
    return out


def _chunks(ids: Sequence[int]) -> Iterable[list[int]]:
    for i in range(0, len(ids), _CHUNK):
        yield list(ids[i : i + _CHUNK])


def trial_heads(
    conn: Any, *, ids: Sequence[int] | None = None, study_id: int | None = None
) -> list[dict[str, Any]]:
    """The :data:`HEAD_FIELDS` of the trials ``ids`` (those that exist), or of every trial of
    ``study_id``; by id."""
    if (ids is None) == (study_id is None):
        raise ValueError("trial_heads: pass ids or study_id")
    if study_id is not None:
        q = sa.select(*_head_columns()).where(TrialRow.study_id == study_id)
        return _rows(conn.execute(q.order_by(TrialRow.id)))
    out: list[dict[str, Any]] = []
    for chunk in _chunks(sorted(set(ids or ()))):
        q = sa.select(*_head_columns()).where(TrialRow.id.in_(chunk)).order_by(TrialRow.id)
        out.extend(_rows(conn.execute(q)))
    return out


def curves_of(
    conn: Any, ids: Sequence[int], fields: Sequence[str] = CURVE_FIELDS
) -> dict[int, list[dict[str, Any]]]:
    """Per trial id, its curve points by epoch (a trial with none maps to ``[]``): the
    :data:`CURVE_FIELDS`, or ``fields`` (columns of ``trial_metrics``; an export adds ``lr``
    and ``wall_time``), ``metrics`` always a dict."""
    m = TrialMetricRow
    out: dict[int, list[dict[str, Any]]] = {int(i): [] for i in ids}
    cols = [m.trial_id, *(getattr(m, f) for f in fields)]
    for chunk in _chunks(sorted(out)):
        q = sa.select(*cols).where(m.trial_id.in_(chunk)).order_by(m.trial_id, m.epoch)
        for row in conn.execute(q):
            point = dict(zip(fields, row[1:], strict=True))
            found = point.get("metrics")
            point["metrics"] = found if isinstance(found, dict) else {}
            out[int(row[0])].append(point)
    return out


def last_epochs(conn: Any, study_id: int) -> dict[int, int]:
    """Per trial of the study that reported any epoch, the last epoch it reported (for a pruned
    trial: the epoch its pruner stopped it at, since the worker records an epoch before it
    asks the pruner)."""
    m, t = TrialMetricRow, TrialRow
    q = (
        sa.select(m.trial_id, sa.func.max(m.epoch))
        .join(t, t.id == m.trial_id)
        .where(t.study_id == study_id)
        .group_by(m.trial_id)
    )
    return {int(tid): int(epoch) for tid, epoch in conn.execute(q)}
