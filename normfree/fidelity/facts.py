"""The calibration facts: published at-scale outcomes a default screen must reproduce.

Each fact compares two cells of one screen in seed standard deviations (science.md section 7:
the bar a default screen must clear). The seed std of a comparison is the pooled std of its
two cells, sqrt((s_a^2 + s_b^2) / 2), so neither cell's luck sets the yardstick alone; a cell
that failed to train on most seeds has failed (it is never a low score). Everything compares
*goodness* (higher is better: accuracy as is, losses negated), so one rule reads the same on a
ViT's accuracy and a DiT's loss.

Rules:
- ``not_worse``: subject mean >= versus mean - k sigma (a failed subject fails the fact);
- ``worse_or_failed``: subject failed, or subject mean <= versus mean - k sigma;
- ``worse``: subject failed, or its mean is below the versus mean;
- ``within``: |subject mean - versus mean| <= k sigma.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from normfree.fidelity.reference import Cell, cell_key
from normfree.fidelity.report import ProxyTrial

Rule = Literal["not_worse", "worse_or_failed", "worse", "within"]
DYT_PAPER = "DyT paper (Zhu et al., CVPR 2025)"
DERF_PAPER = "Derf paper (Chen et al., arXiv 2512.10938)"

LN = Cell(function="layernorm")
RMS = Cell(function="rmsnorm")
DYT = Cell(function="tanh")
DERF = Cell(function="erf", shift="scalar")
NONE = Cell(function="identity")
TANH_FIXED = Cell(function="tanh", alpha=1.0)


@dataclass(frozen=True)
class Fact:
    """One published direction a screen must reproduce."""

    family: Literal["vit", "dit"]
    claim: str
    subject: Cell
    versus: Cell
    rule: Rule
    sigmas: float = 0.0
    metric: Literal["objective", "fd"] = "objective"
    source: str = ""


FACTS: tuple[Fact, ...] = (
    Fact("vit", "Derf at least as good as LayerNorm minus one seed std", DERF, LN, "not_worse",
         1.0, source=f"{DERF_PAPER}: ViT-B 82.8 vs 82.3, ViT-L 83.8 vs 83.1"),
    Fact("vit", "DyT at least as good as LayerNorm minus one seed std", DYT, LN, "not_worse",
         1.0, source=f"{DYT_PAPER}: ViT-B 82.5 vs 82.3, ViT-L 83.6 vs 83.1"),
    Fact("vit", "no norm (identity) at least 3 seed stds below LayerNorm, or failed", NONE, LN,
         "worse_or_failed", 3.0, source=f"{DYT_PAPER} Table 8: ViT-S/B fail to train"),
    Fact("vit", "tanh with alpha fixed (at 1) below tanh with a learnable alpha", TANH_FIXED,
         DYT, "worse", source=f"{DYT_PAPER} Table 9: ViT-B 81.1 vs 82.5"),
    Fact("vit", "RMSNorm within one seed std of LayerNorm", RMS, LN, "within", 1.0,
         source=f"{DERF_PAPER}: ViT-B 82.4 vs 82.3, ViT-L 83.0 vs 83.1"),
    Fact("dit", "Derf's loss at most LayerNorm's plus one seed std", DERF, LN, "not_worse", 1.0,
         source=f"{DERF_PAPER}: DiT-B/4 FID 63.23 vs 64.93 (L/4, XL/2 likewise)"),
    Fact("dit", "Derf's FD at most LayerNorm's plus one seed std (where measured)", DERF, LN,
         "not_worse", 1.0, metric="fd", source=f"{DERF_PAPER}: DiT FID, all three sizes"),
    Fact("dit", "no norm (identity) worse than LayerNorm, or failed", NONE, LN,
         "worse_or_failed", 0.0, source="science.md section 7 (the DiT screen's bar)"),
)  # fmt: skip


def facts_for(family: str) -> list[Fact]:
    return [f for f in FACTS if f.family == family]


def cells_for(family: str) -> list[Cell]:
    """The cells a family's facts need, each once, in first-use order."""
    out: dict[str, Cell] = {}
    for f in facts_for(family):
        for c in (f.subject, f.versus):
            out.setdefault(cell_key(c), c)
    return list(out.values())


@dataclass
class _Arm:
    values: list[float]
    failed: int

    @property
    def is_failed(self) -> bool:
        return self.failed > len(self.values)

    @property
    def mean(self) -> float | None:
        return statistics.fmean(self.values) if self.values else None

    @property
    def std(self) -> float | None:
        return statistics.stdev(self.values) if len(self.values) > 1 else None


def _arm(trials: Sequence[ProxyTrial], cell: Cell, metric: str) -> _Arm:
    key = cell_key(cell)
    values, failed = [], 0
    for t in trials:
        if t.cell != key:
            continue
        if t.failed:
            failed += 1
            continue
        v = t.objective if metric == "objective" else t.fd
        if v is not None and math.isfinite(v):
            values.append(v)
    return _Arm(values, failed)


def evaluate(fact: Fact, trials: Sequence[ProxyTrial]) -> dict[str, Any]:
    """One fact on a screen's trials: both cells' figures, the margin, pass/fail (None: not
    measurable here, e.g. FD on a screen that does not sample)."""
    direction = next((t.objective_direction for t in trials), "maximize")
    sign = 1.0 if (fact.metric == "objective" and direction == "maximize") else -1.0
    a, b = _arm(trials, fact.subject, fact.metric), _arm(trials, fact.versus, fact.metric)
    stds = [s for s in (a.std, b.std) if s is not None]
    sigma = math.sqrt(statistics.fmean(s * s for s in stds)) if stds else None
    ok: bool | None
    diff = None
    if a.mean is not None and b.mean is not None:
        diff = sign * (a.mean - b.mean)  # goodness of subject minus versus
    if not (a.values or a.failed) or not (b.values or b.failed) or b.is_failed:
        ok = None  # a cell is missing, or the yardstick itself failed
    elif fact.rule in ("worse_or_failed", "worse") and a.is_failed:
        ok = True
    elif a.is_failed or diff is None or (sigma is None and fact.sigmas > 0):
        ok = False if a.is_failed else None
    elif fact.rule == "not_worse":
        ok = diff >= -fact.sigmas * sigma  # type: ignore[operator]
    elif fact.rule == "worse_or_failed":
        ok = diff <= -fact.sigmas * (sigma or 0.0)
    elif fact.rule == "worse":
        ok = diff < 0
    else:  # within
        ok = abs(diff) <= fact.sigmas * sigma  # type: ignore[operator]
    return {
        "claim": fact.claim,
        "rule": fact.rule,
        "sigmas": fact.sigmas,
        "metric": fact.metric,
        "source": fact.source,
        "subject": {"cell": fact.subject.label, **_arm_dict(a)},
        "versus": {"cell": fact.versus.label, **_arm_dict(b)},
        "seed_std": sigma,
        "difference": diff,
        "difference_in_stds": (diff / sigma) if diff is not None and sigma else None,
        "passed": ok,
    }


def _arm_dict(a: _Arm) -> dict[str, Any]:
    return {
        "n": len(a.values),
        "failed_seeds": a.failed,
        "failed": a.is_failed,
        "mean": a.mean,
        "std": a.std,
    }


def evaluate_all(family: str, trials: Sequence[ProxyTrial]) -> list[dict[str, Any]]:
    return [evaluate(f, trials) for f in facts_for(family)]


__all__ = ["FACTS", "Fact", "cells_for", "evaluate", "evaluate_all", "facts_for"]
