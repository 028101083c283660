"""The fidelity report: does a proxy order functions as the published at-scale results do?

Inputs are plain data: a :class:`~normfree.fidelity.reference.ReferenceSet` and the proxy's
finished trials as :class:`ProxyTrial` rows (storage builds them). Per setting of the set that
speaks about the proxy's model family:

- **cells both have**: reference rows whose cell (function + options, matched by what the
  function computes, so ``shift_h(erf, 0)`` is ``erf``) has at least one informative trial.
- **rank correlation**: Spearman's rho and Kendall's tau-b between the reference's order and the
  proxy's mean order, with a percentile bootstrap interval over seeds. Seeds are resampled
  *jointly* (seed i is the same seed in every cell, as studies pair them), so the interval keeps
  the pairing. "Failed to train" ranks below every value on both sides.
- **pairwise order**: for each pair of cells whose reference values differ by more than the
  setting's resolution (or where exactly one failed), whether the proxy orders them the same
  way; the proxy's own Welch p-value says whether its order is more than seed noise.
- **failure agreement**: reference "failed" against the proxy's verdict, both ways.
- **scatter**: proxy mean +- 95% t interval against the reference value, for the plot.

A trial counts as *failed to train* when it diverged (the trainer's verdict: non-finite loss,
loss past the preset's factor of its first value, or an end near the untrained level). A cell
failed on the proxy when more of its seeds failed than completed. Pruned and errored trials say
nothing about the function and are left out.
"""

from __future__ import annotations

import math
import warnings
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from normfree.fidelity.caveats import MIN_ORDER_PAIRS, MIN_RANK_CELLS, uncalibrated_note
from normfree.fidelity.reference import ReferenceRow, ReferenceSet, cell_key

BOOTSTRAP = 1000  # resamples for the rank-correlation intervals
BOOTSTRAP_SEED = 0  # the report is deterministic for the same trials
CONFIDENCE = 0.95


@dataclass(frozen=True)
class ProxyTrial:
    """One finished trial, reduced to what the report reads."""

    cell: str  # reference.norm_cell_key of the trial's NormSpec
    label: str  # how the arm is shown (candidate name and options)
    seed: int
    failed: bool  # diverged: failed to train
    objective: float | None = None  # the preset's objective (COMPLETE trials)
    objective_direction: str = "maximize"
    eval_train_loss: float | None = None
    fd: float | None = None  # the sample-quality score (fd_<dataset>_clf) when measured


def fd_score(metrics: dict[str, Any] | None) -> float | None:
    """A trial's sample-quality score (:attr:`ProxyTrial.fd`) from its metrics: the ``fd_*``
    metric its preset measures (one at most), None when it measured none."""
    return next((float(v) for k, v in (metrics or {}).items() if k.startswith("fd_")), None)


@dataclass
class _Cell:
    label: str
    values: dict[int, float] = field(default_factory=dict)  # seed -> value (complete)
    failed: set[int] = field(default_factory=set)  # seeds that failed to train

    def record(self, seed: int, value: float | None, failed: bool) -> None:
        # the latest trial of a seed wins (trials arrive in finishing order)
        self.values.pop(seed, None)
        self.failed.discard(seed)
        if failed:
            self.failed.add(seed)
        elif value is not None and math.isfinite(value):
            self.values[seed] = value

    @property
    def informative(self) -> bool:
        return bool(self.values) or bool(self.failed)


def _t95(n: int) -> float:
    from scipy import stats

    return float(stats.t.ppf(0.5 + CONFIDENCE / 2, n - 1)) if n > 1 else math.nan


def _is_failed(n_values: int, n_failed: int) -> bool:
    return n_failed > n_values


