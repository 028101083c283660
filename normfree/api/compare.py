"""Learning curves of chosen trials or arms, side by side: what ``/compare`` and
``GET /api/compare`` show.

Two ways to choose, as researchers compare runs: trials by id (``trials=3,7,12``, from any
studies and proxies), or arms of one study by the label its cells carry (``study=4&arm=erf``,
``arm=shift_h(erf, 0.5)``; every seed of an arm is drawn, with the arm's mean per epoch). One
metric is overlaid at a time; the answer lists every metric the chosen curves hold, so the
page can offer the others. The bounds keep one answer small whatever a URL asks for.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

from pydantic import Field

from normfree.api.errors import ApiError, not_found
from normfree.api.inputs import db_int
from normfree.api.schemas import CurvePoint, _Out
from normfree.api.services.state import ServiceState
from normfree.jsonsafe import finite

__all__ = [
    "MAX_ARMS",
    "MAX_CURVES",
    "MAX_TRIALS",
    "ComparedArm",
    "ComparedTrial",
    "Comparison",
    "compare",
    "mean_curve",
    "metric_value",
    "split_items",
]

MAX_TRIALS = 20  # trials named one by one: more is not a readable overlay
MAX_ARMS = 12  # arms of one study (each drawn with all its seeds)
MAX_CURVES = 200  # curves drawn in all (arms x seeds): the answer stays a few hundred KB
LOSSES = ("train_loss", "val_loss")


class ComparedTrial(_Out):
    id: int
    study_id: int
    proxy: str
    arm: str = Field(description="The arm's label, as the study's cells spell it.")
    candidate: str
    seed: int
    status: str
    objective_value: float | None = None
    curves: list[CurvePoint] = Field(default_factory=list)


class ComparedArm(_Out):
    label: str
    trial_ids: list[int]
    n_complete: int


class Comparison(_Out):
    """What was chosen, the metric overlaid, and each trial's curve."""

    mode: Literal["trials", "arms"]
    study_id: int | None = None
    metric: str | None = Field(
        default=None, description="The metric overlaid (default: the trials' objective)."
    )
    metrics: list[str] = Field(
        default_factory=list, description="Every metric the chosen curves hold."
    )
    objective: str | None = None
    direction: str | None = None
    arms: list[ComparedArm] = Field(default_factory=list)
    trials: list[ComparedTrial] = Field(default_factory=list)


def split_items(values: Iterable[str] | None) -> list[str]:
    """Each value split at commas outside parentheses and brackets (``shift_h(erf, 0.5)`` and
    ``erf [alpha0=1, lr=0.002]`` are one item each), stripped, empty ones and repeats dropped."""
    out: list[str] = []
    for text in values or ():
        depth, start = 0, 0
        for i, ch in enumerate(text):
            if ch in "([":
                depth += 1
            elif ch in ")]":
                depth = max(0, depth - 1)
            elif ch == "," and depth == 0:
                out.append(text[start:i])
                start = i + 1
        out.append(text[start:])
    seen: list[str] = []
    for item in (t.strip() for t in out):
        if item and item not in seen:
            seen.append(item)
    return seen


def _trial_ids(values: Iterable[str] | None) -> list[int]:
    ids = [db_int(t, "trials", minimum=1) for t in split_items(values)]
    if len(ids) > MAX_TRIALS:
        raise ApiError(
            422,
            "too_many",
            f"trials: {len(ids)} chosen, at most {MAX_TRIALS} compare on one plot; compare "
            "arms of a study (study=N&arm=...) to draw every seed of an arm",
        )
    return ids


def _metrics(trials: Sequence[ComparedTrial]) -> list[str]:
    names: set[str] = set()
    for t in trials:
        for c in t.curves:
            names.update(k for k in LOSSES if getattr(c, k) is not None)
            names.update(k for k, v in c.metrics.items() if v is not None)
    return sorted(names, key=lambda n: (n in LOSSES, n))


def _chosen_metric(metric: str | None, available: list[str], objective: str | None) -> str | None:
    if metric:
        if metric not in available:
            shown = ", ".join(available) or "none: no chosen trial has a curve"
            raise ApiError(
                422,
                "unknown_metric",
                f"metric: {metric!r} is not in the chosen curves; choose one of {shown}",
                {"choices": available},
            )
        return metric
    for name in (objective, "val_loss", "train_loss"):
        if name and name in available:
            return name
    return available[0] if available else None


def _compared(heads: Sequence[Mapping[str, Any]], curves: Mapping[int, list[dict]], arm: Any):
    out = []
    for h in heads:
        points = [
            CurvePoint(**finite({**p, "metrics": p.get("metrics") or {}}))
            for p in curves.get(h["id"], [])
        ]
        out.append(
            ComparedTrial(
                id=h["id"],
                study_id=h["study_id"],
                proxy=h["proxy"],
                arm=arm(h),
                candidate=h["candidate"],
                seed=h["seed"],
                status=h["status"],
                objective_value=finite(h.get("value")),
                curves=points,
            )
        )
    return out


def _transform(state: ServiceState, study_id: int, rows: dict[int, Any]) -> str | None:
    if study_id not in rows:
        rows[study_id] = state.repo.get_study(study_id)
    row = rows[study_id]
    spec = row.get("spec") if row else None
    return spec.get("transform") if isinstance(spec, Mapping) else None


