"""A search's own view (``search`` and ``generate`` studies): how the optimisation went.

- **history**: every trial in the order Optuna asked it (its trial number; trials no ask made,
  the best arms' extra seeds, after them by id), its objective value, and the best value so far;
- **importance**: which properties of a function predicted good results
  (``workers.importance``: Spearman rho per property with its interval);
- **pruning timeline**: per trial, the epochs it ran and where a pruner stopped it (the last
  epoch it reported: the worker records an epoch before it asks the pruner).

Built once per state of the study (its status and per-status counts, as its summary) and served
by ``GET /api/studies/{id}/search`` and the page ``/studies/{id}/search`` alike. The importance
is not computed here: the driver stores it when a trial finishes and the view looks it up
(``api.search_importance``), marked ``importance_stale`` while it lags the trials. The API
answer pages the trials (:func:`page_of`): a search can run thousands.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import Field

from normfree.api.compare import metric_value
from normfree.api.errors import ApiError
from normfree.api.schemas import _Out
from normfree.api.services.state import ServiceState
from normfree.jsonsafe import finite

__all__ = [
    "DEFAULT_LIMIT",
    "MAX_LIMIT",
    "SearchTrial",
    "SearchView",
    "page_of",
    "search_kinds",
    "search_view",
]

DEFAULT_LIMIT = 100
MAX_LIMIT = 1000


def search_kinds() -> tuple[str, ...]:
    """The kinds whose studies have a search view (``StudyKind.searches``: their trials come
    one after another, each chosen from the results before it)."""
    from normfree.workers import kinds

    return tuple(k.name for k in kinds.KINDS.values() if k.searches)


class SearchTrial(_Out):
    id: int
    order: int = Field(description="1-based position in the history (Optuna's ask order).")
    number: int | None = Field(default=None, description="Optuna's trial number, if asked.")
    arm: str
    candidate: str
    seed: int
    status: str
    value: float | None = Field(default=None, description="The objective (COMPLETE only).")
    best_so_far: float | None = None
    epochs_run: int = Field(default=0, description="Epochs the trial reported.")
    pruned_at: int | None = Field(default=None, description="PRUNED: the epoch it stopped at.")
    last_value: float | None = Field(
        default=None, description="The objective at the last epoch it reported."
    )


class SearchView(_Out):
    study_id: int
    kind: str
    status: str
    objective: str | None = None
    direction: str = "maximize"
    counts: dict[str, int] = Field(default_factory=dict)
    best: SearchTrial | None = None
    trials: list[SearchTrial] = Field(default_factory=list)
    importance: dict[str, Any] | None = None
    importance_stale: bool = Field(
        default=False,
        description="True: the importance shown was computed before the latest trials finished "
        "(or none is stored yet); a refresh runs in the background.",
    )
    total_trials: int = Field(default=0, description="Trials in the history, all pages.")
    next_cursor: int | None = Field(
        default=None,
        description="Pass as `cursor` for the next page of `trials`; null on the last page.",
    )
    top_arms: list[str] = Field(
        default_factory=list, description="The best arms by objective, for a comparison."
    )


def _better(a: float, b: float, direction: str) -> bool:
    return a > b if direction == "maximize" else a < b


def search_view(state: ServiceState, study_id: int) -> SearchView:
    """The view of one search or generate study; 404 for no such study or another kind."""
    from normfree.api import search_importance
    from normfree.api.services.studies import study_key
    from normfree.workers.progress import arm_of

    key, row, snap = study_key(state, study_id)
    if row["kind"] not in search_kinds():
        raise ApiError(
            404,
            "not_found",
            f"study {study_id} is a {row['kind']} study: only {' and '.join(search_kinds())} "
            f"studies have a search view; its cells are at /api/studies/{study_id}",
        )
    return state.cache.get_or_build(
        (("search-view", study_id), (key, search_importance.mark(state, study_id))),
        lambda: _build(state, {**row, "status": snap.status}, dict(snap.counts), arm_of),
    )


def _build(
    state: ServiceState, row: Mapping[str, Any], counts: dict[str, int], arm_of: Any
) -> SearchView:
    from normfree.storage import curves as C

    study_id = int(row["id"])
    spec = row["spec"] if isinstance(row["spec"], Mapping) else {}
    with state.db.read() as conn:
        heads = C.trial_heads(conn, study_id=study_id)
        last = C.last_epochs(conn, study_id)
        pruned_ids = [h["id"] for h in heads if h["status"] == "PRUNED"]
        pruned_curves = C.curves_of(conn, pruned_ids) if pruned_ids else {}
    objective = next((h["objective"] for h in heads if h.get("objective")), None)
    direction = next((h["direction"] for h in heads if h.get("direction")), None)
    if objective is None or direction is None:
        try:
            from normfree.workers.scheduling import objective_of

            objective, direction = objective_of(row["proxy"])
        except Exception:  # an old study's proxy no longer registered
            direction = direction or "maximize"
    heads.sort(key=lambda h: (h["optuna_number"] is None, h["optuna_number"] or 0, h["id"]))
    trials: list[SearchTrial] = []
    best_value: float | None = None
    best: SearchTrial | None = None
    for i, h in enumerate(heads, start=1):
        value = finite(h.get("value")) if h["status"] == "COMPLETE" else None
        done = last.get(h["id"])
        last_value = None
        points = pruned_curves.get(h["id"])
        if points and objective:
            last_value = metric_value(points[-1], objective)
        t = SearchTrial(
            id=h["id"],
            order=i,
            number=h["optuna_number"],
            arm=arm_of(h, spec.get("transform"))[1],
            candidate=h["candidate"],
            seed=h["seed"],
            status=h["status"],
            value=value,
            epochs_run=0 if done is None else done + 1,
            pruned_at=done if h["status"] == "PRUNED" else None,
            last_value=last_value,
        )
        if value is not None and (best_value is None or _better(value, best_value, direction)):
            best_value, best = value, t
        trials.append(t.model_copy(update={"best_so_far": best_value}))
    from normfree.api.search_importance import lookup

    importance, stale = lookup(state, study_id, counts)
    return SearchView(
        study_id=study_id,
        kind=row["kind"],
        status=row["status"],
        objective=objective,
        direction=direction,
        counts=counts,
        best=best,
        trials=trials,
        importance=finite(importance),
        importance_stale=stale,
        total_trials=len(trials),
        top_arms=_top_arms(trials, direction),
    )


def _top_arms(trials: list[SearchTrial], direction: str, n: int = 3) -> list[str]:
    """The ``n`` arms with the best mean completed value."""
    values: dict[str, list[float]] = {}
    for t in trials:
        if t.value is not None:
            values.setdefault(t.arm, []).append(t.value)
    means = {a: sum(v) / len(v) for a, v in values.items()}
    return sorted(means, key=lambda a: -means[a] if direction == "maximize" else means[a])[:n]


def page_of(view: SearchView, cursor: int = 0, limit: int = DEFAULT_LIMIT) -> SearchView:
    """``view`` with the trials after position ``cursor`` (an ``order``), at most ``limit``;
    everything else (counts, best, importance, top arms) is over all trials."""
    chosen = [t for t in view.trials if t.order > cursor][:limit]
    more = bool(chosen) and chosen[-1].order < view.total_trials
    return view.model_copy(
        update={"trials": chosen, "next_cursor": chosen[-1].order if more else None}
    )