def _summary(c: _Cell, sign: float) -> dict[str, Any]:
    vals = list(c.values.values())
    n = len(vals)
    mean = float(np.mean(vals)) if n else None
    std = float(np.std(vals, ddof=1)) if n > 1 else None
    half = _t95(n) * std / math.sqrt(n) if std is not None else None
    return {
        "label": c.label,
        "n": n,
        "n_failed": len(c.failed),
        "seeds": sorted(set(c.values) | c.failed),
        "failed": _is_failed(n, len(c.failed)),
        "mean": mean,
        "std": std,
        "ci_low": None if half is None or mean is None else mean - half,
        "ci_high": None if half is None or mean is None else mean + half,
        "goodness": None if mean is None else sign * mean,
    }


def _scores(ref_rows: Sequence[ReferenceRow], sign: float) -> list[float]:
    """Reference goodness (higher is better); failed = -inf."""
    return [-math.inf if r.failed else sign * float(r.value) for r in ref_rows]  # type: ignore[arg-type]


def _rank_corr(a: Sequence[float], b: Sequence[float]) -> tuple[float | None, float | None]:
    """Spearman rho and Kendall tau-b of two score lists (-inf allowed: ranks lowest)."""
    from scipy import stats

    if len(a) < 3:
        return None, None
    ra, rb = stats.rankdata(a), stats.rankdata(b)
    if np.ptp(ra) == 0 or np.ptp(rb) == 0:
        return None, None
    rho = float(np.corrcoef(ra, rb)[0, 1])
    tau = float(stats.kendalltau(ra, rb).statistic)
    return rho, (tau if math.isfinite(tau) else None)


def _proxy_score(values: Iterable[float], n_failed: int, sign: float) -> float | None:
    vals = list(values)
    if _is_failed(len(vals), n_failed):
        return -math.inf
    if not vals:
        return None
    return sign * float(np.mean(vals))


def _bootstrap(
    cells: Sequence[_Cell], ref_scores: Sequence[float], sign: float, n_boot: int
) -> tuple[list[float | None], list[float | None]]:
    """Percentile intervals of rho and tau over joint resamples of the seeds."""
    seeds = sorted({s for c in cells for s in (*c.values, *c.failed)})
    if len(seeds) < 2 or n_boot <= 0:
        return [None, None], [None, None]
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    rhos, taus = [], []
    for _ in range(n_boot):
        draw = rng.choice(seeds, size=len(seeds), replace=True)
        scores: list[float] = []
        for c in cells:
            vals = [c.values[s] for s in draw if s in c.values]
            fails = sum(1 for s in draw if s in c.failed)
            if not vals and not fails:  # none of this cell's seeds drawn: keep its own data
                vals, fails = list(c.values.values()), len(c.failed)
            score = _proxy_score(vals, fails, sign)
            scores.append(-math.inf if score is None else score)
        rho, tau = _rank_corr(ref_scores, scores)
        if rho is not None:
            rhos.append(rho)
        if tau is not None:
            taus.append(tau)
    lo, hi = (1 - CONFIDENCE) / 2 * 100, (1 + CONFIDENCE) / 2 * 100

    def pct(xs: list[float]) -> list[float | None]:
        if len(xs) < n_boot // 2:  # mostly undefined (constant ranks): no interval
            return [None, None]
        return [float(np.percentile(xs, lo)), float(np.percentile(xs, hi))]

    return pct(rhos), pct(taus)


def _ref_order(a: ReferenceRow, b: ReferenceRow, sign: float, resolution: float) -> int:
    """+1 if the reference says a is better than b, -1 if worse, 0 if it does not say."""
    if a.failed or b.failed:
        return 0 if a.failed == b.failed else (-1 if a.failed else 1)
    ga = sorted((sign * a.value_low, sign * a.value_high))  # type: ignore[operator]
    gb = sorted((sign * b.value_low, sign * b.value_high))  # type: ignore[operator]
    if ga[0] - gb[1] > resolution + 1e-12:
        return 1
    if gb[0] - ga[1] > resolution + 1e-12:
        return -1
    return 0


