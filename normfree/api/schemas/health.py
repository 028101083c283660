"""Liveness and version models."""

from __future__ import annotations

from typing import Literal

from normfree.api.schemas._base import _Out

__all__ = ["Health", "ReadBuilder", "Version"]


class ReadBuilder(_Out):
    """The server's read builder process (``api.builder``): whether it is up, and how many
    rebuilds under a stream of writes it gave and could not give (those built in the server)."""

    ready: bool
    built: int
    refused: int


class Health(_Out):
    status: Literal["ok", "degraded"]
    database: str
    database_ok: bool
    detail: str | None = None
    # null where the server has none (off in the settings, or no stale window)
    read_builder: ReadBuilder | None = None


class Version(_Out):
    name: str = "normfree"
    version: str
    api: str = "1"
