"""Candidate models: what a client submits (a formula f(u)) and what the API answers about one."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import Field

from normfree.api.schemas._base import NAME_PATTERN, _In, _Out, unreadable_field

__all__ = [
    "CandidateCreate",
    "CandidateList",
    "CandidatePublic",
    "CandidateSubmitted",
    "PlotData",
    "PrescreenPublic",
]


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
    unreadable: list[str] = unreadable_field("empty")


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