def _welch_p(a: Sequence[float], b: Sequence[float]) -> float | None:
    from scipy import stats

    if len(a) < 2 or len(b) < 2:
        return None
    if np.std(a) == 0 and np.std(b) == 0:
        return 0.0 if np.mean(a) != np.mean(b) else 1.0
    with warnings.catch_warnings():  # scipy's precision note when one sample is constant
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(stats.ttest_ind(a, b, equal_var=False).pvalue)


# Why a setting is compared with the number it is (``proxy_metric_reason``).
_RANK_BY = (
    "the screen's ranking metric, its objective (the README ranks every screen by it; on "
    "dit-screen that is the diffusion loss, not its 500-sample FD)"
)
_FITTING = (
    "a training-loss setting asks how well a model fits: compared with the eval-mode "
    "training loss, not the ranking metric"
)
_METRICS = ("objective", "eval_train_loss", "fd")


def _pick_metric(setting_metric: str, trials: Sequence[ProxyTrial]) -> tuple[str, float, str]:
    """Which proxy number a reference setting is compared with, its sign (+1: higher is
    better) and why. Every outcome setting (accuracy, FID, loss) is compared with the metric
    the screen ranks by, its objective, so the report judges the order a user reads off the
    board; the other numbers the trials measured are shown beside it (``others``)."""
    if setting_metric == "train_loss":
        return "eval_train_loss", -1.0, _FITTING
    return "objective", _sign("objective", trials), _RANK_BY


def _sign(metric: str, trials: Sequence[ProxyTrial]) -> float:
    if metric != "objective":
        return -1.0  # losses and distances: lower is better
    direction = next((t.objective_direction for t in trials), "maximize")
    return 1.0 if direction == "maximize" else -1.0


def _value(t: ProxyTrial, metric: str) -> float | None:
    return {"objective": t.objective, "eval_train_loss": t.eval_train_loss, "fd": t.fd}[metric]


