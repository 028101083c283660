"""Leaderboard models: arms ranked over seeds, with their reliability, fidelity and caveats."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from normfree.api.schemas._base import _Out, unreadable_field

__all__ = [
    "ArmFailure",
    "BoardCaveats",
    "FidelitySummary",
    "LeaderboardPublic",
    "LeaderboardRow",
    "ReliabilityPublic",
]


class ArmFailure(_Out):
    """Why an arm's seeds failed: its most common reason (``storage.failures``)."""

    reason: str = Field(description="The most common reason, e.g. 'diverged: loss not finite'.")
    count: int = Field(description="Trials of the arm that failed for this reason.")
    failed: int = Field(description="Trials of the arm that failed or diverged, for any reason.")


class LeaderboardRow(_Out):
    """One arm (a candidate under one proxy) aggregated over seeds."""

    rank: int | None = Field(
        description="1 = best; None for an arm with no completed seed (listed last, unranked)."
    )
    ranked: bool = Field(
        default=True, description="False: no seed completed, so the arm is not ranked."
    )
    unranked_reason: str | None = Field(
        default=None, description="Why an unranked arm has no value (its failures, or pruning)."
    )
    failure: ArmFailure | None = Field(
        default=None, description="The arm's most common failure, when any seed failed."
    )
    candidate: str = Field(description="The arm's label: the function, and its options if any.")
    function: str | None = Field(
        default=None, description="The function the arm ran (its norm name, without options)."
    )
    arm_key: str | None = None
    group: str | None = None
    properties: dict[str, Any] = Field(default_factory=dict)
    n: int = Field(description="Seeds that completed and count towards the mean.")
    n_diverged: int = 0
    n_failed: int = 0
    n_total: int = 0
    mean: float | None = None
    std: float | None = None
    ci_low: float | None = Field(default=None, description="95% t confidence interval, low end.")
    ci_high: float | None = None
    is_best: bool = False
    indistinguishable: bool = Field(
        default=True, description="Welch's test cannot separate this arm from the best (p > 0.05)."
    )
    p_vs_best: float | None = None
    vs_layernorm: dict[str, Any] | None = Field(
        default=None, description="Paired difference to LayerNorm on the same seeds (mean, CI)."
    )
    unreadable: list[str] = unreadable_field("as null")


class ReliabilityPublic(_Out):
    """Split-seed rank reliability of the arms shown (``normfree.fidelity.reliability``): would
    the order reproduce itself on fresh seeds? It bounds what the order can say about scale."""

    reliability: float | None = Field(
        description="Spearman between disjoint seed halves, Spearman-Brown corrected to `seeds`."
    )
    low: float | None = Field(default=None, description="95% bootstrap interval over arms.")
    high: float | None = None
    seeds: int = Field(description="The seed count the reliability refers to.")
    arms: int = 0
    split_correlation: float | None = None
    single_seed: float | None = Field(default=None, description="The reliability of one seed.")
    seeds_for_target: int | None = Field(
        default=None,
        description="Seeds that would bring the reliability to `target` (null: none would).",
    )
    target: float = 0.8
    splits: int = 0
    reason: str | None = Field(default=None, description="Why `reliability` is null.")
    interval_behind: int = Field(
        default=0,
        description="Values (arm, seed) changed since the interval was bootstrapped: 0 when it "
        "is of the values shown. A live board carries its interval over while under 2% changed.",
    )
    text: str = Field(description="The one-line caption every view prints.")


class FidelitySummary(_Out):
    """How far a ranking predicts published at-scale results (the full report: /api/fidelity)."""

    reference: str = Field(description="The reference set compared with (default: published).")
    headline: str = Field(
        description="One line: orders reproduced, mean Spearman, failures; on a preset without "
        "a calibration, or over too few cells, it says so instead (normfree.fidelity.caveats)."
    )
    cells: int = 0
    settings_compared: int = 0
    spearman_mean: float | None = None
    kendall_mean: float | None = None
    pairs_resolvable: int = 0
    pairs_agree: int = 0
    pair_agreement: float | None = None
    failure_agreement: float | None = None
    calibrated: bool = Field(
        default=True,
        description="Whether the proxy was calibrated against the published results; if not, "
        "the headline says so and quotes no figure (the report still has them).",
    )
    calibration: str | None = Field(default=None, description="Where it was calibrated.")
    reliability: ReliabilityPublic | None = Field(
        default=None, description="Split-seed rank reliability of the compared trials' arms."
    )
    url: str = Field(description="The fidelity page of this proxy or study.")


class BoardCaveats(_Out):
    """What a leaderboard says beside its ranking (``normfree.fidelity.caveats``)."""

    calibrated: bool = Field(description="The proxy was calibrated against published results.")
    calibration: str | None = Field(default=None, description="Where, and what held.")
    provisional: bool = Field(
        description="Some ranked arm has fewer than min_seeds completed seeds: the order may move."
    )
    min_seeds: int
    fewest_seeds: int | None = None
    near_chance: list[str] = Field(
        default_factory=list,
        description="Arms whose mean ends near chance: failed to train (failures in fidelity).",
    )
    heavy_tailed: list[str] = Field(
        default_factory=list,
        description="Ranked arms whose function has a heavy-tailed slope (exproot): placed by "
        "the screen's gradient noise, not by shape; their place is not a ranking.",
    )
    notes: list[str] = Field(default_factory=list, description="Each caveat in words.")


class LeaderboardPublic(_Out):
    proxy: str
    objective: str | None = None
    direction: Literal["maximize", "minimize"] = "maximize"
    filters: dict[str, Any] = Field(default_factory=dict)
    fidelity: FidelitySummary | None = Field(
        default=None, description="The proxy's fidelity to the built-in published results."
    )
    caveats: BoardCaveats | None = Field(
        default=None, description="Calibration, provisional ranking, arms ending near chance."
    )
    reliability: ReliabilityPublic | None = Field(
        default=None, description="Split-seed rank reliability of the arms shown."
    )
    rows: list[LeaderboardRow]
    unreadable: list[str] = Field(
        default_factory=list,
        description="Parts that could not be built from stored data (e.g. ``fidelity``): null.",
    )
