"""Liveness and version: what a load balancer or a compose healthcheck polls."""

from __future__ import annotations

from fastapi import APIRouter, Request

from normfree import __version__
from normfree.api import fastlane, reads
from normfree.api.deps import StateDep
from normfree.api.schemas import Health, Version
from normfree.api.schemas.health import FastLaneFigures, ReadBuilder

router = APIRouter(tags=["health"])


@router.get("/health", response_model=Health)
async def health(request: Request, state: StateDep) -> Health:
    """Whether the API and its database answer (always public, never needs a token).

    The ping runs where a small read costs least (``reads.small_read``: on the loop for SQLite,
    a short-work thread for a server database), never behind the thread pool's builds."""
    db = state.db
    builder = getattr(request.app.state, "builder", None)
    rb = (
        None
        if builder is None
        else ReadBuilder(ready=builder.ready, built=builder.built, refused=builder.refused)
    )
    lane = fastlane.of(request.app)
    figures = (
        None
        if lane is None or (lane.generation is None and not lane.direct)
        else FastLaneFigures(
            replayed=lane.hits,
            revalidated=lane.revalidated,
            shared=lane.shared,
            routed=lane.routed,
            direct=lane.direct_answers,
        )
    )
    try:
        await reads.small_read(state, db.ping)
        return Health(
            status="ok", database=db.dialect, database_ok=True, read_builder=rb, fast_lane=figures
        )
    except Exception as exc:  # a health check reports the failure instead of raising it
        return Health(
            status="degraded",
            database=db.dialect,
            database_ok=False,
            detail=f"{type(exc).__name__}: {exc}"[:300],
            read_builder=rb,
            fast_lane=figures,
        )


@router.get("/version", response_model=Version)
async def version() -> Version:
    """The normfree package version and the API version."""
    return Version(version=__version__)
