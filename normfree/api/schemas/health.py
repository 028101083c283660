"""Liveness and version models."""

from __future__ import annotations

from typing import Literal

from normfree.api.schemas._base import _Out

__all__ = ["FastLaneFigures", "Health", "ReadBuilder", "Version"]


class ReadBuilder(_Out):
    """The server's read builder process (``api.builder``): whether it is up, and how many
    rebuilds under a stream of writes it gave and could not give (those built in the server)."""

    ready: bool
    built: int
    refused: int


class FastLaneFigures(_Out):
    """How this server process answered its anonymous reads since its start (``api.fastlane``):
    what a dashboard under a writer costs depends on how many of them skip the app."""

    replayed: int  # stored answers sent again, the database unchanged (or their key held)
    revalidated: int  # of those, after a commit, their key computed again and unmoved
    shared: int  # of those, answers of the same read in flight, waited for
    routed: int  # through the app: a miss, a moved key, an answer not replayable
    direct: int  # answered by a direct route (one trial) before the app's routing


class Health(_Out):
    status: Literal["ok", "degraded"]
    database: str
    database_ok: bool
    detail: str | None = None
    # null where the server has none (off in the settings, or no stale window)
    read_builder: ReadBuilder | None = None
    # null where the lane is off (settings, a database without a generation) or unused yet
    fast_lane: FastLaneFigures | None = None


class Version(_Out):
    name: str = "normfree"
    version: str
    api: str = "1"
