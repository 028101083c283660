"""Reference-set models (published at-scale results) and the fidelity report judged against them."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import Field

from normfree.api.schemas._base import _Out
from normfree.api.schemas.leaderboards import ReliabilityPublic

__all__ = [
    "FidelityReport",
    "ReferenceSetDeleted",
    "ReferenceSetDetail",
    "ReferenceSetList",
    "ReferenceSetPublic",
]


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
