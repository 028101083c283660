"""The base classes every API model derives from, and the name pattern they share."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

# Anchored at both ends (pydantic's regex engine has no "before a final newline" $).
NAME_PATTERN = r"^[A-Za-z][A-Za-z0-9_\-]{0,63}$"


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)


class _Out(BaseModel):
    model_config = ConfigDict(from_attributes=True)


def unreadable_field(shown_as: Literal["empty", "as null"]) -> Any:
    """The ``unreadable`` field of a model built from stored rows: the fields a corrupt row
    could not give, shown ``empty`` (lists, texts) or ``as null`` (numbers), never a 500."""
    return Field(
        default_factory=list,
        description=f"Stored fields that could not be read (corrupt rows): shown {shown_as}.",
    )
