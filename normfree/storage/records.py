"""The records storage answers with: one ``TypedDict`` per kind of row, the protocols' return types.

Storage answers plain dicts (JSON-ready: the API and the CLI serialise them as they are, and
a read cache keeps them without copying); these types say which keys each holds, so a caller
typed against ``storage.protocols`` sees a misspelt key, and another backend knows exactly
what to return. ``unreadable`` names stored fields that were not JSON (``db.tolerant_json_loads``):
they read as empty and the API says so.
"""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict


class CandidateRecord(TypedDict):
    """A stored candidate function (``CandidateStore.get_candidate``/``list_candidates``)."""

    id: int
    name: str
    formula: str
    canonical: str
    fingerprint: str
    lineage: dict[str, Any] | None
    group: str
    citation: str | None
    submitter: str | None
    properties: dict[str, Any]
    created_at: str | None
    prescreen: dict[str, Any] | None
    archived_at: str | None
    owner_token_id: int | None
    unreadable: NotRequired[list[str]]


class StudyRecord(TypedDict):
    """A stored study (``StudyStore.get_study``/``list_studies``); ``spec``: its StudySpec JSON."""

    id: int
    kind: str
    name: str | None
    proxy: str
    spec: dict[str, Any]
    status: str
    optuna_study_name: str | None
    owner_token_id: int | None
    tags: list[str]
    note: str | None
    archived_at: str | None
    created_at: str | None
    updated_at: str | None


class BestTrial(TypedDict):
    """The best finished trial of a study, as its progress reports it."""

    trial_id: int
    candidate: str
    axis_values: dict[str, Any]
    seed: int
    value: float | None
    objective: str | None
    direction: str | None


class StudyProgress(TypedDict):
    """Counts per trial status (every status, zeros included), totals, the best so far."""

    study_id: int
    status: str
    counts: dict[str, int]
    total: int
    finished: int
    fraction_finished: float
    best: BestTrial | None


class CurvePoint(TypedDict):
    """One epoch of a trial's curves."""

    epoch: int
    step: int | None
    train_loss: float | None
    val_loss: float | None
    metrics: dict[str, Any]
    lr: float | None
    wall_time_s: float | None


class TrialRecord(TypedDict):
    """A stored trial (``TrialLedger.get_trial``/``list_trials``); ``curves`` and
    ``diagnostics`` only where the trial's details were asked for (``get_trial``)."""

    id: int
    study_id: int | None
    trial_key: str
    arm_key: str | None
    proxy: str
    candidate: str
    norm: dict[str, Any]
    axis_values: dict[str, Any]
    seed: int
    config: dict[str, Any] | None
    status: str
    attempt: int
    releases: int
    lease_owner: str | None
    lease_expires_at: str | None
    optuna_number: int | None
    objective: str | None
    direction: str | None
    value: float | None
    metrics: dict[str, Any]
    eval_train_loss: float | None
    diverged_at_step: int | None
    spike_step: int | None
    failure: str | None
    train_time_s: float | None
    total_time_s: float | None
    worker: str | None
    error: str | None
    created_at: str | None
    started_at: str | None
    finished_at: str | None
    curves: NotRequired[list[CurvePoint]]
    diagnostics: NotRequired[list[dict[str, Any]]]
    unreadable: NotRequired[list[str]]


class TokenRecord(TypedDict):
    """An API token as listed (never its hash)."""

    name: str
    scopes: list[str]
    scope: str
    created_at: str | None
    revoked_at: str | None
    expires_at: str | None


class LeaderboardRow(TypedDict):
    """One arm of a leaderboard (``storage.leaderboard``): its summary over seeds, its
    comparison with LayerNorm and what could not be read."""

    arm_key: str
    candidate: str
    norm: dict[str, Any]
    axis_values: dict[str, Any]
    overrides: dict[str, Any]
    group: str | None
    properties: dict[str, Any]
    objective: str | None
    direction: str
    n: int
    n_trials: int
    n_diverged: int
    n_failed: int
    n_pruned: int
    mean: float | None
    std: float | None
    ci_half_width: float | None
    ci_low: float | None
    ci_high: float | None
    bound: float | None
    seeds: dict[str, float]
    vs_layernorm: dict[str, Any] | None
    study_ids: list[int]
    unreadable: list[str]
    rank: int | None  # 1 = best; None: no completed seed, listed unranked after the ranked
    ranked: bool
    p_vs_best: float | None  # Welch's test of its seeds against the best arm's
    indistinguishable_from_best: bool


__all__ = [
    "BestTrial",
    "CandidateRecord",
    "CurvePoint",
    "LeaderboardRow",
    "StudyProgress",
    "StudyRecord",
    "TokenRecord",
    "TrialRecord",
]
