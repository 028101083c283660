"""The caveats a verdict carries, and the one home of the thresholds that decide them.

A leaderboard or a fidelity report is a number a newcomer will trust. Five things make it not
(yet) a verdict, and every view (API, pages, CLI) reads them from here:

- **no calibration**: a preset never checked against the published facts (the smoke presets
  ``vit-tiny`` / ``dit-tiny``, the earlier and the stress presets) has fidelity figures but no
  fidelity *headline*: on a model that ends at chance, "9/12 orders reproduced" is luck.
- **provisional ranking**: an arm with fewer than :data:`MIN_SEEDS` completed seeds has a
  95% interval that is wide or (two equal seeds) falsely narrow; its rank may move.
- **near chance**: a classification run that closes less than :data:`NEAR_CHANCE` of the gap
  between chance and a perfect score failed to train, on every preset (a preset's own
  ``min_learning`` may be 0, as the smoke presets' is, and then the trainer calls it complete).
- **too few cells**: a rank correlation over fewer than :data:`MIN_RANK_CELLS` cells, or
  "k of n orders" over fewer than :data:`MIN_ORDER_PAIRS` pairs, is not printed as a headline
  (+1.00 over two or three cells says nothing).
- **a heavy-tailed slope**: an arm whose function's slope has a square that is not integrable
  at a kink (the property ``heavy_tailed_slope``: exproot) is placed by its gradient noise,
  which a CPU screen's small batches leave in every step and scale's batches average away
  (bench/results/diagnoses-issue25.md, section 2f): its place is named as not a ranking.

Pure apart from reading the preset registry (no torch, no database).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

MIN_SEEDS = 3  # completed seeds per ranked arm below which a ranking is provisional
MIN_RANK_CELLS = 4  # cells of a setting before its rank correlation enters a headline
MIN_ORDER_PAIRS = 3  # resolvable published orders before "k/n reproduced" is a headline
NEAR_CHANCE = 0.1  # fraction of the chance-to-perfect gap a classification run must close
CHANCE_CLASSES = 10  # every registered classification dataset (digits, MNIST-1D, MNIST) has ten

__all__ = [
    "MIN_ORDER_PAIRS",
    "MIN_RANK_CELLS",
    "MIN_SEEDS",
    "NEAR_CHANCE",
    "board_caveats",
    "calibration_of",
    "near_chance",
    "near_chance_rule",
    "uncalibrated_note",
]


def calibration_of(proxy: str) -> str | None:
    """Where ``proxy`` was calibrated and what held (``Preset.calibration``); None: never, or
    not a registered preset."""
    from normfree.workers.proxies import PROXIES

    preset = PROXIES.get(proxy)
    return None if preset is None else preset.calibration


def uncalibrated_note(proxy: str) -> str:
    """What every view says beside the fidelity of a preset without a calibration."""
    return (
        f"{proxy} is not calibrated against the published results (only the default screens "
        "are, see the README's Fidelity section): its fidelity figures are not a verdict"
    )


def near_chance(acc: float | None, num_classes: int = CHANCE_CLASSES) -> bool:
    """Whether a classification accuracy ends near chance (failed to train)."""
    if acc is None:
        return False
    chance = 1.0 / max(2, num_classes)
    return (acc - chance) < NEAR_CHANCE * (1.0 - chance)


def _is_accuracy(objective: str | None) -> bool:
    return bool(objective) and str(objective).endswith("acc")


def near_chance_rule(proxy: str) -> Any:
    """For ``proxy``: a function of a completed trial's metrics saying it ended near chance, or
    None when the preset is not a classifier (a diffusion loss has no chance level; its
    failures are the trainer's divergence verdicts)."""
    from normfree.workers.proxies import PROXIES

    preset = PROXIES.get(proxy)
    if preset is None or preset.task != "classify":
        return None

    def rule(metrics: Mapping[str, Any] | None) -> bool:
        m = metrics or {}
        acc = m.get("val_acc", m.get(preset.objective))
        return isinstance(acc, int | float) and near_chance(float(acc))

    return rule


def _catalog_properties(name: Any) -> Mapping[str, Any]:
    """A catalog function's properties from the catalog index (cached JSON, no sympy once
    built): boards read from storage carry none for catalog functions (they are not stored
    rows), and a caveat must not depend on which view asked. {} for anything else."""
    if not isinstance(name, str):
        return {}
    try:
        from normfree.search_space import catalog_index

        entry = catalog_index.get(name)
    except Exception:  # a caveat is an addition: an index that cannot be read adds nothing
        return {}
    return (entry.data.get("properties") or {}) if entry is not None else {}


def board_caveats(proxy: str, rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """What a leaderboard says beside its ranking: calibration, provisional, near-chance arms,
    arms with a heavy-tailed slope.

    ``rows`` are leaderboard rows (``candidate`` or a label, ``n`` completed seeds, ``mean``,
    ``objective``, and ``properties`` where known). Arms with no completed seed are not ranked
    and do not make a board provisional; an arm whose mean ends near chance is named (it failed
    to train, and the fidelity report counts it so), as is an arm with a heavy-tailed slope.
    """
    calibration = calibration_of(proxy)
    ranked = [r for r in rows if (r.get("n") or 0) > 0 and r.get("mean") is not None]
    fewest = min((int(r["n"]) for r in ranked), default=None)
    provisional = fewest is not None and fewest < MIN_SEEDS
    chance = [
        str(r.get("label") or r.get("candidate"))
        for r in ranked
        if _is_accuracy(r.get("objective")) and near_chance(float(r["mean"]))
    ]
    heavy = [
        str(r.get("label") or r.get("candidate"))
        for r in ranked
        if (r.get("properties") or _catalog_properties(r.get("candidate"))).get(
            "heavy_tailed_slope"
        )
        is True
    ]
    notes = []
    if calibration is None:
        notes.append(uncalibrated_note(proxy))
    if provisional:
        notes.append(
            f"provisional ranking: an arm has {fewest} completed seed{'s' * (fewest != 1)} "
            f"(fewer than {MIN_SEEDS}); its interval is too wide, or too narrow if its seeds "
            "agree, to order it"
        )
    if chance:
        shown = ", ".join(chance[:5]) + (f" and {len(chance) - 5} more" if len(chance) > 5 else "")
        notes.append(
            f"ended near chance (failed to train, counted as failures in fidelity): {shown}"
        )
    if heavy:
        shown = ", ".join(heavy[:5]) + (f" and {len(heavy) - 5} more" if len(heavy) > 5 else "")
        notes.append(
            f"placed by gradient noise, not by shape: {shown} "
            f"{'has' if len(heavy) == 1 else 'have'} a slope whose square is not integrable "
            "at a kink (heavy-tailed slope); this screen's small batches leave that noise in "
            "every step, where scale averages it away, so such a place is not a ranking "
            "(bench/results/diagnoses-issue25.md, section 2f)"
        )
    return {
        "calibrated": calibration is not None,
        "calibration": calibration,
        "provisional": provisional,
        "min_seeds": MIN_SEEDS,
        "fewest_seeds": fewest,
        "near_chance": chance,
        "heavy_tailed": heavy,
        "notes": notes,
    }
