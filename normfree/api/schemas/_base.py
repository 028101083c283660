"""The base classes every API model derives from, and the name pattern they share."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

# Anchored at both ends (pydantic's regex engine has no "before a final newline" $).
NAME_PATTERN = r"^[A-Za-z][A-Za-z0-9_\-]{0,63}$"


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)


class _Out(BaseModel):
    model_config = ConfigDict(from_attributes=True)
