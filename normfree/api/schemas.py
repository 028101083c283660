"""The API's request and response models: separate families from the ORM rows.

``*Create`` models are what a client may send (``extra="forbid"``, every size bounded, so a hostile
body is a 422 with the field named, not a huge study or a 500). ``*Public`` models are what the
API answers; they are built by :mod:`normfree.api.services` from storage rows and never expose
internals (lease owners, token hashes). Bounds here are API policy, not science: they keep one
request within seconds and one study within a machine-day.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from normfree.specs import StudyKindName
from normfree.workers.kinds import KINDS

# Anchored at both ends (pydantic's regex engine has no "before a final newline" $).
NAME_PATTERN = r"^[A-Za-z][A-Za-z0-9_\-]{0,63}$"


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)


class _Out(BaseModel):
    model_config = ConfigDict(from_attributes=True)


# ------------------------------------------------------------------------------------ candidates


class CandidateCreate(_In):
    """A user formula f(u) to add to the search space."""

    name: str = Field(
        pattern=NAME_PATTERN,
        description="Identifier: a letter, then letters, digits, '_' or '-' (at most 64).",
        examples=["smoothsign2"],
    )
    formula: str = Field(
        min_length=1,
        max_length=500,
        description="f(u) in normfree's expression language (u or x; erf, tanh, clip, ...).",
        examples=["u/(1+abs(u))"],
    )
    description: str | None = Field(default=None, max_length=2000)


class PrescreenPublic(_Out):
    """The zero-cost check run at submission (seconds): does the initialised proxy train at all?"""

    status: Literal["pending", "done", "failed"] = Field(
        default="done",
        description="pending: it runs after the answer (GET the candidate for its result); "
        "failed: it could not run (see error); done: ok and result hold its verdict.",
    )
    ok: bool = Field(description="False when the prescreen could not run or flagged the function.")
    proxy: str | None = None
    result: dict[str, Any] = Field(default_factory=dict)
    error: str | None = None
    seconds: float | None = None


class PlotData(_Out):
    """f and f' sampled on a grid of u."""

    u: list[float]
    f: list[float]
    df: list[float]


class CandidatePublic(_Out):
    name: str
    formula: str | None = None
    canonical: str | None = None
    fingerprint: str | None = None
    group: str | None = None
    citation: str | None = None
    description: str | None = None
    properties: dict[str, Any] = Field(default_factory=dict)
    lineage: dict[str, Any] = Field(default_factory=dict)
    source: Literal["catalog", "user"] = "catalog"
    submitter: str | None = None
    created_at: datetime | None = None
    archived: bool = False
    unreadable: list[str] = Field(
        default_factory=list,
        description="Stored fields that could not be read (corrupt rows): shown empty.",
    )


class CandidateSubmitted(CandidatePublic):
    """The answer to a submission."""

    created: bool = Field(description="True when a new candidate was stored.")
    duplicate_of: str | None = Field(
        default=None,
        description="The existing candidate this formula equals (same canonical form or the same "
        "values on the probe grid); nothing new is stored then.",
    )
    prescreen: PrescreenPublic | None = None


class CandidateList(_Out):
    count: int
    items: list[CandidatePublic]


# ---------------------------------------------------------------------------------- leaderboards


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
    unreadable: list[str] = Field(
        default_factory=list,
        description="Stored fields that could not be read (corrupt rows): shown as null.",
    )


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


# ---------------------------------------------------------------------------------------- studies


