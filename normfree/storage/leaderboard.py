"""Leaderboards: arms ranked over their seeds, read from the arm summaries or from scratch.

One ranking (``rank``) turns per-arm inputs (:class:`Arm`: values per seed, counts, the first
trial's norm and axes) into rows; the inputs come from one of two places:

- ``arms_from_summaries``: the ``arm_results`` rows (``storage.aggregates``), one per arm. The
  default, and what keeps a leaderboard's cost proportional to its arms, not its trials.
- ``arms_from_trials``: every finished trial, grouped in Python. The from-scratch definition; it
  serves ``metric=`` (any final metric, which the summaries do not keep) and one study's board
  (bounded by the study's size), and the contract tests compare the two on both backends.

LayerNorm pairing reads the LayerNorm arms' latest value per seed in the candidate's context:
from the summaries (``pairing_from_summaries``) or from its trials (``pairing_from_trials``).
Statistics are ``storage.stats``; values enter them in seed order in both paths, so the two give
bit-identical numbers. ``summarize`` and Welch's test are memoised on their value tuples: a board
rebuilt after one trial finished recomputes only the arms whose values changed.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cache, lru_cache
from typing import Any

import sqlalchemy as sa

from normfree.specs import arm_settings
from normfree.storage import failures, stats
from normfree.storage.aggregates import FINISHED, order_key, shown_trials
from normfree.storage.models import ArmResultRow, CandidateRow, TrialRow

BASELINE_GROUP = "baseline"
REFERENCE_NORM = "layernorm"
_EARLIEST = datetime.min.replace(tzinfo=UTC)


@dataclass
class Arm:
    """What the ranking needs of one arm (one config without its seed) on one proxy."""

    arm_key: str
    candidate: str
    context_key: str
    norm: dict[str, Any]
    axis_values: dict[str, Any]
    overrides: dict[str, Any]
    objective: str | None
    direction: str | None
    n_trials: int
    n_diverged: int
    n_failed: int
    n_pruned: int
    by_seed: dict[int, float] = field(default_factory=dict)
    study_ids: list[int] = field(default_factory=list)
    # stored fields that could not be read (a corrupt summary row): read as empty, and named on
    # the arm's row so the API says what it could not show instead of failing the whole board
    unreadable: list[str] = field(default_factory=list)


def arm_text(function: str, value: Any = None, options: Mapping[str, Any] | None = None) -> str:
    """How an arm reads everywhere (leaderboards in the API and the CLI, a study's cells):
    ``erf``, ``shift_h(erf, 0.5)``, ``erf @ 0.5`` (a property study's transform value),
    ``erf + s`` (the operator with s, named as reference cells name it: ``specs.operator_label``)
    and ``erf [alpha0=1]`` (other options that change the arm, sorted)."""
    from normfree.specs import operator_label

    options = dict(options or {})
    label = operator_label(function, str(options.pop("shift", "none")))
    if value is not None:
        label += f" @ {value}"
    if options:
        label += " [" + ", ".join(f"{k}={v}" for k, v in sorted(options.items())) + "]"
    return label


# NormSpec's defaults: an option at its default does not distinguish an arm.
_NORM_DEFAULTS = {"shift": "none", "affine": True, "alpha0": 0.5, "learn_alpha": True}


def row_options(row: Mapping[str, Any]) -> dict[str, Any]:
    """A board row's options worth showing: its overrides and the norm options away from their
    defaults (two arms of an options study over alpha0 must not read alike)."""
    extra = dict(row.get("overrides") or {})
    norm = row.get("norm") or {}
    for key, default in _NORM_DEFAULTS.items():
        if key in norm and norm[key] != default:
            extra[key] = norm[key]
    return extra


# (group, properties) of a function that storage has no candidate row for: catalog functions and
# transform calls (``search_space.catalog.describe``); None when it is not a catalog function.
Describe = Callable[[str], tuple[str, Mapping[str, Any]] | None]


def row_group(row: Mapping[str, Any], describe: Describe | None) -> tuple[Any, Mapping[str, Any]]:
    """A board row's group and properties: its stored candidate's, else the catalog's (of its
    name, or of its definition where the name holds stored user functions: ``shift_h(mine,
    0.5)`` is described by ``shift_h(<mine's formula>, 0.5)``, as it trained).

    Catalog functions are not stored as candidates, so a board that filtered on stored rows
    alone would drop them from their own group; the CLI and the API both file rows here.
    """
    group, props = row.get("group"), row.get("properties") or {}
    if (group and props) or group == BASELINE_GROUP or describe is None:
        return group, props
    info = describe(row["candidate"])
    formula = (row.get("norm") or {}).get("formula")
    if info is None and formula:  # a text naming stored user functions: its definition
        info = describe(formula)
    if info is None:
        return group, props
    return group or info[0], props or info[1]


def in_group(
    rows: Iterable[Mapping[str, Any]], group: str, describe: Describe | None
) -> list[dict[str, Any]]:
    """The rows whose group (stored, else from the catalog) is ``group``, ranks kept."""
    out = []
    for r in rows:
        grp, props = row_group(r, describe)
        if grp == group:
            out.append({**r, "group": grp, "properties": props})
    return out


def props_match(have: Mapping[str, Any], want: Mapping[str, Any]) -> bool:
    """Stored properties equal every wanted value (exact match, as ``list_candidates`` does)."""
    return all(have.get(k) == v for k, v in want.items())


def is_baseline(candidate: str, norm: Mapping[str, Any] | None) -> bool:
    from normfree.specs import BASELINES

    return candidate in BASELINES and not (norm or {}).get("formula")


def _trial_value(t: Any, metric: str | None) -> float | None:
    if metric is None:
        return t.objective_value
    metrics = t.metrics if isinstance(t.metrics, Mapping) else {}  # corrupt: no value
    v = metrics.get(metric)
    return float(v) if isinstance(v, int | float) else None


def _readable(value: Any, name: str, unreadable: list[str]) -> dict[str, Any]:
    """A stored JSON mapping of an arm, or {} with ``name`` added to ``unreadable``: these
    columns are NOT NULL, so None is text that was not JSON (``db.tolerant_json_loads``), and
    another shape is a corrupt row. The arm keeps its place on the board, the field named."""
    if isinstance(value, Mapping):
        return dict(value)
    unreadable.append(name)
    return {}


def _by_finish(t: Any) -> tuple[datetime, int]:
    """(finish time, id); a trial without a finish time first, as ``aggregates.order_key``."""
    return (t.finished_at or _EARLIEST, t.id)


# -- inputs from scratch ----------------------------------------------------------------------


def finished_trials(
    session: Any, proxy: str, study_id: int | None = None, *, archived: bool = False
) -> list[Any]:
    """The finished trials of ``proxy`` (of one study), ordered by finish time then id;
    archived ones (an archived arm or study) only with ``archived``.

    A study's board counts the trials it reused (``trials.reused_from``: its results); a
    proxy's board counts each run once, so it leaves the copies out, as the arm summaries do.
    """
    q = sa.select(TrialRow).where(TrialRow.proxy == proxy, TrialRow.status.in_(FINISHED))
    if not archived:
        q = q.where(*shown_trials(TrialRow.archived, TrialRow.study_id))
    if study_id is not None:
        q = q.where(TrialRow.study_id == study_id)
    else:
        q = q.where(TrialRow.reused_from.is_(None))
    return sorted(session.scalars(q), key=_by_finish)


def arms_from_trials(trials: Sequence[Any], metric: str | None = None) -> list[Arm]:
    """Group trials (ordered by finish) into arms: the from-scratch definition of an arm's inputs.

    One value per seed: the latest COMPLETE trial's (objective, or ``metric`` from its final
    metrics) when several studies ran the same seed. The first trial gives norm, axes and
    overrides; the first objective names the metric; the last direction decides the ranking.
    """
    groups: dict[str, list[Any]] = defaultdict(list)
    for t in trials:
        groups[t.arm_key].append(t)
    arms = []
    for key, ts in groups.items():
        first = ts[0]
        by_seed: dict[int, float] = {}
        for t in ts:  # ordered by finish time: the latest value of a seed wins
            v = _trial_value(t, metric) if t.status == "COMPLETE" else None
            if v is not None:
                by_seed[t.seed] = v
        dirs = [t.direction for t in ts if t.direction]
        unreadable: list[str] = []
        config = _readable(first.config, "config", unreadable)
        overrides = arm_settings(config)
        arms.append(
            Arm(
                arm_key=key,
                candidate=first.candidate,
                context_key=first.context_key,
                norm=_readable(first.norm, "norm", unreadable),
                axis_values=_readable(first.axis_values, "axis_values", unreadable),
                overrides=_readable(overrides, "overrides", unreadable),
                objective=metric or next((t.objective for t in ts if t.objective), None),
                direction=dirs[-1] if dirs else None,
                n_trials=len(ts),
                n_diverged=sum(t.status == "DIVERGED" for t in ts),
                n_failed=sum(t.status == "FAILED" for t in ts),
                n_pruned=sum(t.status == "PRUNED" for t in ts),
                by_seed=by_seed,
                study_ids=sorted({t.study_id for t in ts}),
                unreadable=unreadable,
            )
        )
    return arms


def pairing_from_trials(
    session: Any,
    proxy: str,
    contexts: Iterable[str],
    metric: str | None = None,
    *,
    archived: bool = False,
) -> dict[str, dict[int, float]]:
    """Per context, LayerNorm's latest COMPLETE value per seed, from its trials (archived ones
    only with ``archived``)."""
    out: dict[str, dict[int, float]] = {}
    q = sa.select(TrialRow).where(
        TrialRow.candidate == REFERENCE_NORM,
        TrialRow.status == "COMPLETE",
        TrialRow.proxy == proxy,
    )
    if not archived:
        q = q.where(*shown_trials(TrialRow.archived, TrialRow.study_id))
    for chunk in _chunks(sorted(set(contexts)), 500):
        rows = sorted(session.scalars(q.where(TrialRow.context_key.in_(chunk))), key=_by_finish)
        for t in rows:
            v = _trial_value(t, metric)
            if v is not None:
                out.setdefault(t.context_key, {})[t.seed] = v
    return out


# -- inputs from the arm summaries --------------------------------------------------------------


def _readable_seeds(seeds: Any) -> dict[int, float] | None:
    """A summary's ``{"seed": [value, order]}`` as {seed: value}; None when it is not that."""
    try:
        return {int(s): float(v[0]) for s, v in seeds.items()}
    except (AttributeError, TypeError, ValueError, IndexError, KeyError):
        return None


# the summary columns an Arm takes as stored, and those it takes only when they read as mappings
_ARM_COLUMNS = (
    "arm_key", "candidate", "context_key", "objective", "direction",
    "n_trials", "n_diverged", "n_failed", "n_pruned",
)  # fmt: skip
_ARM_MAPPINGS = ("norm", "axis_values", "overrides")


def _arm_from_summary(row: Any) -> Arm:
    m = row._mapping if hasattr(row, "_mapping") else row
    unreadable: list[str] = []

    by_seed = _readable_seeds(m["seeds"])
    if by_seed is None:
        unreadable.append("seeds")
    study_ids = m["study_ids"]
    if not isinstance(study_ids, list):
        unreadable.append("study_ids")
    return Arm(
        **{name: m[name] for name in _ARM_COLUMNS},
        **{name: _readable(m[name], name, unreadable) for name in _ARM_MAPPINGS},
        by_seed=by_seed or {},
        study_ids=study_ids if isinstance(study_ids, list) else [],
        unreadable=unreadable,
    )


def arms_from_summaries(session: Any, proxy: str) -> list[Arm]:
    """Every arm of ``proxy`` from ``arm_results``: one row per arm."""
    a = ArmResultRow.__table__
    return [
        _arm_from_summary(r)
        for r in session.execute(sa.select(a).where(a.c.proxy == proxy).order_by(a.c.first_order))
    ]


def pairing_from_summaries(
    session: Any, proxy: str, contexts: Iterable[str]
) -> dict[str, dict[int, float]]:
    """Per context, LayerNorm's latest value per seed, merged over its arms (by finish order)."""
    a = ArmResultRow.__table__
    latest: dict[str, dict[int, tuple[str, float]]] = {}
    q = sa.select(a.c.context_key, a.c.seeds).where(
        a.c.proxy == proxy, a.c.candidate == REFERENCE_NORM
    )
    for chunk in _chunks(sorted(set(contexts)), 500):
        for ctx, seeds in session.execute(q.where(a.c.context_key.in_(chunk))):
            held = latest.setdefault(ctx, {})
            for s, (value, order) in (seeds or {}).items():
                seed = int(s)
                if seed not in held or order > held[seed][0]:
                    held[seed] = (order, float(value))
    return {ctx: {s: v for s, (_o, v) in sorted(m.items())} for ctx, m in latest.items()}


# -- the ranking ----------------------------------------------------------------------------------


@lru_cache(maxsize=1 << 16)
def _summary(values: tuple[float, ...], confidence: float) -> stats.Summary:
    return stats.summarize(values, confidence)


@lru_cache(maxsize=1 << 16)
def _welch(a: tuple[float, ...], b: tuple[float, ...]) -> float | None:
    return stats.welch_p_value(a, b)


def candidate_info(session: Any, names: Iterable[str]) -> dict[str, tuple[Any, dict[str, Any]]]:
    """(group, properties) of the stored candidates among ``names``."""
    out: dict[str, tuple[Any, dict[str, Any]]] = {}
    q = sa.select(CandidateRow.name, CandidateRow.group, CandidateRow.properties)
    for chunk in _chunks(sorted(set(names)), 500):
        for name, group, props in session.execute(q.where(CandidateRow.name.in_(chunk))):
            # properties that are not a mapping (a corrupt row) read as unknown: None
            out[name] = (group, props if isinstance(props, Mapping) else None)
    return out


@lru_cache(maxsize=1 << 14)
def identity(function: str) -> str:
    """The text that names ``function``'s identity: a transform at its identity dropped
    (``shift_h(erf, 0)`` -> ``erf``, ``search_space.resolver.spelling``), else the text as it is.
    Every view that lists arms (the leaderboards, a study's cells, a candidate's results) keys
    its rows on it, so one function is one row everywhere."""
    if "(" not in function:
        return function
    from normfree.search_space.resolver import spelling

    return spelling(function, collapse=True)


def merge_identities(arms: Sequence[Arm]) -> list[Arm]:
    """One function, one row: arms whose functions are one function by their text (a transform
    at its identity: ``shift_h(erf, 0)`` is ``erf``, ``search_space.resolver.spelling``) and
    alike in everything else (context, norm options, overrides) become one arm, under the plain
    name when one of them has it (else the first's). A seed trained under both names counts
    once (the plain arm's value)."""
    import json

    merged: dict[tuple[str, ...], Arm] = {}
    # plain names first, so the merged arm keeps the plain arm's name, key and values
    named = [(identity(a.candidate), a) for a in arms]
    for name, arm in sorted(named, key=lambda na: na[0] != na[1].candidate):
        formula = arm.norm.get("formula")
        norm = {k: v for k, v in arm.norm.items() if k not in ("name", "formula")}
        key = (
            name,
            identity(formula) if formula else "",
            arm.context_key,
            json.dumps(norm, sort_keys=True, default=str),
            json.dumps(arm.overrides, sort_keys=True, default=str),
        )
        into = merged.get(key)
        if into is None:  # alone, an arm keeps its own name (a property study's cell reads so)
            merged[key] = arm
            continue
        for seed, value in arm.by_seed.items():
            into.by_seed.setdefault(seed, value)
        into.n_trials += arm.n_trials
        into.n_diverged += arm.n_diverged
        into.n_failed += arm.n_failed
        into.n_pruned += arm.n_pruned
        into.study_ids = sorted({*into.study_ids, *arm.study_ids})
        into.unreadable = [*into.unreadable, *arm.unreadable]
    return list(merged.values())


def rank(
    arms: Sequence[Arm],
    pairing: Mapping[str, Mapping[int, float]],
    candidates: Mapping[str, tuple[Any, dict[str, Any]]],
    *,
    group: str | None = None,
    properties: Mapping[str, Any] | None = None,
    metric: str | None = None,
    direction: stats.Direction | None = None,
    alpha: float = stats.ALPHA,
) -> list[dict[str, Any]]:
    """Leaderboard rows (see ``Repository.leaderboard`` for their keys), best first."""
    rows: list[dict[str, Any]] = []
    for arm in merge_identities(arms):
        info = candidates.get(arm.candidate)
        if info is not None:
            cgroup, cprops = info
        else:
            cgroup = BASELINE_GROUP if is_baseline(arm.candidate, arm.norm) else None
            cprops = {}
        if group is not None and cgroup != group:
            continue
        if properties and not props_match(cprops or {}, properties):
            continue
        seeds = sorted(arm.by_seed)
        values = tuple(arm.by_seed[s] for s in seeds)
        arm_dir: stats.Direction = direction or arm.direction or "maximize"  # type: ignore[assignment]
        summary = _summary(values, 1 - alpha)
        ln = pairing.get(arm.context_key, {})
        vs_ln = None
        shared = sorted(set(arm.by_seed) & set(ln))
        if shared and arm.candidate != REFERENCE_NORM:
            d = stats.paired_difference([arm.by_seed[x] for x in shared], [ln[x] for x in shared])
            vs_ln = {
                "n_pairs": d.n,
                "seeds": shared,
                "mean_diff": d.mean,
                "std": d.std,
                "ci_half_width": d.half_width,
                "ci_low": d.low,
                "ci_high": d.high,
            }
        rows.append(
            {
                "arm_key": arm.arm_key,
                "candidate": arm.candidate,
                "norm": arm.norm,
                "axis_values": arm.axis_values,
                "overrides": arm.overrides,
                "group": cgroup,
                "properties": cprops if cprops is not None else {},
                "objective": metric or arm.objective,
                "direction": arm_dir,
                "n": summary.n,
                "n_trials": arm.n_trials,
                "n_diverged": arm.n_diverged,
                "n_failed": arm.n_failed,
                "n_pruned": arm.n_pruned,
                "mean": summary.mean,
                "std": summary.std,
                "ci_half_width": summary.half_width,
                "ci_low": summary.low,
                "ci_high": summary.high,
                "bound": summary.bound(arm_dir),
                "seeds": seeds,
                # the per-seed values behind the mean: the board's rank reliability reads them
                # (fidelity.reliability.board_reliability)
                "seed_values": {x: arm.by_seed[x] for x in seeds},
                "vs_layernorm": vs_ln,
                "study_ids": list(arm.study_ids),
                "unreadable": [*arm.unreadable, *(["properties"] if cprops is None else [])],
                "_values": values,
                "_summary": summary,
            }
        )
    # An arm with no completed seed (every seed failed, diverged or was pruned) has no value to
    # rank: it is listed after the ranked arms, unranked, and never compared with the best.
    ranked = sorted(
        (r for r in rows if r["n"]),
        key=lambda r: (stats.rank_key(r["_summary"], r["direction"]), r["candidate"]),
    )
    unranked = sorted((r for r in rows if not r["n"]), key=lambda r: (r["candidate"], r["arm_key"]))
    best_values = ranked[0]["_values"] if ranked else None
    for i, r in enumerate(ranked, start=1):
        r["rank"], r["ranked"] = i, True
        p = 1.0 if i == 1 else _welch(r["_values"], best_values or ())
        r["p_vs_best"] = p
        # stats.indistinguishable, on the p-value already computed
        r["indistinguishable_from_best"] = i == 1 or p is None or p > alpha
    for r in unranked:
        r["rank"], r["ranked"] = None, False
        r["p_vs_best"] = None
        r["indistinguishable_from_best"] = False
    rows = ranked + unranked
    for r in rows:
        del r["_values"], r["_summary"]
    return rows


def leaderboard(
    db: Any,
    proxy: str,
    *,
    group: str | None = None,
    properties: Mapping[str, Any] | None = None,
    study_id: int | None = None,
    metric: str | None = None,
    direction: stats.Direction | None = None,
    alpha: float = stats.ALPHA,
    from_scratch: bool = False,
    archived: bool = False,
) -> list[dict[str, Any]]:
    """The ranked arms of ``proxy``; see ``Repository.leaderboard``.

    Arms come from the summaries unless a study or a metric is named (then from that study's
    trials, or every trial for a metric) or ``from_scratch`` asks for the reference path, which
    also pairs with LayerNorm from its trials. ``archived`` counts archived studies and arms
    too: from the trials, since the summaries leave them out.
    """
    with db.session(readonly=True) as s:
        if from_scratch or metric is not None or archived:
            trials = finished_trials(s, proxy, study_id, archived=archived)
            arms = arms_from_trials(trials, metric)
            pairing = pairing_from_trials(
                s, proxy, (a.context_key for a in arms), metric, archived=archived
            )
        else:
            if study_id is not None:
                arms = arms_from_trials(finished_trials(s, proxy, study_id))
            else:
                arms = arms_from_summaries(s, proxy)
            pairing = pairing_from_summaries(s, proxy, (a.context_key for a in arms))
        arms = merge_identities(arms)  # before the candidate rows are read: by the plain name
        cands = candidate_info(s, (a.candidate for a in arms))
        failed = [a.arm_key for a in arms if a.n_failed or a.n_diverged]
        reasons = failures.arm_failures(s, proxy, failed, study_id) if failed else {}
    rows = rank(
        arms,
        pairing,
        cands,
        group=group,
        properties=properties,
        metric=metric,
        direction=direction,
        alpha=alpha,
    )
    for r in rows:
        r["failure"] = reasons.get(r["arm_key"])
        r["unranked_reason"] = None if r["ranked"] else failures.unranked_reason(r)
    return rows


def metric_names(db: Any, proxy: str, sample: int = 200) -> list[str]:
    """The final metrics a leaderboard of ``proxy`` can rank by: those of its latest
    ``sample`` complete trials (what ``metric=`` accepts), sorted."""
    q = (
        sa.select(TrialRow.metrics)
        .where(TrialRow.proxy == proxy, TrialRow.status == "COMPLETE")
        .order_by(TrialRow.id.desc())
        .limit(sample)
    )
    with db.session(readonly=True) as s:
        return sorted({k for (m,) in s.execute(q) for k in (m or {})})


@cache
def _proxies_query() -> Any:
    # built once: the board page asks after every commit under a writer
    a = ArmResultRow.__table__
    total = sa.func.sum(a.c.n_trials)
    return (
        sa.select(a.c.proxy, total)
        .group_by(a.c.proxy)
        .having(total > 0)
        .order_by(total.desc(), a.c.proxy)
    )


def proxies_by_finished(db: Any) -> list[str]:
    """Proxies with finished trials, most finished first (from the arm summaries)."""
    with db.read() as conn:  # Core: the leaderboard page asks on every request
        rows = conn.execute(_proxies_query()).all()
    return [p for p, _n in rows]


def _chunks(seq: Sequence[Any], size: int) -> Iterable[Sequence[Any]]:
    for i in range(0, len(seq), size):
        yield seq[i : i + size]


__all__ = [
    "BASELINE_GROUP",
    "REFERENCE_NORM",
    "Arm",
    "arms_from_summaries",
    "arms_from_trials",
    "leaderboard",
    "order_key",
    "pairing_from_summaries",
    "pairing_from_trials",
    "rank",
]