def setting_report(
    rows: Sequence[ReferenceRow],
    trials: Sequence[ProxyTrial],
    n_boot: int = BOOTSTRAP,
    metric: str | None = None,
) -> dict[str, Any]:
    """The report of one setting (rows share family, metric, direction and resolution).

    ``metric``: compare with this proxy number instead of the one :func:`_pick_metric`
    chooses (how ``others`` are computed)."""
    head = rows[0]
    ref_sign = 1.0 if head.direction == "maximize" else -1.0
    keys = [cell_key(r.cell) for r in rows]
    relevant = [t for t in trials if t.cell in set(keys)]
    if metric is None:
        metric, sign, reason = _pick_metric(head.metric, relevant)
    else:
        sign, reason = _sign(metric, relevant), "shown beside the compared metric"
    cells: dict[str, _Cell] = {}
    for t in relevant:
        c = cells.setdefault(t.cell, _Cell(t.label))
        c.record(t.seed, None if t.failed else _value(t, metric), t.failed)
    matched = [
        (r, k) for r, k in zip(rows, keys, strict=True) if k in cells and cells[k].informative
    ]
    missing = [r.cell.label for r, k in zip(rows, keys, strict=True) if (r, k) not in matched]
    m_rows = [r for r, _ in matched]
    m_cells = [cells[k] for _, k in matched]
    ref_scores = _scores(m_rows, ref_sign)
    summaries = [_summary(c, sign) for c in m_cells]
    proxy_scores = [
        -math.inf if s["failed"] else (s["goodness"] if s["goodness"] is not None else -math.inf)
        for s in summaries
    ]
    rho, tau = _rank_corr(ref_scores, proxy_scores)
    rho_ci: list[float | None] = [None, None]
    tau_ci: list[float | None] = [None, None]
    if rho is not None:
        rho_ci, tau_ci = _bootstrap(m_cells, ref_scores, sign, n_boot)

    pairs = []
    for i in range(len(m_rows)):
        for j in range(i + 1, len(m_rows)):
            ref = _ref_order(m_rows[i], m_rows[j], ref_sign, head.resolution)
            if ref == 0:
                continue
            a, b = (i, j) if ref > 0 else (j, i)  # a: the reference's better cell
            pa, pb = proxy_scores[a], proxy_scores[b]
            if pa == pb:
                agree: bool | None = None  # a proxy tie (e.g. both failed) agrees with nothing
            else:
                agree = pa > pb
            sa, sb = summaries[a], summaries[b]
            if sa["failed"] != sb["failed"]:
                p = 0.0
            else:
                p = _welch_p(list(m_cells[a].values.values()), list(m_cells[b].values.values()))
            pairs.append(
                {
                    "better": m_rows[a].cell.label,
                    "worse": m_rows[b].cell.label,
                    "agree": agree,
                    "proxy_p": p,
                    "proxy_confident": p is not None and p < 1 - CONFIDENCE,
                }
            )
    fail = {"both_failed": 0, "reference_only": 0, "proxy_only": 0, "both_trained": 0}
    for r, s in zip(m_rows, summaries, strict=True):
        key = {
            (True, True): "both_failed",
            (True, False): "reference_only",
            (False, True): "proxy_only",
            (False, False): "both_trained",
        }[(r.failed, s["failed"])]
        fail[key] += 1
    n_fail_cells = sum(fail.values())
    cells_out = []
    for r, s in zip(m_rows, summaries, strict=True):
        cells_out.append(
            {
                "cell": r.cell.label,
                "reference": {
                    "value": r.value,
                    "low": r.value_low,
                    "high": r.value_high,
                    "failed": r.failed,
                    "note": r.note,
                },
                "proxy": {k: v for k, v in s.items() if k != "goodness"},
            }
        )
    n_agree = sum(1 for p in pairs if p["agree"])
    others = []
    if reason != "shown beside the compared metric":
        done = [t for t in relevant if not t.failed]
        for other in _METRICS:
            if other == metric or not any(_value(t, other) is not None for t in done):
                continue
            o = setting_report(rows, trials, n_boot, metric=other)
            others.append(
                {k: o[k] for k in ("proxy_metric", "proxy_direction", "n_cells", "spearman",
                                   "spearman_ci", "pairs_agree", "pairs_resolvable")}
            )  # fmt: skip
    return {
        "setting": head.setting,
        "family": head.family,
        "metric": head.metric,
        "direction": head.direction,
        "resolution": head.resolution,
        "proxy_metric": metric,
        "proxy_metric_reason": reason,
        "proxy_direction": "maximize" if sign > 0 else "minimize",
        "others": others,
        "n_cells": len(m_rows),
        "cells": cells_out,
        "missing": missing,
        "spearman": rho,
        "spearman_ci": rho_ci,
        "kendall": tau,
        "kendall_ci": tau_ci,
        "pairs": pairs,
        "pairs_resolvable": len(pairs),
        "pairs_agree": n_agree,
        "pair_agreement": n_agree / len(pairs) if pairs else None,
        "failures": {
            **fail,
            "agreement": (fail["both_failed"] + fail["both_trained"]) / n_fail_cells
            if n_fail_cells
            else None,
        },
    }


