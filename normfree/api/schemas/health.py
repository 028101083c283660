"""Liveness and version models."""

from __future__ import annotations

from typing import Literal

from normfree.api.schemas._base import _Out

__all__ = ["Health", "Version"]


class Health(_Out):
    status: Literal["ok", "degraded"]
    database: str
    database_ok: bool
    detail: str | None = None


class Version(_Out):
    name: str = "normfree"
    version: str
    api: str = "1"
