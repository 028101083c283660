"""Study models: the create body (bounded so one study stays within a machine-day), its
progress, cells, trial pages and the removal answers."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import Field, field_validator

from normfree.api.schemas._base import _In, _Out, unreadable_field
from normfree.api.schemas.leaderboards import ArmFailure, BoardCaveats, ReliabilityPublic
from normfree.api.schemas.trials import TrialSummary
from normfree.specs import StudyKindName
from normfree.workers.kinds import KINDS

__all__ = [
    "ArchiveState",
    "ArmList",
    "BestArm",
    "Removal",
    "StudyCell",
    "StudyCreate",
    "StudyDeleted",
    "StudyDetail",
    "StudyList",
    "StudyPatch",
    "StudyProgress",
    "StudyPublic",
]


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
    unreadable: list[str] = unreadable_field("empty")
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


class StudyDetail(StudyPublic):
    objective: str | None = None
    direction: Literal["maximize", "minimize"] = "maximize"
    reliability: ReliabilityPublic | None = Field(
        default=None,
        description="Split-seed rank reliability of the study's cells (would their order "
        "reproduce itself on fresh seeds?), with the seeds that would bring it to 0.8.",
    )

    caveats: BoardCaveats | None = Field(
        default=None,
        description="What the cells' order says with care, as a leaderboard says it: "
        "calibration, a provisional ranking, cells whose mean ends near chance (failed to "
        "train, although the smoke presets' trainer calls such runs complete).",
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