def build_report(
    reference: ReferenceSet,
    trials: Sequence[ProxyTrial],
    *,
    family: str,
    subject: dict[str, Any] | None = None,
    n_boot: int = BOOTSTRAP,
) -> dict[str, Any]:
    """The fidelity of ``trials`` (one proxy, or one study) against ``reference``.

    Only settings about ``family`` (``vit``/``dit``) are compared; settings where no cell has
    trials are listed in ``not_compared``. The ``summary`` pools the settings: mean rho and tau
    over settings with a correlation, pairs agreeing over pairs resolvable, failure agreement
    over cells; it is what a leaderboard shows beside its ranking.
    """
    by_setting: dict[str, list[ReferenceRow]] = defaultdict(list)
    for r in reference.rows:
        if r.family == family:
            by_setting[r.setting].append(r)
    settings, not_compared = [], []
    for name, rows in by_setting.items():
        rep = setting_report(rows, trials, n_boot)
        (settings if rep["n_cells"] else not_compared).append(rep if rep["n_cells"] else name)
    rhos = [s["spearman"] for s in settings if s["spearman"] is not None]
    # the correlations a headline may quote: over enough cells to mean something (caveats)
    solid = [s for s in settings if s["spearman"] is not None and s["n_cells"] >= MIN_RANK_CELLS]
    taus = [s["kendall"] for s in settings if s["kendall"] is not None]
    n_pairs = sum(s["pairs_resolvable"] for s in settings)
    n_agree = sum(s["pairs_agree"] for s in settings)
    n_conf = sum(1 for s in settings for p in s["pairs"] if p["agree"] and p["proxy_confident"])
    fails = {
        k: sum(s["failures"][k] for s in settings)
        for k in ("both_failed", "reference_only", "proxy_only", "both_trained")
    }
    n_cells = sum(fails.values())
    summary = {
        "settings_compared": len(settings),
        "cells": sum(s["n_cells"] for s in settings),
        "spearman_mean": float(np.mean(rhos)) if rhos else None,
        "spearman_headline": float(np.mean([s["spearman"] for s in solid])) if solid else None,
        "spearman_headline_cells": sum(s["n_cells"] for s in solid),
        "kendall_mean": float(np.mean(taus)) if taus else None,
        "pairs_resolvable": n_pairs,
        "pairs_agree": n_agree,
        "pairs_agree_confident": n_conf,
        "pair_agreement": n_agree / n_pairs if n_pairs else None,
        "failures": fails,
        "failure_agreement": (fails["both_failed"] + fails["both_trained"]) / n_cells
        if n_cells
        else None,
    }
    return {
        "reference": {"name": reference.name, "title": reference.title, "source": reference.source},
        "subject": subject or {},
        "family": family,
        "summary": summary,
        "settings": settings,
        "not_compared": not_compared,
    }


def headline(report: dict[str, Any]) -> str:
    """One line for a leaderboard: how far to trust its ranking.

    No verdict where there is none to give (``fidelity.caveats``): a preset without a
    calibration gets a line that says so instead of figures; a rank correlation over fewer
    than ``MIN_RANK_CELLS`` cells per setting, and orders over fewer than ``MIN_ORDER_PAIRS``
    pairs, are left out (the report still holds them).
    """
    s = report["summary"]
    name = report["reference"]["name"]
    subject = report.get("subject") or {}
    if report.get("calibrated", True) is False:
        return (
            f"no fidelity headline: {uncalibrated_note(str(subject.get('proxy', 'this proxy')))}"
            f" ({s['cells']} cells in common with {name})"
        )
    if not s["cells"]:
        return f"fidelity vs {name}: no cell in common yet"
    parts = []
    if s["pair_agreement"] is not None and s["pairs_resolvable"] >= MIN_ORDER_PAIRS:
        parts.append(f"{s['pairs_agree']}/{s['pairs_resolvable']} published orders reproduced")
    if s.get("spearman_headline") is not None:
        parts.append(f"mean Spearman {s['spearman_headline']:+.2f}")
    if s["failure_agreement"] is not None:
        parts.append(f"failures agree on {s['failure_agreement']:.0%} of {s['cells']} cells")
    if s.get("spearman_headline") is None or s["pairs_resolvable"] < MIN_ORDER_PAIRS:
        parts.append(
            f"too few cells for a rank verdict (a correlation needs {MIN_RANK_CELLS} cells of "
            f"one setting, orders {MIN_ORDER_PAIRS} pairs)"
        )
    return f"fidelity vs {name}: " + ", ".join(parts)


__all__ = ["BOOTSTRAP", "ProxyTrial", "build_report", "headline", "setting_report"]