class StudyCreate(_In):
    """A study, with the same options as ``normfree study new KIND`` (the kinds and their
    descriptions are the registry's, ``workers.kinds``)."""

    kind: StudyKindName = Field(
        description="; ".join(f"{k.name}: {k.summary}" for k in KINDS.values()),
        json_schema_extra={"enum": list(KINDS)},
    )
    name: str | None = Field(default=None, max_length=200)
    proxy: str = Field(max_length=100, examples=["vit-tiny"])
    seeds: int = Field(default=3, ge=1, le=20)
    functions: list[str] = Field(default_factory=list, max_length=32)
    transform: str | None = Field(default=None, max_length=64, examples=["shift_h"])
    values: list[float] = Field(default_factory=list, max_length=32)
    options: dict[str, list[bool | int | float | str]] = Field(default_factory=dict, max_length=8)
    norm_shift: Literal["none", "scalar", "channel"] | None = Field(
        default=None,
        description="The operator's s (none, scalar, channel). Not given: scalar for an options "
        "or search study of all 16 search candidates (the paper's search operator), else none.",
    )
    baselines: list[str] = Field(default_factory=list, max_length=3)
    epochs: int | None = Field(default=None, ge=1, le=1000)
    sampler: Literal["grid", "tpe", "random"] = "grid"
    pruner: Literal["none", "sha", "hyperband", "median"] = "none"
    n_trials: int | None = Field(default=None, ge=1, le=2000)
    extra_seeds_for_top: int = Field(default=0, ge=0, le=10)
    params: dict[str, Any] = Field(default_factory=dict, max_length=16)

    @field_validator("functions", "baselines")
    @classmethod
    def _short_names(cls, v: list[str]) -> list[str]:
        for item in v:
            if not (0 < len(item) <= 200):
                raise ValueError("each entry must be 1-200 characters")
        return v

    @field_validator("values")
    @classmethod
    def _finite_values(cls, v: list[float]) -> list[float]:
        import math

        if any(not math.isfinite(x) or abs(x) > 1e6 for x in v):
            raise ValueError("values must be finite numbers within +-1e6")
        return v

    @field_validator("options")
    @classmethod
    def _bounded_options(cls, v: dict[str, list[Any]]) -> dict[str, list[Any]]:
        for key, vals in v.items():
            if not (0 < len(key) <= 64):
                raise ValueError("option names must be 1-64 characters")
            if not (0 < len(vals) <= 16):
                raise ValueError(f"option {key!r} needs 1-16 values")
        return v


class BestArm(_Out):
    """The leading arm so far: the best mean over its completed seeds."""

    label: str
    function: str
    mean: float
    n: int = Field(description="Completed seeds behind the mean.")
    objective: str | None = None
    direction: Literal["maximize", "minimize"] = "maximize"


class StudyProgress(_Out):
    """Counts per trial status and what follows from them (``workers.progress``: the one
    place the API, the study page and ``normfree study status`` take them from)."""

    state: str = Field(
        default="pending",
        description="The state to show beside these counts: the study's status, except that a "
        "pending or running study with nothing left to run shows the outcome its driver writes "
        "next (complete, or failed when nothing trained). Read with the counts in one snapshot.",
    )
    total: int = 0
    waiting: int = 0
    running: int = 0
    complete: int = 0
    diverged: int = 0
    pruned: int = 0
    failed: int = 0
    cancelled: int = 0
    finished: int = 0
    fraction: float = 0.0
    throughput_per_min: float | None = Field(
        default=None,
        description="Trials finished per minute over the 10 minutes before the latest finish "
        "(from the first trial's start in a younger study); null before any finished.",
    )
    window_trials: int = Field(default=0, description="Finished trials the throughput counts.")
    last_finished_at: datetime | None = None
    eta_s: float | None = Field(
        default=None,
        description="Seconds from last_finished_at to the end at that throughput (trials "
        "planned so far); null unless the study is live and something has finished.",
    )
    eta_at: datetime | None = Field(
        default=None,
        description="When the study should end (last_finished_at + eta_s): an instant, so the "
        "answer (and its ETag) changes only when a trial finishes; count down to it.",
    )
    best: BestArm | None = Field(
        default=None,
        description="The best arm so far (a single study's answer only; null in lists).",
    )
    reused: int = Field(
        default=0,
        description="Finished trials answered by an earlier study's run of the same trial key "
        "and trainer code (never trained here; each names its source in reused_from); the "
        "throughput leaves them out.",
    )


