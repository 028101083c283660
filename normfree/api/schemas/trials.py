"""Trial models: a study's page of trial summaries, and one trial with its learning curve and
per-layer diagnostics."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import Field

from normfree.api.schemas._base import _Out, public_copy, unreadable_field
from normfree.specs import EpochRecord, LayerDiagnostic

__all__ = ["CurvePoint", "LayerDiagnosticPublic", "TrialPage", "TrialPublic", "TrialSummary"]


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
    unreadable: list[str] = unreadable_field("as null")


class TrialPage(_Out):
    """One page of a study's trials, in id order; pass ``next_cursor`` back for the next."""

    count: int
    items: list[TrialSummary]
    next_cursor: str | None = None


CurvePoint = public_copy(
    EpochRecord,
    "CurvePoint",
    "One epoch of a learning curve (``specs.EpochRecord``; non-finite values become null).",
)
LayerDiagnosticPublic = public_copy(
    LayerDiagnostic,
    "LayerDiagnosticPublic",
    "One norm slot at one epoch (``specs.LayerDiagnostic``; non-finite values become null).",
)


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
    unreadable: list[str] = unreadable_field("as null")