def compare(
    state: ServiceState,
    *,
    trials: Iterable[str] | None = None,
    study_id: int | None = None,
    arms: Iterable[str] | None = None,
    metric: str | None = None,
) -> Comparison:
    """The comparison a request names: ``trials`` (ids, comma lists allowed) or ``study_id``
    with ``arms`` (labels); 422 for neither, both, or too many; 404 for what does not exist."""
    from normfree.storage import curves as C
    from normfree.workers.progress import arm_of

    ids = _trial_ids(trials)
    labels = split_items(arms)
    if ids and (labels or study_id is not None):
        raise ApiError(
            422, "ambiguous", "choose trials (trials=...) or a study's arms (study=N&arm=...)"
        )
    if not ids and study_id is None:
        raise ApiError(
            422,
            "nothing_chosen",
            "choose trials (trials=3,7,12) or a study's arms (study=4&arm=erf&arm=tanh)",
        )
    studies: dict[int, Any] = {}
    if ids:
        with state.db.read() as conn:
            heads = C.trial_heads(conn, ids=ids)
        missing = sorted(set(ids) - {h["id"] for h in heads})
        if missing:
            raise not_found("trial", ", ".join(map(str, missing)))
        order = {tid: i for i, tid in enumerate(ids)}
        heads.sort(key=lambda h: order[h["id"]])
        chosen_arms: list[ComparedArm] = []
        mode: Literal["trials", "arms"] = "trials"
    else:
        assert study_id is not None
        if state.repo.get_study(study_id) is None:
            raise not_found("study", study_id)
        if not labels:
            raise ApiError(422, "nothing_chosen", "arm: choose at least one of the study's arms")
        if len(labels) > MAX_ARMS:
            raise ApiError(
                422, "too_many", f"arm: {len(labels)} chosen, at most {MAX_ARMS} on one plot"
            )
        transform = _transform(state, study_id, studies)
        with state.db.read() as conn:
            every = C.trial_heads(conn, study_id=study_id)
        by_arm: dict[str, list[dict[str, Any]]] = {}
        for h in every:
            by_arm.setdefault(arm_of(h, transform)[1], []).append(h)
        unknown = [a for a in labels if a not in by_arm]
        if unknown:
            known = sorted(by_arm)
            raise ApiError(
                404,
                "not_found",
                f"study {study_id} has no arm {', '.join(map(repr, unknown))}; its arms: "
                + ", ".join(known[:30])
                + (" ..." if len(known) > 30 else ""),
                {"arms": known},
            )
        heads = [h for a in labels for h in by_arm[a]]
        if len(heads) > MAX_CURVES:
            raise ApiError(
                422,
                "too_many",
                f"arm: the chosen arms hold {len(heads)} trials, at most {MAX_CURVES} draw on "
                "one plot; choose fewer arms",
            )
        chosen_arms = [
            ComparedArm(
                label=a,
                trial_ids=[h["id"] for h in by_arm[a]],
                n_complete=sum(h["status"] == "COMPLETE" for h in by_arm[a]),
            )
            for a in labels
        ]
        mode = "arms"
    with state.db.read() as conn:
        points = C.curves_of(conn, [h["id"] for h in heads])
    compared = _compared(
        heads, points, lambda h: arm_of(h, _transform(state, h["study_id"], studies))[1]
    )
    available = _metrics(compared)
    objective = next((h["objective"] for h in heads if h.get("objective")), None)
    direction = next((h["direction"] for h in heads if h.get("direction")), None)
    return Comparison(
        mode=mode,
        study_id=study_id,
        metric=_chosen_metric(metric, available, objective),
        metrics=available,
        objective=objective,
        direction=direction,
        arms=chosen_arms,
        trials=compared,
    )


def mean_curve(trials: Sequence[Mapping[str, Any]], metric: str) -> tuple[list[int], list[float]]:
    """Per epoch, the mean of ``metric`` over the trials that reached it with a finite value."""
    sums: dict[int, list[float]] = {}
    for t in trials:
        for c in t.get("curves") or []:
            v = metric_value(c, metric)
            if v is not None:
                sums.setdefault(int(c["epoch"]), []).append(v)
    epochs = sorted(sums)
    return epochs, [sum(sums[e]) / len(sums[e]) for e in epochs]


def metric_value(point: Mapping[str, Any], metric: str) -> float | None:
    """One curve point's value of ``metric`` (a loss column or one of its metrics)."""
    v = point.get(metric) if metric in LOSSES else (point.get("metrics") or {}).get(metric)
    return float(v) if isinstance(v, int | float) and math.isfinite(v) else None


def compare_key(
    state: ServiceState,
    *,
    trials: Iterable[str] | None,
    study_id: int | None,
    arms: Sequence[str],
    metric: str | None,
) -> tuple[Any, Any]:
    """The cache key of a comparison: what it names, and the state of the trials it draws.

    Every write to a trial (a curve point, its result, a retry) moves its ``updated_at`` in the
    same transaction, so chosen trials are stamped by (id, status, updated_at); a study's arms
    by the study row's stamp and its trials' count and latest ``updated_at`` (an arm gains a
    seed with a new trial). One small query, no curves read."""
    import sqlalchemy as sa

    from normfree.storage.models import StudyRow, TrialRow

    ids = _trial_ids(trials)
    t = TrialRow.__table__
    with state.db.read() as conn:
        if ids:
            q = sa.select(t.c.id, t.c.status, t.c.updated_at).where(t.c.id.in_(ids))
            stamp: Any = tuple(sorted((r[0], r[1], str(r[2])) for r in conn.execute(q)))
        else:
            s = StudyRow.__table__
            row = conn.execute(
                sa.select(s.c.status, s.c.updated_at).where(s.c.id == study_id)
            ).first()
            agg = conn.execute(
                sa.select(sa.func.count(), sa.func.max(t.c.updated_at)).where(
                    t.c.study_id == study_id
                )
            ).one()
            stamp = (tuple(map(str, row or ())), int(agg[0]), str(agg[1]))
    return (("compare", tuple(ids), study_id, tuple(arms), metric), stamp)