class Removal(_Out):
    """What a delete removes, listed before anything is removed (``?dry_run=true`` answers
    only this): rows counted per table, the leaderboard arms folded again without them, the
    Optuna study removed with them, and why the delete would be refused now (``blocked``)."""

    study_id: int | None = None
    arm_key: str | None = None
    candidate: str | None = None
    status: str | None = None
    archived: bool = False
    trials: int = 0
    curve_points: int = 0
    diagnostics: int = 0
    arms: list[str] = Field(default_factory=list)
    leaderboard_arms: int = Field(
        default=0, description="Leaderboard arm summaries folded again without these trials."
    )
    proxies: list[str] = Field(default_factory=list)
    optuna_study: str | None = Field(
        default=None,
        description="The Optuna study deleted with a whole study (an arm's Optuna trials stay: "
        "the sampler's history of a study that still exists).",
    )
    used_by_studies: list[int] = Field(
        default_factory=list, description="A candidate: the studies whose trials ran it."
    )
    blocked: str | None = Field(
        default=None, description="Why the delete would be refused now (409), or null."
    )


class StudyDeleted(_Out):
    """The answer to deleting a study (or one of its arms, or a candidate): what was removed,
    or with ``dry_run`` what would be, nothing removed."""

    id: int | None = None
    deleted: bool = True
    dry_run: bool = False
    removes: Removal | None = None


class StudyPatch(_In):
    """Tags and a note on a study (each part optional)."""

    add_tags: list[str] = Field(default_factory=list, max_length=20)
    remove_tags: list[str] = Field(default_factory=list, max_length=20)
    note: str | None = Field(
        default=None, max_length=5000, description="The new note; an empty string clears it."
    )


class ArchiveState(_Out):
    """An archive or a restore: what now is archived."""

    study_id: int | None = None
    arm_key: str | None = None
    candidate: str | None = None
    archived: bool
    trials: int | None = Field(default=None, description="An arm: its trials in the study.")


class StudyPublic(_Out):
    id: int
    kind: str
    name: str | None = None
    proxy: str
    status: str
    spec: dict[str, Any]
    created_at: datetime | None = None
    updated_at: datetime | None = None
    progress: StudyProgress
    running_in_background: bool = Field(
        default=False, description="An execution thread of this API process is driving it."
    )
    unreadable: list[str] = Field(
        default_factory=list,
        description="Stored fields that could not be read (corrupt rows): shown empty.",
    )
    tags: list[str] = Field(default_factory=list)
    note: str | None = None
    archived: bool = Field(
        default=False, description="Archived: off lists and leaderboards unless asked for."
    )
    estimate: dict[str, Any] | None = Field(
        default=None,
        description="On creation only: trials, estimated trial-seconds (one core per trial) and "
        "the server's budget (NORMFREE_MAX_STUDY_TRIAL_SECONDS).",
    )


class StudyCell(_Out):
    """One arm of a study (a function at one transform value / option combination)."""

    function: str
    label: str
    value: float | None = None
    options: dict[str, Any] = Field(default_factory=dict)
    baseline: bool = False
    n: int = 0
    n_diverged: int = 0
    n_failed: int = 0
    n_total: int = 0
    mean: float | None = None
    std: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    arm_keys: list[str] = Field(
        default_factory=list, description="Its arms (what archiving or deleting an arm names)."
    )
    archived: bool = Field(default=False, description="Every arm of it is archived.")
    failure: ArmFailure | None = Field(
        default=None, description="The cell's most common failure, when any seed failed."
    )


class ArmList(_Out):
    """A study's arms (``GET /api/studies/{id}/arms``): its cells, in the study's order."""

    study_id: int
    count: int
    items: list[StudyCell]


class TrialSummary(_Out):
    id: int
    candidate: str
    seed: int
    status: str
    attempt: int = 0
    axis_values: dict[str, Any] | None = Field(default_factory=dict)
    objective_value: float | None = None
    reused_from: int | None = Field(
        default=None,
        description="The trial (of an earlier study) whose result this one carries: the same "
        "trial key under the same trainer code, so it was not trained again.",
    )
    unreadable: list[str] = Field(
        default_factory=list,
        description="Stored fields that could not be read (corrupt rows): shown as null.",
    )


