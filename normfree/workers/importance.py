"""Which properties predict good results: rank correlation per property, with bootstrap CIs.

Over the candidates a study trained (baselines excluded), each property of science.md section 4
becomes one numeric feature (:data:`FEATURES`) and each candidate one score: its mean objective
over seeds, oriented so that higher is better; a candidate whose trials were all pruned ranks
below every completed one, and one that only diverged or failed ranks below those.

Importance of a property = Spearman's rank correlation rho between the feature and the score,
with a 95% interval: the wider of a percentile bootstrap over *candidates* (the seeds of one
candidate are not independent evidence about a property, so they are averaged first) and the
Bonett-Wright Fisher-z interval (the bootstrap alone is far too narrow for a handful of
candidates).

Why this and not the permutation importance of a random forest or an fANOVA decomposition: a
generative study trains tens of candidates, not thousands. A forest fitted to 20 points mostly
memorises them, and its permutation importances carry neither a sign nor an interval; an fANOVA
needs a surrogate fitted on the same few points. A rank correlation has no hyperparameters, says
which way a property helps, is robust to the objective's scale and to outliers (one diverged
run), and its bootstrap interval says honestly when twenty candidates cannot tell. Its limit:
it is marginal, so correlated properties (bounded and growth, say) share credit; it is evidence
of association within this study's candidates, not of cause. A property constant across the
study (every candidate bounded, because the constraints demanded it) is reported as constant,
with no rho.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from scipy.stats import rankdata

from normfree.specs import BASELINES, RUN_OUTCOME_STATUSES
from normfree.storage.protocols import TrialLedger

__all__ = [
    "FEATURES",
    "GROWTH_ORDER",
    "features_of",
    "importance_with_counts",
    "property_importance",
    "study_importance",
]

GROWTH_ORDER = ("bounded", "logarithmic", "sub-linear power", "linear", "super-linear",
                "exponential")  # fmt: skip
MIN_CANDIDATES = 4
N_BOOT = 1000


def _flag(name: str) -> Callable[[Mapping[str, Any]], float]:
    return lambda p: float(bool(p.get(name)))


# feature name -> (how to read it from a Properties dict, what it means)
FEATURES: dict[str, tuple[Callable[[Mapping[str, Any]], float], str]] = {
    "zero_centred": (_flag("zero_centred"), "f(0) = 0"),
    "odd": (_flag("odd"), "f(-u) = -f(u)"),
    "bounded": (_flag("bounded"), "|f| bounded"),
    "growth": (
        lambda p: (
            float(GROWTH_ORDER.index(p["growth"])) if p.get("growth") in GROWTH_ORDER else math.nan
        ),
        "growth rate, ordinal: bounded < log < sub-linear < linear < super-linear < exp",
    ),
    "monotone": (
        lambda p: float(p.get("monotone") in ("increasing", "decreasing")),
        "monotone increasing or decreasing",
    ),
    "slope0": (lambda p: float(p.get("slope0", math.nan)), "f'(0)"),
    "flat_halfwidth": (lambda p: float(p.get("flat_halfwidth", 0.0)), "flat region around 0"),
    "abs_f0": (lambda p: abs(float(p.get("f0", math.nan))), "|f(0)|"),
    "continuous": (_flag("continuous"), "no jumps"),
    "differentiable": (_flag("differentiable"), "no kinks"),
    "turning_points": (lambda p: float(len(p.get("turning_points") or ())), "turning points"),
}


def features_of(props: Mapping[str, Any]) -> dict[str, float]:
    """The numeric features of one candidate's properties (NaN where a value is missing)."""
    out = {}
    for name, (read, _) in FEATURES.items():
        try:
            out[name] = read(props)
        except (TypeError, ValueError, KeyError):
            out[name] = math.nan
    return out


def _scores(rows: Sequence[Mapping[str, Any]], direction: str) -> dict[str, float]:
    """Per candidate: mean completed value (higher better); pruned and diverged ranked below."""
    values: dict[str, list[float]] = {}
    statuses: dict[str, set[str]] = {}
    for r in rows:
        name = r["candidate"]
        statuses.setdefault(name, set()).add(r["status"])
        v = r.get("value")
        if r["status"] == "COMPLETE" and v is not None and math.isfinite(v):
            values.setdefault(name, []).append(float(v) if direction == "maximize" else -float(v))
    means = {n: float(np.mean(v)) for n, v in values.items()}
    floor = min(means.values()) if means else 0.0
    spread = (max(means.values()) - floor) if means else 0.0
    step = spread if spread > 0 else 1.0
    out = dict(means)
    for name, st in statuses.items():
        if name in out:
            continue
        if "PRUNED" in st:
            out[name] = floor - step
        elif st & {"DIVERGED", "FAILED"}:
            out[name] = floor - 2 * step
    return out


