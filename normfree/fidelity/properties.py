"""Property ablations at scale (the Derf paper's Tables 2-5) against a screen's trials.

A property study says something about scale only if its effects have there the sign they have
at scale. Per table of :data:`normfree.fidelity.published.PROPERTY_TABLES` this reads a
screen's trials (:class:`~normfree.fidelity.report.ProxyTrial` rows, operator without s as in
the paper) and checks the three things issue 25 asks of it:

- every cell that failed to train at scale *fails* on the screen: it failed on most seeds
  (diverged, or ended near chance: the trainer's verdict), or its mean sits at least
  ``sigmas`` (3) pooled seed stds below its base's;
- every cell that trained at scale *trains* on the screen: it completed on most seeds;
- drops grow with the published ones: Spearman's rank correlation between the published drop
  of each cell below its base and the screen's drop (a failure is the largest drop on both
  sides) is at least ``min_spearman`` (0.7).

A cell's *base* is the untransformed function of its row (``erf`` for ``flat_centre(erf, 1)``);
where the base itself failed at scale (unclipped ``linear`` in Table 2) the row's best published
cell stands in, on both sides. Table 4 (unbounded growth) has no base: its drops are read from
the table's best cell. Pure: no database, no torch.
"""

from __future__ import annotations

import math
import statistics
import warnings
from collections.abc import Sequence
from typing import Any

from normfree.fidelity.published import PROPERTY_TABLES
from normfree.fidelity.reference import Cell, cell_key
from normfree.fidelity.report import ProxyTrial

# The screen the README names for each table's property (README "Which preset answers which
# question"): boundedness and growth on the stress screen, centre sensitivity on the default.
PROPERTY_SCREENS: dict[str, str] = {
    "clip": "vit-stress",
    "linear_part": "vit-stress",
    "growth": "vit-stress",
    "flat_centre": "vit-screen-heldout",
}
SIGMAS = 3.0  # a drop this many pooled seed stds below the base counts as a failure
MIN_SPEARMAN = 0.7


def _arm(trials: Sequence[ProxyTrial], key: str) -> dict[str, Any]:
    seeds: dict[int, ProxyTrial] = {}
    for t in trials:
        if t.cell == key:
            seeds[t.seed] = t  # the latest trial of a seed wins
    values = [t.objective for t in seeds.values() if not t.failed and t.objective is not None]
    values = [v for v in values if math.isfinite(v)]
    failed = sum(t.failed for t in seeds.values())
    return {
        "n": len(values),
        "failed_seeds": failed,
        "failed": failed > len(values),
        "mean": statistics.fmean(values) if values else None,
        "std": statistics.stdev(values) if len(values) > 1 else None,
    }


def _pooled(a: dict[str, Any], b: dict[str, Any]) -> float | None:
    stds = [s for s in (a["std"], b["std"]) if s is not None]
    return math.sqrt(statistics.fmean(s * s for s in stds)) if stds else None


def _spearman(x: list[float], y: list[float]) -> float | None:
    from scipy.stats import spearmanr

    if len(x) < 3:
        return None
    finite = [v for v in x + y if math.isfinite(v)]
    big = (max(abs(v) for v in finite) if finite else 0.0) * 10 + 1.0
    xs = [big if v == math.inf else v for v in x]  # a failure: the largest drop
    ys = [big if v == math.inf else v for v in y]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a constant side gives NaN: reported as None
        rho = spearmanr(xs, ys).statistic
    return None if rho is None or not math.isfinite(rho) else float(rho)


def evaluate_table(
    table: str,
    trials: Sequence[ProxyTrial],
    *,
    sigmas: float = SIGMAS,
    min_spearman: float = MIN_SPEARMAN,
) -> dict[str, Any]:
    """One property table on a screen's trials (see the module docstring)."""
    setting, rows = PROPERTY_TABLES[table]
    direction = next((t.objective_direction for t in trials), "maximize")
    sign = 1.0 if direction == "maximize" else -1.0
    cells, pub_drops, screen_drops = [], [], []
    for base, row in rows.items():
        trained = [(f, v) for f, v in row if v is not None]
        ref_fn, ref_val = row[0] if base and row[0][1] is not None else max(trained, key=_val)
        ref = _arm(trials, cell_key(Cell(function=ref_fn)))
        for function, value in row:
            arm = _arm(trials, cell_key(Cell(function=function)))
            if not (arm["n"] or arm["failed_seeds"]):
                cells.append({"function": function, "published": value, "measured": False})
                continue
            sigma = _pooled(arm, ref)
            drop = None
            if arm["mean"] is not None and ref["mean"] is not None:
                drop = sign * (ref["mean"] - arm["mean"])
            drop_sigmas = drop / sigma if drop is not None and sigma else None
            dropped = function != ref_fn and drop_sigmas is not None and drop_sigmas >= sigmas
            verdict = "failed" if arm["failed"] else ("dropped" if dropped else "trained")
            pub_drop = math.inf if value is None else ref_val - value
            agree = verdict != "trained" if value is None else not arm["failed"]
            cells.append(
                {
                    "function": function,
                    "reference_cell": ref_fn,
                    "published": value,
                    "published_drop": None if value is None else pub_drop,
                    "measured": True,
                    **{f"screen_{k}": v for k, v in arm.items()},
                    "drop": drop,
                    "drop_in_stds": drop_sigmas,
                    "verdict": verdict,
                    "agrees": agree,
                }
            )
            screen = math.inf if arm["failed"] else drop
            if screen is not None:
                pub_drops.append(pub_drop)
                screen_drops.append(screen)
    measured = [c for c in cells if c["measured"]]
    fail_cells = [c for c in measured if c["published"] is None]
    train_cells = [c for c in measured if c["published"] is not None]
    rho = _spearman(pub_drops, screen_drops)
    ok_fail = all(c["agrees"] for c in fail_cells)
    ok_train = all(c["agrees"] for c in train_cells)
    return {
        "table": table,
        "setting": setting,
        "cells": cells,
        "measured": len(measured),
        "planned": len(cells),
        "failed_cells_fail": f"{sum(c['agrees'] for c in fail_cells)}/{len(fail_cells)}",
        "trained_cells_train": f"{sum(c['agrees'] for c in train_cells)}/{len(train_cells)}",
        "spearman_drops": rho,
        "passed": bool(measured) and ok_fail and ok_train and (rho or -1.0) >= min_spearman,
        "misses": [c["function"] for c in measured if not c["agrees"]],
    }


def _val(pair: tuple[str, float | None]) -> float:
    return -math.inf if pair[1] is None else pair[1]


def table_cells(table: str) -> list[str]:
    """The cell texts of one table, bases first (what a bench trains)."""
    return [f for row in PROPERTY_TABLES[table][1].values() for f, _ in row]


__all__ = ["MIN_SPEARMAN", "PROPERTY_SCREENS", "SIGMAS", "evaluate_table", "table_cells"]