class TrialPage(_Out):
    """One page of a study's trials, in id order; pass ``next_cursor`` back for the next."""

    count: int
    items: list[TrialSummary]
    next_cursor: str | None = None


class StudyDetail(StudyPublic):
    objective: str | None = None
    direction: Literal["maximize", "minimize"] = "maximize"
    reliability: ReliabilityPublic | None = Field(
        default=None,
        description="Split-seed rank reliability of the study's cells (would their order "
        "reproduce itself on fresh seeds?), with the seeds that would bring it to 0.8.",
    )

    cells: list[StudyCell] = Field(default_factory=list)
    trials: list[TrialSummary] = Field(
        default_factory=list,
        description="One page of the study's trials in id order (``trials_limit``, 100 by "
        "default); none with ``trials=false``.",
    )
    trials_next_cursor: str | None = Field(
        default=None,
        description="The next page of trials: pass it back as ``trials_cursor`` (or as "
        "``cursor`` to /api/studies/{id}/trials); null on the last page.",
    )
    archived_arms: list[str] = Field(
        default_factory=list, description="Arms of this study taken off the leaderboards."
    )
    generate: dict[str, Any] | None = Field(
        default=None,
        description="generate studies: proposals per generation and why they were rejected, "
        "lineage of the trained, trial-seconds avoided, and property importance.",
    )
    search: dict[str, Any] | None = Field(
        default=None,
        description="search studies: every function named, whether it was trained, pruned, "
        "failed or never tried and why (budget exhausted, pruned), and how many asks were "
        "answered from stored results instead of training a point again.",
    )
    report: dict[str, Any] | None = Field(
        default=None,
        description="What the study's kind reports beyond its cells, whatever the kind (the "
        "same object as the field named after the kind, where there is one).",
    )


class StudyList(_Out):
    count: int
    items: list[StudyPublic]


# ----------------------------------------------------------------------------------------- trials


class CurvePoint(_Out):
    """One epoch of a learning curve (``specs.EpochRecord``; non-finite values become null)."""

    epoch: int
    step: int
    train_loss: float | None = None
    val_loss: float | None = None
    metrics: dict[str, float | None] = Field(default_factory=dict)
    lr: float | None = None
    wall_time_s: float | None = None


class LayerDiagnosticPublic(_Out):
    """One norm slot at one epoch (``specs.LayerDiagnostic``; non-finite values become null)."""

    epoch: int
    layer: str
    alpha: float | None = None
    s_mean: float | None = None
    gamma_mean: float | None = None
    gamma_std: float | None = None
    beta_mean: float | None = None
    beta_std: float | None = None
    input_std: float | None = Field(default=None, description="std of the norm's input")
    input_absmax: float | None = None
    branch_norm: float | None = Field(default=None, description="RMS of the residual branch")
    grad_norm: float | None = None
    extra: dict[str, float | None] = Field(default_factory=dict)


class TrialPublic(_Out):
    id: int
    study_id: int
    candidate: str
    proxy: str
    seed: int
    status: str
    attempt: int = 0
    axis_values: dict[str, Any] | None = Field(default_factory=dict)
    config: dict[str, Any] | None = Field(default_factory=dict)
    objective: str | None = None
    direction: str | None = None
    objective_value: float | None = None
    metrics: dict[str, Any] | None = Field(default_factory=dict)
    eval_train_loss: float | None = None
    diverged_at_step: int | None = None
    spike_step: int | None = Field(
        default=None, description="training step where the loss first spiked (or diverged)"
    )
    failure: str | None = Field(
        default=None, description="why a diverged trial failed to train (None otherwise)"
    )
    train_time_s: float | None = None
    total_time_s: float | None = None
    worker: str | None = None
    error: str | None = None
    code_version: str | None = Field(
        default=None, description="The trainer's code version that produced the result."
    )
    reused_from: int | None = Field(
        default=None,
        description="The trial whose result this one carries (same key, same trainer code).",
    )
    created_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    curves: list[CurvePoint] = Field(default_factory=list)
    diagnostics: list[LayerDiagnosticPublic] = Field(default_factory=list)
    unreadable: list[str] = Field(
        default_factory=list,
        description="Stored fields that could not be read (corrupt rows): shown as null.",
    )