def _spearman_rows(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Spearman rho of each row pair of x, y ([B, n]); NaN where a row is constant."""
    rx = rankdata(x, axis=1)
    ry = rankdata(y, axis=1)
    rx -= rx.mean(axis=1, keepdims=True)
    ry -= ry.mean(axis=1, keepdims=True)
    den = np.sqrt((rx**2).sum(axis=1) * (ry**2).sum(axis=1))
    with np.errstate(invalid="ignore", divide="ignore"):
        rho = (rx * ry).sum(axis=1) / den
    rho[den == 0] = np.nan
    return rho


def _fisher_interval(rho: float, n: int, level: float) -> tuple[float, float]:
    """Bonett-Wright interval for Spearman's rho: tanh(atanh(rho) +- z * sqrt((1 + rho^2/2) /
    (n - 3))). A percentile bootstrap over 5 candidates can only produce a handful of distinct
    resamples and gives intervals far too narrow; this one widens honestly as n shrinks."""
    from scipy.stats import norm

    r = max(-0.9999, min(0.9999, rho)) if math.isfinite(rho) else 0.0
    se = math.sqrt((1 + r * r / 2) / max(n - 3, 1))
    z = float(norm.ppf((1 + level) / 2))
    return math.tanh(math.atanh(r) - z * se), math.tanh(math.atanh(r) + z * se)


def property_importance(
    rows: Sequence[Mapping[str, Any]],
    properties: Mapping[str, Mapping[str, Any]],
    direction: str = "maximize",
    *,
    n_boot: int = N_BOOT,
    seed: int = 0,
    level: float = 0.95,
) -> dict[str, Any]:
    """Spearman rho of each property feature with the candidates' scores, bootstrap CIs.

    ``rows``: finished trials (keys ``candidate``, ``status``, ``value``); ``properties``:
    candidate name -> Properties dict. Baselines and candidates without properties are left out.
    Features come back sorted by |rho| (constant ones last).
    """
    scores = _scores([r for r in rows if r["candidate"] not in BASELINES], direction)
    names = sorted(n for n in scores if n in properties)
    out: dict[str, Any] = {
        "method": "spearman rank correlation; CI: bootstrap over candidates and Fisher-z, wider",
        "direction": direction,
        "n_candidates": len(names),
        "level": level,
        "features": [],
    }
    if len(names) < MIN_CANDIDATES:
        out["note"] = f"needs at least {MIN_CANDIDATES} candidates with results"
        return out
    y = np.array([scores[n] for n in names])
    feats = [features_of(properties[n]) for n in names]
    lo_q, hi_q = 100 * (1 - level) / 2, 100 * (1 + level) / 2
    result = []
    for k, (fname, (_, meaning)) in enumerate(FEATURES.items()):
        x = np.array([f[fname] for f in feats])
        ok = np.isfinite(x)
        entry: dict[str, Any] = {"name": fname, "meaning": meaning, "n": int(ok.sum())}
        if ok.sum() < MIN_CANDIDATES or np.ptp(x[ok]) == 0:
            entry.update(rho=None, ci_low=None, ci_high=None, importance=None, constant=True)
            result.append(entry)
            continue
        xs, ys = x[ok], y[ok]
        rho = float(_spearman_rows(xs[None, :], ys[None, :])[0])
        # Resample candidates (same draws for every feature without missing values).
        sub = np.random.default_rng([seed, k if not ok.all() else 0]).integers(
            0, len(xs), size=(n_boot, len(xs))
        )
        boot = _spearman_rows(xs[sub], ys[sub])
        boot = boot[np.isfinite(boot)]
        low, high = _fisher_interval(rho, len(xs), level)
        if boot.size:  # the wider of the two: neither is trustworthy alone at small n
            low = min(low, float(np.percentile(boot, lo_q)))
            high = max(high, float(np.percentile(boot, hi_q)))
        entry.update(
            rho=rho if math.isfinite(rho) else None,
            ci_low=low,
            ci_high=high,
            importance=abs(rho) if math.isfinite(rho) else None,
            constant=False,
            # The interval excludes 0: the association is unlikely to be resampling noise.
            significant=low is not None and high is not None and (low > 0 or high < 0),
        )
        result.append(entry)
    result.sort(key=lambda e: (e["importance"] is None, -(e["importance"] or 0.0), e["name"]))
    out["features"] = result
    return out


def study_importance(repo: TrialLedger, study_id: int, **kw: Any) -> dict[str, Any]:
    """:func:`property_importance` over a stored study's trials.

    Properties come from the candidates table; functions without a row are resolved by the
    one resolver from the trial's baked definition (``NormSpec.formula``: a transform of a
    stored candidate), else from the name (catalog names, transforms, formulas).
    """
    rows = [r for r in repo.list_trials(study_id) if r["status"] in RUN_OUTCOME_STATUSES]
    return _importance_of_rows(repo, rows, **kw)


def _importance_of_rows(
    repo: TrialLedger, rows: Sequence[Mapping[str, Any]], **kw: Any
) -> dict[str, Any]:
    from normfree.search_space.resolver import resolve

    direction = next((r["direction"] for r in rows if r.get("direction")), "maximize")
    baked = {r["candidate"]: (r.get("norm") or {}).get("formula") for r in rows}
    props: dict[str, Mapping[str, Any]] = {}
    for name in sorted(set(baked) - set(BASELINES)):
        stored = repo.get_candidate(name)
        if stored and stored.get("properties"):
            props[name] = stored["properties"]
            continue
        try:
            cand = resolve(baked[name] or name)
        except (ValueError, KeyError):
            continue  # a name nothing resolves any more: left out
        props[name] = cand.properties.model_dump(mode="json")
    return property_importance(rows, props, direction, **kw)


def importance_with_counts(repo: TrialLedger, study_id: int) -> dict[str, Any]:
    """The document ``storage.study_documents`` keeps: the study's importance (non-finite
    values cleaned) with the outcome counts of the very rows it was computed from, so that a
    reader can tell whether trials finished since."""
    from normfree.jsonsafe import finite
    from normfree.storage.study_documents import importance_document

    rows = [r for r in repo.list_trials(study_id) if r["status"] in RUN_OUTCOME_STATUSES]
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    return importance_document(finite(_importance_of_rows(repo, rows)), counts)