# ----------------------------------------------------------------------------------------- health


class Health(_Out):
    status: Literal["ok", "degraded"]
    database: str
    database_ok: bool
    detail: str | None = None


class Version(_Out):
    name: str = "normfree"
    version: str
    api: str = "1"


# ------------------------------------------------------------------------------------ references


class ReferenceSetDeleted(_Out):
    """The answer to deleting a reference set: its rows went with it (with ``dry_run``, would
    go: nothing removed)."""

    name: str
    deleted: bool = True
    dry_run: bool = False
    rows: int | None = None


class ReferenceSetPublic(_Out):
    """A stored reference set (published at-scale results)."""

    name: str
    title: str = ""
    source: str
    description: str = ""
    builtin: bool = False
    submitter: str | None = None
    created_at: datetime | None = None
    n_rows: int
    settings: list[str] = Field(default_factory=list)


class ReferenceSetDetail(ReferenceSetPublic):
    rows: list[dict[str, Any]] = Field(
        default_factory=list,
        description="setting, family, metric, direction, resolution, cell {function, shift, "
        "alpha}, value_low, value_high, failed, note (and value = the interval's midpoint).",
    )


class ReferenceSetList(_Out):
    count: int
    items: list[ReferenceSetPublic]


class FidelityReport(_Out):
    """Fidelity of a proxy (or a study) to a reference set; see normfree.fidelity.report."""

    reference: dict[str, Any]
    subject: dict[str, Any]
    family: str
    headline: str
    summary: dict[str, Any]
    settings: list[dict[str, Any]] = Field(
        description="Per setting: cells both have, Spearman and Kendall with bootstrap "
        "intervals over seeds, pairwise orders, failure agreement, scatter data."
    )
    not_compared: list[str] = Field(default_factory=list)
    calibrated: bool = True
    calibration: str | None = None
    caveats: list[str] = Field(default_factory=list)
    reliability: ReliabilityPublic | None = Field(
        default=None,
        description="Split-seed rank reliability of the trials compared (the preset's setting, "
        "or the study), in the objective's direction: the ceiling of any agreement with scale.",
    )


# ---------------------------------------------------------------------------------------- screens


class ScreenCreate(_In):
    """Place a function among the paper's 16 search candidates (``normfree screen``)."""

    function: str = Field(
        min_length=1,
        max_length=200,
        description="A catalog name, a stored candidate or a formula in u.",
        examples=["u/(1+abs(u)+u*u)"],
    )
    proxies: list[str] = Field(
        default_factory=list,
        max_length=4,
        description="Screens to place it on (default: the default ViT and DiT screens).",
    )
    seeds: int = Field(default=3, ge=2, le=20, description="Paired seeds per arm.")


class ScreenOne(_Out):
    """One screen: its study (created, or found from an earlier request) and the placement."""

    proxy: str
    study_id: int
    found_existing: bool = Field(description="An earlier request made this very screen.")
    status: str
    trials: int
    reused: int = Field(description="Trials answered by earlier runs (not trained again).")
    to_train: int = Field(description="Trials left to train (the function's, mostly).")
    placement: dict[str, Any] | None = Field(
        default=None,
        description="Where the function ranks among the 16 (once nothing is left to train): "
        "rank, the 16 it beats and trails beyond 2 seed stds, the board's rank reliability, "
        "the screen's fidelity headline, caveats, and a sentence (text).",
    )


class ScreenPublic(_Out):
    function: str
    screens: list[ScreenOne]
